"""What the numba kernels cost against the stock ones: one-token and k-token verify forwards.

On a CPU model (default bfloat16) with a cache prefilled to ``--context`` positions, each round
times, for the stock kernels and for the numba ones (``kernels="numba"``: the row-wise linear,
attention and activation kernels, which keep a token's logits independent of the other tokens
of the forward), one forward over 1 token and one over each ``--verify`` width k, the cache cut
back after each. The kernel sets alternate within a round and their order flips every round.
Printed: per forward, each set's median milliseconds, the median of the paired ratios numba /
stock (one round, the two sets back to back), and each set's verify(k) / one-token ratio.

    python benchmarks/kernel_cost.py --model ~/.cache/layersearch/gguf/qwen2.5-coder-1.5b*.gguf --dtype bfloat16 \\
        --context 256 --verify 4,8,16 --repeats 15 --out kernel_cost.json

Run time: (repeats + 1) x 2 x (1 + the verify forwards) forwards; on the 1.5B model in bfloat16,
about a minute per 10 repeats on a few cores, besides loading. ``--tiny llama`` (or ``qwen2``)
times a tiny random model instead: a check that the script runs, not a measure of anything.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import tool_args  # benchmarks/ is on sys.path when a script runs
from tool_args import ToolParser, run_tool

from layersearch.common.errors import LayersearchError

KERNEL_SETS = ("stock", "numba")


def main(argv: list[str] | None = None) -> int:
    parser = ToolParser(__file__, description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="a model layersearch loads (default: the embedded SmolLM2-135M)")
    parser.add_argument("--tiny", help="a tiny random model of this family in place of --model (llama, qwen2, ...)")
    parser.add_argument("--random-weights", action="store_true", help="the model's architecture from its config alone "
                                                                        "(costs depend on shapes and dtype, not values)")
    parser.add_argument("--dtype", default="bfloat16", help="float32, float16 or bfloat16 (default bfloat16)")
    parser.add_argument("--context", type=int, default=256, help="positions in the cache before each forward (default 256)")
    parser.add_argument("--verify", default="4,8,16", help="verify widths k, comma-separated (default 4,8,16)")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds (default 15; one more warms up)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--out", help="write the raw timings, argv, commit and versions as JSON")
    args = parser.parse_args(argv)
    return run_tool(parser, lambda: cost(args))


def check_args(args: argparse.Namespace) -> list[int]:
    """Every argument checked before the model loads; the verify widths."""
    from layersearch.kernels.rowwise_linear import MAX_TOKENS
    from layersearch.models.tiny import TINY_FAMILIES

    tool_args.dtypes(args.dtype, "--dtype")
    tool_args.count(args.context, "--context")
    tool_args.count(args.repeats, "--repeats")
    tool_args.threads(args.threads)
    if args.tiny is not None:
        tool_args.name(args.tiny, "--tiny", TINY_FAMILIES)
    try:
        widths = [int(k) for k in args.verify.split(",")]
    except ValueError:
        raise LayersearchError(f"--verify: expected comma-separated integers, got {args.verify!r}") from None
    for k in widths:
        tool_args.count(k, "--verify", minimum=2, maximum=MAX_TOKENS)
    if args.out and Path(args.out).exists():
        raise LayersearchError(f"--out {args.out} exists: it is never overwritten")
    tool_args.output(args.out)
    return widths


def cost(args: argparse.Namespace) -> int:
    """Measure, print the table, write ``--out``."""
    widths = check_args(args)
    report = measure(args, widths)
    print(table(report))
    if args.out:
        from layersearch.common.provenance import provenance

        Path(args.out).write_text(json.dumps({**report, **provenance()}, indent=1))
        print(f"wrote {args.out}")
    return 0


def _model(args: argparse.Namespace) -> Any:
    """The model on the CPU in ``--dtype``: tiny, random-weights or loaded."""
    from layersearch.models.loading import load_model, random_weights_model, resolve_dtype
    from layersearch.models.tiny import build_tiny_model

    if args.tiny is not None:
        model = build_tiny_model(args.tiny, num_layers=4, seed=0)
        return model.to(resolve_dtype(args.dtype))  # type: ignore[arg-type]  # transformers wraps PreTrainedModel.to with functools.wraps(Module.to), which mistypes self
    load = random_weights_model if args.random_weights else load_model
    return load(args.model, dtype=args.dtype).model


def measure(args: argparse.Namespace, widths: list[int]) -> dict[str, Any]:
    """Each kernel set's seconds per forward, rounds interleaved: {set: {width: [seconds]}}."""
    import torch

    from layersearch.kernels.select import model_kernels
    from layersearch.runtime.cache import new_cache, truncate_cache
    from layersearch.runtime.forward import forward_tokens

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    model = _model(args)
    vocab = model.get_input_embeddings().num_embeddings
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(vocab, (args.context + max(widths),), generator=generator)
    seconds: dict[str, dict[int, list[float]]] = {name: {k: [] for k in [1, *widths]} for name in KERNEL_SETS}
    with torch.inference_mode():
        cache = new_cache(model)
        forward_tokens(model, ids[: args.context], 0, cache, keep=1)  # the prefill: stock either way past 64 tokens
        for round_ in range(args.repeats + 1):  # round 0 warms up (compiles, caches)
            order = KERNEL_SETS if round_ % 2 == 0 else KERNEL_SETS[::-1]
            for name in order:
                with model_kernels(model, name):
                    for k in [1, *widths]:
                        start = time.perf_counter()
                        forward_tokens(model, ids[args.context : args.context + k], args.context, cache)
                        elapsed = time.perf_counter() - start
                        truncate_cache(cache, args.context)
                        if round_:
                            seconds[name][k].append(elapsed)
            if round_:
                print(f"round {round_}/{args.repeats} done", file=sys.stderr, flush=True)
    return {"model": f"tiny-{args.tiny}" if args.tiny else args.model, "dtype": args.dtype, "context": args.context,
            "threads": torch.get_num_threads(), "repeats": args.repeats, "seconds": seconds}


def table(report: dict[str, Any]) -> str:
    """Medians, paired ratios and verify ratios as a markdown table."""
    seconds = report["seconds"]
    stock, numba = seconds["stock"], seconds["numba"]
    rows = ["| forward | stock ms | numba ms | numba / stock (paired) | stock verify/1 | numba verify/1 |",
            "|---|---|---|---|---|---|"]
    for k in stock:
        s, n = statistics.median(stock[k]), statistics.median(numba[k])
        paired = statistics.median(b / a for a, b in zip(stock[k], numba[k]))
        label = "1 token" if k == 1 else f"verify {k}"
        ratios = "| - | - |" if k == 1 else f"| {s / statistics.median(stock[1]):.2f} | {n / statistics.median(numba[1]):.2f} |"
        rows.append(f"| {label} | {s * 1e3:.2f} | {n * 1e3:.2f} | {paired:.3f} {ratios}")
    rows.append(f"\n{report['model']}, {report['dtype']}, context {report['context']}, {report['threads']} thread(s), "
                f"medians of {report['repeats']} interleaved rounds")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
