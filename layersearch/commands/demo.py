"""``layersearch demo``: ``tune`` on the embedded model with a small budget, on code prompts.

Code is where prompt lookup pays (a function's body repeats names from its signature and
docstring), so the demo shows a speedup found, checked on held-out prompts and written as a
spec that ``generate --spec`` runs.

Beside it, the model as its own draft (:mod:`layersearch.tune.demo`): the uniform int8
self-draft, the searched draft plan shipped with the package, and prompt lookup falling back to
it, on held-out code prompts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from layersearch.commands.args import model_args

DEMO_PROMPTS = 40  # code prompts written to the demo's prompt file (about 8 land in the test split)


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``demo``: its arguments."""
    p = sub.add_parser("demo", help="short demo on the embedded model: tune on code prompts, held-out speedup, a spec")
    model_args(p, threads=1)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--budget", type=float, default=60.0, help="search seconds (default 60)")
    p.add_argument("--out-dir", default="demo", help="folder for the prompt file, spec and report (default demo/)")
    p.set_defaults(command="demo")


def run(args: Any) -> int:
    """Write code prompts to a file, tune on them with a small budget, print the held-out table."""
    from layersearch.commands import tune
    from layersearch.commands.common import load, positive_int
    from layersearch.data import write_prompt_file
    from layersearch.tune import TuneSettings
    from layersearch.tune.demo import PLAN_MAX_DRAFT, plan_lines, shipped_plan
    from layersearch.tune.report import held_out_table

    TuneSettings("-", args.budget, "demo", max_new_tokens=args.max_new_tokens)  # checks the numbers before any work
    if args.threads is not None:
        positive_int(args.threads, "--threads")
    folder = Path(args.out_dir)
    prompts = folder / "code_prompts.jsonl"
    write_prompt_file(prompts, "code", DEMO_PROMPTS)  # HumanEval-style prompts from the built-in code set
    quick = tune_args("--prompts", str(prompts), "--budget", str(args.budget), "--out", str(folder / "spec.json"),
                      "--name", "demo", "--storage", f"sqlite:///{folder / 'demo.db'}", "--train-prompts", "2",
                      "--test-prompts", "3", "--repeats", "1", "--finalists", "2")
    for name in ("model", "device", "dtype", "threads", "max_new_tokens"):
        setattr(quick, name, getattr(args, name))
    print(f"tuning on {prompts} for {args.budget:g} s (layersearch tune --prompts FILE does this on yours)", file=sys.stderr)
    result = tune.tune_from_args(quick)
    print(held_out_table(result), flush=True)
    print("\n".join(plan_lines(load(args), args.max_new_tokens, result.kernels, say)), flush=True)
    print(f"run it: layersearch generate --spec {folder / 'spec.json'} --prompt \"def fib(n):\"", flush=True)
    print(f"the plan: layersearch generate --mask {shipped_plan()} --lookahead static --max-draft {PLAN_MAX_DRAFT} "
          "--prompt \"def fib(n):\"", flush=True)
    return 0


def say(message: str) -> None:
    """A progress line on stderr."""
    print(message, file=sys.stderr, flush=True)


def tune_args(*argv: str) -> argparse.Namespace:
    """``tune``'s arguments as its own parser reads ``argv`` (its defaults for the rest)."""
    from layersearch.commands import tune

    parser = argparse.ArgumentParser(prog="layersearch")
    tune.add_parser(parser.add_subparsers(dest="command"), argparse.ArgumentParser)
    return parser.parse_args(["tune", *argv])

