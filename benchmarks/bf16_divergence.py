"""Where greedy speculative decoding in bf16 parts from plain ``generate``, and how often.

In fp32 every greedy method here gives plain ``generate``'s tokens (the tests check it). In bf16
(or fp16) a verification forward over k+1 tokens rounds differently from a one-token forward, so
where the model's two best tokens are nearly tied the two paths can pick different ones and the
texts part there. transformers' own assisted generation does the same, as does any change of
batch shape. This script decodes the same prompts greedily with plain ``generate`` (the
baseline) and each method, in one run, and reports per method: the rows that differ from
``generate``, each row's first differing position, differing rows per 1,000 generated tokens,
the rows that differ from our own plain loop (the same kernels as our drafts), and the largest
logit gap between the two tokens at a divergence (in the run's dtype, one forward over the
prefix): a small gap is a near-tie, a large one would be a bug.

Methods: ``loop`` (our plain loop, nothing drafted), ``prompt-lookup``, ``int8-self`` and
``int4-self`` (the model as its own int8 / int4 draft, ``drafter.quant``), ``draft-model``
(``--draft-model`` as our drafter), ``hf-prompt-lookup`` (``prompt_lookup_num_tokens=10``) and
``hf-assisted`` (``assistant_model=`` the ``--draft-model``). A method the settings refuse (the
int8 self-draft on a CPU takes float32 weights only) is reported with the reason, not run.
vLLM is not covered: it needs an environment of its own.

    python benchmarks/bf16_divergence.py --model $Q15 --rows 16 --max-new-tokens 128 --out bf16_divergence.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import tool_args  # benchmarks/ is on sys.path when a script runs
from tool_args import ToolParser, run_tool

from layersearch.common.checks import check_draft_length
from layersearch.common.errors import LayersearchError

EXAMPLE_PROMPTS = Path(__file__).resolve().parents[1] / "examples" / "code40.jsonl"
#: every method, in the order they run; the last two also need ``--draft-model``
METHODS = ("loop", "prompt-lookup", "int8-self", "int4-self", "draft-model", "hf-prompt-lookup", "hf-assisted")
NEED_DRAFT_MODEL = ("draft-model", "hf-assisted")
#: rows of a prompt file by split: ``held-out`` is validation and test (what tune never searches on)
SPLITS = {"held-out": ("validation", "test"), "test": ("test",), "validation": ("validation",),
          "train": ("train",), "all": ("train", "validation", "test")}
KERNELS = ("auto", "stock", "numba")


def main(argv: list[str] | None = None) -> int:
    parser = ToolParser(__file__, description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="the verifier (default: the embedded SmolLM2-135M)")
    parser.add_argument("--draft-model", help="a draft model sharing the tokenizer: adds draft-model and hf-assisted")
    parser.add_argument("--prompts", default=str(EXAMPLE_PROMPTS), help="a prompt file (default examples/code40.jsonl)")
    parser.add_argument("--split", default="held-out", help=f"its rows to use: {', '.join(SPLITS)} (default held-out)")
    parser.add_argument("--rows", type=int, help="the first N rows of the split, in file order (default: all of them)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="new tokens per row (default 64)")
    parser.add_argument("--max-draft", type=int, default=4, help="our drafts' static length (default 4)")
    parser.add_argument("--methods", default=",".join(m for m in METHODS if m not in NEED_DRAFT_MODEL),
                        help=f"comma-separated, from {', '.join(METHODS)} (default: those needing no draft model; "
                             "with --draft-model, add its two)")
    parser.add_argument("--dtype", default="bfloat16", help="the models' dtype (default bfloat16; float32 is the control)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    parser.add_argument("--kernels", default="auto", help=f"our decoders' CPU kernels: {', '.join(KERNELS)} (default auto)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--out", help="write every row's tokens, the divergences, argv, commit and versions as JSON")
    args = parser.parse_args(argv)
    return run_tool(parser, lambda: divergence_run(args, argv))


def check_args(args: argparse.Namespace) -> list[str]:
    """The methods to run, every argument checked before any model loads: one line naming the option otherwise."""
    methods = tool_args.names(args.methods, "--methods", METHODS)
    needing = [m for m in methods if m in NEED_DRAFT_MODEL]
    if needing and not args.draft_model:
        raise LayersearchError(f"--methods {','.join(needing)}: these decode with a draft model, and --draft-model names none")
    if args.rows is not None:
        tool_args.count(args.rows, "--rows")
    tool_args.count(args.max_new_tokens, "--max-new-tokens")
    check_draft_length(args.max_draft, "--max-draft")
    tool_args.name(args.split, "--split", SPLITS)
    tool_args.name(args.kernels, "--kernels", KERNELS)
    tool_args.dtypes(args.dtype, "--dtype")
    if "," in args.dtype:
        raise LayersearchError(f"--dtype: one dtype per run, got {args.dtype!r}")
    args.device = tool_args.device(args.device)
    tool_args.threads(args.threads)
    if args.out and Path(args.out).exists():
        raise LayersearchError(f"--out {args.out} exists: it is never overwritten")
    tool_args.output(args.out)
    prompt_rows(args.prompts, args.split, args.rows)  # a bad file or too few rows: before the load
    return methods


def prompt_rows(path: str, split: str, count: int | None) -> list[Any]:
    """The first ``count`` distinct rows of the prompt file ``path`` in ``split``, in file order."""
    from layersearch.data.splits import in_split
    from layersearch.data.user import read_rows

    try:
        every = read_rows(path)
    except LayersearchError as exc:
        raise LayersearchError(f"--prompts: {exc}") from None
    rows = [row for row in every if any(in_split(f"user/{row.id}", s) for s in SPLITS[split])]
    if count is not None and len(rows) < count:
        raise LayersearchError(f"--rows {count}: {path} has {len(rows)} distinct rows in split {split}")
    if not rows:
        raise LayersearchError(f"--split {split}: {path} has no rows there")
    return rows[:count]


def divergence_run(args: argparse.Namespace, argv: list[str] | None) -> int:
    """Check, decode, print the table, write ``--out``."""
    methods = check_args(args)
    report = measure(args, methods)
    print(table(report))
    if args.out:
        from layersearch.common.provenance import provenance

        import layersearch

        record = {**report, **provenance(sys.argv if argv is None else ["bf16_divergence.py", *argv]),
                  "layersearch": layersearch.__version__}
        Path(args.out).write_text(json.dumps(record, indent=1))
        print(f"wrote {args.out}")
    return 0


def measure(args: argparse.Namespace, methods: list[str]) -> dict:
    """Every row decoded by plain ``generate`` and by each method; the divergences."""
    import torch

    from layersearch.data.user import render
    from layersearch.models.loading import load_model
    from layersearch.runtime.baseline import hf_generate

    torch.set_num_threads(args.threads)
    loaded = load_model(args.model, device=args.device, dtype=args.dtype)
    rows = prompt_rows(args.prompts, args.split, args.rows)
    prompts = [loaded.tokenizer(render(row, loaded.tokenizer, args.prompts), return_tensors="pt").input_ids for row in rows]
    n = args.max_new_tokens
    plain = decode_all(lambda ids: hf_generate(loaded.model, ids, n).token_ids, prompts, "generate")
    results: dict[str, dict] = {}
    loop_tokens: list[tuple[int, ...]] | None = None
    for method in methods:
        try:
            run = runner(method, args, loaded)
        except LayersearchError as exc:  # the settings refuse this method (e.g. int8 weights from bf16 on a CPU)
            results[method] = {"refused": str(exc)}
            print(f"{method}: not run: {exc}", file=sys.stderr, flush=True)
            continue
        done = decode_all(run, prompts, method)
        tokens = done["tokens"]
        loop_tokens = tokens if method == "loop" else loop_tokens
        firsts = [first_difference(a, b) for a, b in zip(plain["tokens"], tokens)]
        gaps = [None if p is None else tie_gap(loaded.model, ids, a, b, p)
                for ids, a, b, p in zip(prompts, plain["tokens"], tokens, firsts)]
        results[method] = {"tokens": tokens, "seconds": done["seconds"], "first_difference": firsts, "logit_gap": gaps}
    generated = sum(len(t) for t in plain["tokens"])
    for method, result in results.items():
        if "tokens" in result:
            result["differing_rows"] = sum(p is not None for p in result["first_difference"])
            result["per_1000_tokens"] = 1000.0 * result["differing_rows"] / max(generated, 1)
            if loop_tokens is not None:
                result["differing_from_loop"] = sum(a != b for a, b in zip(loop_tokens, result["tokens"]))
    return {"model": args.model, "draft_model": args.draft_model, "dtype": args.dtype, "device": args.device,
            "kernels": args.kernels, "threads": args.threads, "prompts": args.prompts, "split": args.split,
            "row_ids": [row.id for row in rows], "max_new_tokens": n, "max_draft": args.max_draft,
            "generated_tokens": generated, "plain": plain, "methods": results}


def runner(method: str, args: argparse.Namespace, loaded: Any) -> Callable[[Any], tuple[int, ...]]:
    """``method``'s greedy decode of one prompt ``[1, n]`` -> its new tokens; LayersearchError where refused."""
    from layersearch.runtime.baseline import hf_generate

    n = args.max_new_tokens
    if method == "hf-prompt-lookup":
        return lambda ids: hf_generate(loaded.model, ids, n, prompt_lookup_num_tokens=10).token_ids
    if method == "hf-assisted":
        from layersearch.models.loading import load_model

        assistant = load_model(args.draft_model, device=args.device, dtype=args.dtype).model
        return lambda ids: hf_generate(loaded.model, ids, n, assistant_model=assistant).token_ids
    import layersearch

    decoder = layersearch.load_decoder(our_spec(method, args, loaded.info), model=loaded, kernels=args.kernels)
    return lambda ids: decoder.generate(ids, n).token_ids


def our_spec(method: str, args: argparse.Namespace, info: Any) -> Any:
    """The decoder spec of one of our methods, drafting ``--max-draft`` tokens a step."""
    from layersearch.decoder.spec import DecoderSpec, DrafterSpec, LookaheadSpec, MaskSourceSpec, ModelRef, ModelSpec
    from layersearch.masks.mask import SkipMask

    model = ModelSpec(ModelRef.given(args.model), device=args.device, dtype=args.dtype)
    static = LookaheadSpec("static", args.max_draft)
    if method == "loop":  # an empty mask: nothing drafts
        return DecoderSpec(model, lookahead=static, mask_source=MaskSourceSpec("mask", mask=SkipMask.none(info.num_layers, info)))
    if method in ("int8-self", "int4-self"):  # the default source: the whole model in that precision
        return DecoderSpec(model, lookahead=static, drafter=DrafterSpec(quant=method[:4]))
    drafter = DrafterSpec("prompt-lookup") if method == "prompt-lookup" else DrafterSpec(model=ModelRef.given(args.draft_model))
    return DecoderSpec(model, lookahead=static, drafter=drafter, mask_source=MaskSourceSpec("none"))


def decode_all(run: Callable[[Any], tuple[int, ...]], prompts: list[Any], name: str) -> dict:
    """``run`` over every prompt: the tokens and seconds of each."""
    tokens, seconds = [], []
    for ids in prompts:
        start = time.perf_counter()
        tokens.append(tuple(run(ids)))
        seconds.append(time.perf_counter() - start)
    print(f"{name}: {len(prompts)} rows, {sum(seconds):.1f} s", file=sys.stderr, flush=True)
    return {"tokens": tokens, "seconds": seconds}


def first_difference(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    """The first position where ``a`` and ``b`` differ (one ending early counts there); None when equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def tie_gap(model: Any, ids: Any, plain: tuple[int, ...], other: tuple[int, ...], position: int) -> float | None:
    """The logit of ``plain``'s token minus ``other``'s at ``position``, from one forward over the
    prompt and ``plain``'s tokens before it (None where one of them ended there)."""
    import torch

    if position >= len(plain) or position >= len(other):
        return None
    prefix = torch.cat([ids, torch.tensor([plain[:position]], dtype=ids.dtype)], dim=1).to(model.device)
    with torch.inference_mode():
        logits = model(prefix).logits[0, -1].float()
    return float(logits[plain[position]] - logits[other[position]])


def table(report: dict) -> str:
    """One row per method, as a markdown table, with what was decoded under it."""
    rows = ["| method | rows differing from generate | first difference per row | per 1,000 tokens | "
            "differing from our loop | largest logit gap |", "|---|---|---|---|---|---|"]
    count = len(report["row_ids"])
    for method, result in report["methods"].items():
        if "refused" in result:
            rows.append(f"| {method} | not run: {result['refused']} | | | | |")
            continue
        firsts = " ".join("-" if p is None else str(p) for p in result["first_difference"])
        gaps = [abs(g) for g in result["logit_gap"] if g is not None]
        loop = result.get("differing_from_loop")
        rows.append(f"| {method} | {result['differing_rows']}/{count} | {firsts} | {result['per_1000_tokens']:.2f} | "
                    f"{'' if loop is None else f'{loop}/{count}'} | {f'{max(gaps):.3g}' if gaps else ''} |")
    rows.append(f"\n{report['model']} in {report['dtype']} on {report['device']}, {count} rows of {report['prompts']} "
                f"({report['split']}), {report['max_new_tokens']} new tokens, greedy, drafts of {report['max_draft']}, "
                f"kernels {report['kernels']}, {report['threads']} thread(s); {report['generated_tokens']} tokens from generate")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
