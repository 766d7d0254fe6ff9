"""The cost of going through transformers' ``generate``: ``model.generate(custom_generate=
layersearch.decoding(spec))`` against ``Decoder.generate`` on the same spec, model and prompts.

Both decode with the same decoder (built once, on the same model object), so the difference is
what ``generate`` adds around the loop: preparing the config, processors and criteria, and our
reading of them. Runs are interleaved (the order flips every round) and every pair's tokens must
match; the table shows each side's median seconds per prompt, and the overhead is the median of the
paired ratios (each prompt's two runs back to back), with its quartiles.
The goal: at most 3 % on the CPU, the embedded model, 64 new tokens.

    python benchmarks/hf_overhead.py --max-new-tokens 64 --rounds 7 --out hf_overhead.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import tool_args  # benchmarks/ is on sys.path when a script runs
from tool_args import ToolParser, run_tool

from layersearch.common.errors import LayersearchError

PROMPTS = (
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "def quicksort(xs):\n    \"\"\"Sort a list with quicksort.\"\"\"\n",
    "The capital of France is",
    "class Stack:\n    \"\"\"A last-in first-out stack.\"\"\"\n\n    def __init__(self):\n",
)


def main(argv: list[str] | None = None) -> int:
    parser = ToolParser(__file__, description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="a model layersearch loads (default: the embedded SmolLM2-135M)")
    parser.add_argument("--spec", help="a decoder spec file (default: prompt lookup, static drafts of 8)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=len(PROMPTS), help=f"how many of the {len(PROMPTS)} built-in prompts")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--out", help="write the raw timings, argv, commit and versions as JSON")
    args = parser.parse_args(argv)
    return run_tool(parser, lambda: overhead(args, argv))


def check_args(args: argparse.Namespace) -> None:
    """Every argument checked before the model loads: one line naming the option otherwise."""
    tool_args.count(args.max_new_tokens, "--max-new-tokens")
    tool_args.count(args.rounds, "--rounds")
    tool_args.count(args.prompts, "--prompts", maximum=len(PROMPTS))
    tool_args.threads(args.threads)
    if args.out and Path(args.out).exists():
        raise LayersearchError(f"--out {args.out} exists: it is never overwritten")
    tool_args.output(args.out)


def overhead(args: argparse.Namespace, argv: list[str] | None) -> int:
    """Measure, print the table, write ``--out``."""
    check_args(args)
    report = measure(args)
    print(table(report))
    if args.out:
        Path(args.out).write_text(json.dumps({**report, "argv": sys.argv if argv is None else ["hf_overhead.py", *argv]}, indent=1))
        print(f"wrote {args.out}")
    return 0


def measure(args: argparse.Namespace) -> dict:
    """Time both sides over the prompts, interleaved; raises LayersearchError on bad input."""
    import torch

    import layersearch
    from layersearch.decoder.spec import DecoderSpec, LookaheadSpec, ModelRef, ModelSpec
    from layersearch.models.loading import load_model

    torch.set_num_threads(args.threads)
    spec = DecoderSpec.load(args.spec) if args.spec else DecoderSpec(
        ModelSpec(ModelRef.given(args.model)), drafter="prompt-lookup", lookahead=LookaheadSpec("static", 8))
    loaded = load_model(args.model)
    decoder = layersearch.load_decoder(spec, model=loaded)
    method = layersearch.decoding(spec)
    model, tokenizer = loaded.model, loaded.tokenizer
    prompts = [tokenizer(text, return_tensors="pt").input_ids for text in PROMPTS[: args.prompts]]  # each [1, n]

    def ours(ids):
        return decoder.generate(ids, args.max_new_tokens).token_ids

    def through_generate(ids):
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                             do_sample=False, custom_generate=method)
        return tuple(out[0, ids.shape[1]:].tolist())

    sides = {"Decoder.generate": ours, "generate(custom_generate=...)": through_generate}
    for run in sides.values():  # warm-up: the decoder is built, kernels chosen, caches made
        run(prompts[0])
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    for round_index in range(args.rounds):
        order = list(sides) if round_index % 2 == 0 else list(reversed(sides))
        for index, ids in enumerate(prompts):
            tokens = {}
            for name in order:
                start = time.perf_counter()
                tokens[name] = sides[name](ids)
                seconds[name].append(time.perf_counter() - start)
            if len(set(tokens.values())) != 1:
                raise LayersearchError(f"prompt {index}: the two sides decoded different tokens")
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    # The overhead is the median of paired ratios (one prompt, one round, the two sides back to back):
    # prompts of different lengths and a loaded machine's drift cancel within a pair, not across pairs.
    ratios = sorted(h / b for b, h in zip(seconds["Decoder.generate"], seconds["generate(custom_generate=...)"]))
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": _commit(),
        "versions": _versions(), "machine": {"processor": platform.processor() or platform.machine(),
                                             "threads": args.threads},
        "model": args.model, "spec": spec.to_dict(), "max_new_tokens": args.max_new_tokens, "prompts": args.prompts,
        "rounds": args.rounds, "seconds": seconds, "medians": medians, "pair_ratios": ratios,
        "overhead": statistics.median(ratios) - 1.0, "overhead_quartiles": [quartiles[0] - 1.0, quartiles[2] - 1.0],
    }


def table(report: dict) -> str:
    """The medians side by side and the overhead, as a markdown table."""
    rows = ["| side | median s / prompt | runs |", "|---|---|---|"]
    for name, median in report["medians"].items():
        rows.append(f"| {name} | {median:.4f} | {len(report['seconds'][name])} |")
    rows.append(f"\noverhead of generate(custom_generate=...) over Decoder.generate: {100 * report['overhead']:+.1f} % "
                f"(median of {len(report['pair_ratios'])} paired runs; quartiles {100 * report['overhead_quartiles'][0]:+.1f} % "
                f"to {100 * report['overhead_quartiles'][1]:+.1f} %) "
                f"({report['model']}, {report['max_new_tokens']} new tokens, {report['rounds']} rounds, "
                f"{report['machine']['threads']} thread(s))")
    return "\n".join(rows)


def _commit() -> str | None:
    import subprocess

    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def _versions() -> dict[str, str]:
    import torch
    import transformers

    import layersearch

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "layersearch": layersearch.__version__}


if __name__ == "__main__":
    sys.exit(main())
