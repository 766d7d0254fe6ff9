"""Argument parser of ``layersearch study ...`` (create, run, list, show, export, compare, head-to-head).

Kept apart from :mod:`layersearch.commands.study` so that ``--help`` imports neither Optuna
nor torch. Names (strategy, objective, domain) are checked by the command, which lists the
known ones in its one-line error.
"""

from __future__ import annotations

import argparse
from typing import Any

from layersearch.cli import DEFAULT_MODEL, DEFAULT_STORAGE_HELP

OBJECTIVE_HELP = "time-per-token, matchness, expected-speedup or tpt"


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Add ``study`` and its sub-actions to the CLI's sub-parsers."""
    p = sub.add_parser("study", help="search masks with Optuna studies (create, run, list, show, export, compare)")
    actions = p.add_subparsers(dest="action", required=True, parser_class=parser_class)

    c = actions.add_parser("create", help="create a study (settings stored with it; latency profile measured)")
    c.add_argument("--name", required=True)
    _model_args(c)
    c.add_argument("--domain", required=True, help="prompt domain (summarization, math, code, translation, storytelling, sql)")
    c.add_argument("--strategy", required=True, help="selfsd-bo, swift, random, tpe, uniform or knapsack")
    c.add_argument("--objective", required=True, help=OBJECTIVE_HELP)
    c.add_argument("--storage", help=DEFAULT_STORAGE_HELP)
    _search_args(c)
    c.add_argument("--profile", help="latency profile JSON (default: measure a quick one now)")

    r = actions.add_parser("run", help="run (or resume) a study's trials")
    r.add_argument("--name", required=True)
    r.add_argument("--storage", help=DEFAULT_STORAGE_HELP)
    r.add_argument("--trials", type=int, help="trials to run now (default 50 unless --timeout is given)")
    r.add_argument("--timeout", type=float, help="stop starting trials after this many seconds")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument("--heartbeat", type=int, default=None,
                   help="seconds between Optuna heartbeats on RDB storages (default 10; grace 3x)")
    _threads_arg(r)

    ls = actions.add_parser("list", help="list studies (all studies/*.db without --storage)")
    ls.add_argument("--storage", help="Optuna storage URL (default: every studies/*.db)")
    ls.add_argument("--json", action="store_true", help="print JSON")

    s = actions.add_parser("show", help="best trial, mask, objective, M, alpha and search time of a study")
    s.add_argument("--name", required=True)
    s.add_argument("--storage", help=DEFAULT_STORAGE_HELP)
    s.add_argument("--json", action="store_true", help="print JSON")

    e = actions.add_parser("export", help="write a trial's mask file (with provenance)")
    e.add_argument("--name", required=True)
    e.add_argument("--storage", help=DEFAULT_STORAGE_HELP)
    e.add_argument("--trial", default="best", help="'best' (default) or a trial number")
    e.add_argument("--out", required=True, help="mask JSON file to write")

    cmp_ = actions.add_parser("compare", help="compare studies; measures each best mask vs plain generate")
    cmp_.add_argument("--names", nargs="+", required=True)
    cmp_.add_argument("--storage", help=DEFAULT_STORAGE_HELP)
    cmp_.add_argument("--out-prefix", default="compare", help="writes PREFIX.csv and PREFIX.json (default compare)")
    cmp_.add_argument("--no-measure", action="store_true", help="report the trials' own M/alpha/tokens/s, measure nothing")
    cmp_.add_argument("--repeats", type=int, default=1, help="measurement rounds (default 1)")
    cmp_.add_argument("--split", default="test", help="prompt split measured on: train, validation or test (default test)")
    _threads_arg(cmp_)

    h = actions.add_parser(
        "head-to-head",
        help="benchmark: swift, selfsd-bo and random under the same wall-clock budget on one domain",
    )
    _model_args(h)
    h.add_argument("--domain", default="summarization")
    h.add_argument("--budget", type=float, default=600.0, help="search seconds per strategy (default 600)")
    h.add_argument("--strategies", default="swift,selfsd-bo,random", help="comma-separated (default swift,selfsd-bo,random)")
    h.add_argument("--random-objective", default="matchness", help=f"objective of the random search ({OBJECTIVE_HELP}; default matchness)")
    h.add_argument("--prefix", default=None, help="study name prefix (default h2h-<domain>-<time>)")
    h.add_argument("--storage", help="one Optuna storage for all three studies (default: sqlite file per study)")
    h.add_argument("--out-prefix", default=None, help="table files PREFIX.csv/.json (default: the study prefix)")
    h.add_argument("--repeats", type=int, default=1, help="measurement rounds of the final comparison")
    h.add_argument("--quiet", action="store_true")
    h.add_argument("--profile", help="latency profile JSON (default: measure a quick one)")
    _search_args(h, ratio_help="skip ratio of swift and random (default: swift's 0.45)")

    p.set_defaults(command="study")


def _model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"embedded name, HF id or local directory (default {DEFAULT_MODEL})")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--dtype", default=None, help="float32, float16 or bfloat16 (default by device)")
    _threads_arg(parser)


def _threads_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")


def _search_args(parser: argparse.ArgumentParser, ratio_help: str = "skip ratio (strategies with a fixed count)") -> None:
    parser.add_argument("--skip-ratio", type=float, default=None, help=ratio_help)
    parser.add_argument("--samples", type=int, default=8, help="representative prompts (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    parser.add_argument("--prompt-seed", type=int, default=0, help="which prompts of the train split are searched on (default 0)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens generated per prompt (default 32)")
    parser.add_argument("--gamma", type=int, default=32, help="matchness window (default 32)")
    parser.add_argument("--max-draft", type=int, default=8, help="maximum draft length (default 8)")
    parser.add_argument("--draft-threshold", type=float, default=0.8, help="stop drafting below this top-1 probability (default 0.8)")
    parser.add_argument("--decode-stats", action="store_true", help="matchness trials also run the decoder to record M, alpha, tokens/s")
