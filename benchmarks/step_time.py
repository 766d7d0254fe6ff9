"""The decode loop's own time per step, for one source tree or two side by side.

On a tiny random Llama (4 layers, 64 wide) a step's forwards cost little, so the time per step is
mostly the loop's bookkeeping: the step a refactor of ``runtime/`` must not slow. The decoder is
Self-SD with a uniform 0.5 mask and static drafts of 3, greedy, eager, one thread. Each ``--tree``
(a checkout of layersearch: this one, or an older commit's, ``git clone . ../old && git -C ../old
checkout REV``) runs in a Python process of its own, the trees interleaved round by round (the
order flips every round); every run's tokens must match. Printed: each tree's median milliseconds per step and, for two trees, the median of the
paired ratios (second over first) with their spread.

    python benchmarks/step_time.py --tree ../old --tree . --rounds 5 --out step_time.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import tool_args  # benchmarks/ is on sys.path when a script runs
from tool_args import ToolParser, run_tool

from layersearch.common.errors import LayersearchError

#: What a worker process runs: the loop of ``tree`` (its package first on the path, any editable
#: install's finder set aside), a warm-up, then ``repeats`` generations; one JSON line out.
WORKER = r"""
import json, statistics, sys, time
tree, new_tokens, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sys.meta_path = [finder for finder in sys.meta_path if "editable" not in repr(finder).lower()]
sys.path.insert(0, tree)
import torch
torch.set_num_threads(1)
import layersearch.runtime.loop as loop
from layersearch.masks.mask import SkipMask
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.lookahead import StaticLookahead
model = build_tiny_model("llama", num_layers=4, seed=0)
model.generation_config.eos_token_id = None
decoder = loop.SpeculativeDecoder(model, SkipMask.uniform(4, 0.5), lookahead=StaticLookahead(3))
prompt = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
decoder.generate(prompt, new_tokens)
milliseconds = []
for _ in range(repeats):
    start = time.perf_counter()
    result = decoder.generate(prompt, new_tokens)
    milliseconds.append(1e3 * (time.perf_counter() - start) / len(result.stats.steps))
print(json.dumps({"loop": loop.__file__, "ms_per_step": statistics.median(milliseconds),
                  "steps": len(result.stats.steps), "tokens": list(result.token_ids)}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = ToolParser(__file__, description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", help="a layersearch checkout (repeat for two; default: this one)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--repeats", type=int, default=5, help="generations per run, their median kept (default 5)")
    parser.add_argument("--new-tokens", type=int, default=128, help="new tokens per generation (default 128)")
    parser.add_argument("--out", help="write the raw timings, argv, commits and versions as JSON")
    args = parser.parse_args(argv)
    return run_tool(parser, lambda: compare(args, argv))


def check_args(args: argparse.Namespace) -> list[Path]:
    """The trees to run, every argument checked first: one line naming the option otherwise."""
    tool_args.count(args.rounds, "--rounds")
    tool_args.count(args.repeats, "--repeats")
    tool_args.count(args.new_tokens, "--new-tokens")
    trees = [Path(tree).resolve() for tree in args.tree or [str(Path(__file__).resolve().parents[1])]]
    if len(trees) > 2:
        raise LayersearchError(f"--tree: at most two trees are compared, got {len(trees)}")
    for tree in trees:
        if not (tree / "layersearch" / "runtime" / "loop.py").is_file():
            raise LayersearchError(f"--tree {tree}: not a layersearch checkout (no layersearch/runtime/loop.py)")
    if args.out and Path(args.out).exists():
        raise LayersearchError(f"--out {args.out} exists: it is never overwritten")
    tool_args.output(args.out)
    return trees


def compare(args: argparse.Namespace, argv: list[str] | None) -> int:
    """Measure, print the table, write ``--out``."""
    trees = check_args(args)
    report = measure(trees, args)
    print(table(report))
    if args.out:
        Path(args.out).write_text(json.dumps({**report, "argv": sys.argv if argv is None else ["step_time.py", *argv]}, indent=1))
        print(f"wrote {args.out}")
    return 0


def measure(trees: list[Path], args: argparse.Namespace) -> dict:
    """Each tree's milliseconds per step, round by round; raises LayersearchError when tokens differ."""
    runs: list[list[float]] = [[] for _ in trees]
    tokens: set[tuple[int, ...]] = set()
    for round_index in range(args.rounds):
        order = range(len(trees)) if round_index % 2 == 0 else reversed(range(len(trees)))
        for index in order:
            run = _worker(trees[index], args.new_tokens, args.repeats)
            runs[index].append(run["ms_per_step"])
            tokens.add(tuple(run["tokens"]))
        if len(tokens) != 1:
            raise LayersearchError("the trees decoded different tokens: their loops are not the same decoder")
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "versions": _versions(),
        "machine": platform.processor() or platform.machine(), "new_tokens": args.new_tokens, "repeats": args.repeats,
        "rounds": args.rounds,
        "trees": [{"tree": str(tree), "commit": _commit(tree), "ms_per_step": ms, "median": statistics.median(ms)}
                  for tree, ms in zip(trees, runs)],
    }
    if len(trees) == 2:
        report["pair_ratios"] = sorted(b / a for a, b in zip(*runs))
    return report


def table(report: dict) -> str:
    """The medians side by side (and the paired ratio), as a markdown table."""
    rows = ["| tree | commit | median ms / step | runs |", "|---|---|---|---|"]
    for tree in report["trees"]:
        rows.append(f"| {tree['tree']} | {(tree['commit'] or '?')[:10]} | {tree['median']:.3f} | {len(tree['ms_per_step'])} |")
    if "pair_ratios" in report:
        ratios = report["pair_ratios"]
        rows.append(f"\nsecond / first: {statistics.median(ratios):.3f} (median of {len(ratios)} paired rounds; "
                    f"{ratios[0]:.3f} to {ratios[-1]:.3f})")
    return "\n".join(rows)


def _worker(tree: Path, new_tokens: int, repeats: int) -> dict:
    done = subprocess.run([sys.executable, "-c", WORKER, str(tree), str(new_tokens), str(repeats)],
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise LayersearchError(f"--tree {tree}: its loop failed: {last}")
    run = json.loads(done.stdout.strip().splitlines()[-1])
    if not run["loop"].startswith(str(tree)):  # another installed copy answered
        raise LayersearchError(f"--tree {tree}: ran {run['loop']} instead")
    return run


def _commit(tree: Path) -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def _versions() -> dict[str, str]:
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__}


if __name__ == "__main__":
    sys.exit(main())
