"""``layersearch demo``: a short vanilla-vs-speculative run on a few prompts of the embedded model."""

from __future__ import annotations

import argparse
from typing import Any

from layersearch.commands import bench
from layersearch.commands.args import model_args


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``demo``: its arguments."""
    p = sub.add_parser("demo", help="short demo on the embedded model: vanilla vs speculative")
    model_args(p)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.set_defaults(command="demo")


def run(args: Any) -> int:
    """The benchmark with small settings: 2 domains x 2 prompts, no peers, one ratio."""
    quick = bench_args(
        "--domains", "summarization,code", "--prompts-per-domain", "2", "--skip-ratios", "0.15",
        "--repeats", "1", "--out", "demo.json", "--no-peers", "--drafters", "",
        "--max-draft", "6", "--draft-threshold", "0.5",
    )
    for name in ("model", "device", "dtype", "threads", "max_new_tokens"):
        setattr(quick, name, getattr(args, name))
    return bench.run(quick)


def bench_args(*argv: str) -> argparse.Namespace:
    """``bench``'s arguments as its own parser reads ``argv`` (its defaults for the rest)."""
    parser = argparse.ArgumentParser(prog="layersearch")
    bench.add_parser(parser.add_subparsers(dest="command"), argparse.ArgumentParser)
    return parser.parse_args(["bench", *argv])
