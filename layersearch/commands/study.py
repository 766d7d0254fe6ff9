"""``layersearch study <action>``: create, run, list, show, export and compare mask searches.

The work is done by :mod:`layersearch.study`; this module turns arguments into calls and
results into lines. ``head-to-head`` lives in :mod:`layersearch.commands.headtohead`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from layersearch.checks import check_int
from layersearch.commands import headtohead
from layersearch.commands.args import STORAGE_HELP, model_args, threads_arg
from layersearch.commands.study_common import OBJECTIVE_HELP, fmt, format_run_summary, format_table, log, search_args, settings_from_args
from layersearch.commands.study_common import strategy_option_args


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Add ``study`` and its sub-actions to the CLI's sub-parsers."""
    p = sub.add_parser("study", help="search masks with Optuna studies (create, run, list, show, export, compare)")
    actions = p.add_subparsers(dest="action", required=True, parser_class=parser_class)

    c = actions.add_parser("create", help="create a study (settings stored with it; latency profile measured)")
    c.add_argument("--name", required=True)
    model_args(c)
    c.add_argument("--domain", help="prompt domain (summarization, math, code, translation, storytelling, sql, "
                                    "mix:a,b,..., file:PROMPTS.jsonl); or --prompts")
    c.add_argument("--prompts", metavar="FILE", help="your own prompts (JSONL: {\"prompt\": ...} or {\"messages\": [...]} "
                                                     "per line), split train/validation/test by a hash of each row")
    c.add_argument("--strategy", required=True, help="selfsd-bo, swift, random, tpe, uniform or knapsack")
    c.add_argument("--objective", help=f"{OBJECTIVE_HELP} (required unless --preset gives it)")
    c.add_argument("--storage", help=STORAGE_HELP)
    search_args(c)
    strategy_option_args(c)
    c.add_argument("--profile", help="latency profile JSON (default: measure a quick one now)")

    r = actions.add_parser("run", help="run (or resume) a study's trials")
    r.add_argument("--name", required=True)
    r.add_argument("--storage", help=STORAGE_HELP)
    r.add_argument("--trials", type=int, help="trials to run now (default 50 unless --timeout is given)")
    r.add_argument("--timeout", type=float, help="stop starting trials after this many seconds")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument("--heartbeat", type=int, default=None,
                   help="seconds between Optuna heartbeats on RDB storages (default 10; grace 3x)")
    threads_arg(r)

    ls = actions.add_parser("list", help="list studies (all studies/*.db without --storage)")
    ls.add_argument("--storage", help="Optuna storage URL (default: every studies/*.db)")
    ls.add_argument("--json", action="store_true", help="print JSON")

    s = actions.add_parser("show", help="best trial, mask, objective, M, alpha and search time of a study")
    s.add_argument("--name", required=True)
    s.add_argument("--storage", help=STORAGE_HELP)
    s.add_argument("--json", action="store_true", help="print JSON")

    e = actions.add_parser("export", help="write a trial's mask file (with provenance)")
    e.add_argument("--name", required=True)
    e.add_argument("--storage", help=STORAGE_HELP)
    e.add_argument("--trial", default="best", help="'best' (default) or a trial number")
    e.add_argument("--out", required=True, help="mask JSON file to write")

    cmp_ = actions.add_parser("compare", help="compare studies; measures each best mask vs plain generate")
    cmp_.add_argument("--names", nargs="+", required=True)
    cmp_.add_argument("--storage", help=STORAGE_HELP)
    cmp_.add_argument("--out-prefix", default="compare", help="writes PREFIX.csv and PREFIX.json (default compare)")
    cmp_.add_argument("--no-measure", action="store_true", help="report the trials' own M/alpha/tokens/s, measure nothing")
    cmp_.add_argument("--repeats", type=int, default=1, help="measurement rounds (default 1)")
    cmp_.add_argument("--split", default="test", help="prompt split measured on: train, validation or test (default test)")
    threads_arg(cmp_)

    headtohead.add_parser(actions, parser_class)

    p.set_defaults(command="study")


def run(args: Any) -> int:
    """Dispatch on ``args.action``."""
    quiet_optuna(getattr(args, "quiet", False))
    if getattr(args, "threads", None) is not None:
        import torch

        from layersearch.commands.common import positive_int

        torch.set_num_threads(positive_int(args.threads, "--threads"))
    if args.action == "head-to-head":
        return headtohead.run(args)
    return {
        "create": _create,
        "run": _run,
        "list": _list,
        "show": _show,
        "export": _export,
        "compare": _compare,
    }[args.action](args)


def quiet_optuna(quiet: bool = False) -> None:
    """Silence Optuna's INFO logging (one line per trial otherwise), and transformers' loading
    bars unless stderr is a terminal (they would fill logs) or with ``quiet``."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if quiet or not _stderr_is_terminal():
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _create(args: Any) -> int:
    from layersearch.study import create_study

    result = create_study(args.name, settings_from_args(args), storage=args.storage, profile_path=args.profile, log=log)
    if result.created:
        extra = f", {result.enqueued} mask(s) enqueued" if result.enqueued else ""
        print(f"created study {result.name} in {result.url} ({_describe(result.settings)}{extra})")
    else:
        print(f"study {result.name} already exists in {result.url} with the same settings")
    return 0


def _run(args: Any) -> int:
    from layersearch.study import DEFAULT_HEARTBEAT, run_study

    heartbeat = DEFAULT_HEARTBEAT if args.heartbeat is None else args.heartbeat
    check_int(heartbeat, "--heartbeat (seconds)")
    summary = run_study(args.name, storage=args.storage, trials=args.trials, timeout=args.timeout,
                        quiet=args.quiet, heartbeat=heartbeat)
    print(format_run_summary(summary))
    return 0


def _list(args: Any) -> int:
    from layersearch.study import list_studies

    rows, problems = list_studies(args.storage)
    for problem in problems:
        log(f"layersearch: warning: {problem}")
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no studies" + ("" if args.storage else " in studies/*.db"))
        return 0
    columns = ("name", "strategy", "objective", "domain", "model", "complete", "trials", "best_value", "storage")
    print(format_table(rows, columns))
    return 0


def _show(args: Any) -> int:
    from layersearch.study import show_study

    info = show_study(args.name, storage=args.storage)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    settings = info["settings"]
    lines = [
        f"study      {info['name']}  ({info['storage']})",
        f"settings   {_describe_dict(settings)}",
        f"trials     {info['trials']} ({', '.join(f'{k.lower()} {v}' for k, v in sorted(info['states'].items())) or 'none'})",
        f"search     {info['search_seconds']:.1f} s in trials ({info['span_seconds']:.1f} s first start to last end)",
    ]
    best = info["best"]
    if best is None:
        lines.append("best       no completed trial yet")
    else:
        lines += [
            f"best       trial {best['trial']}: {settings['objective']} = {best['value']:.6g} ({info['direction']})",
            f"mask       {best['mask']}  (skip ratio {fmt(best['skip_ratio'])})",
            f"M, alpha   {fmt(best['M'])}, {fmt(best['alpha'])}   tokens/s {fmt(best['tokens_per_second'])}",
        ]
    print("\n".join(lines))
    return 0


def _export(args: Any) -> int:
    from layersearch.study import export_mask

    from layersearch.outputs import announce, check_output

    out = check_output(args.out)
    path, mask = export_mask(args.name, out, storage=args.storage, trial=args.trial)
    prov = mask.provenance
    announce(out, f"wrote {path}: trial {prov['trial']} of {args.name}, {prov['objective']} = {prov['score']:.6g}, mask {mask.short_string()}")
    return 0


def _compare(args: Any) -> int:
    from layersearch.study import COMPARE_COLUMNS, compare_studies

    result = compare_studies(args.names, storage=args.storage, out_prefix=args.out_prefix,
                             measure=not args.no_measure, repeats=args.repeats, log=log,
                             split=args.split)
    print(format_table(result.rows, COMPARE_COLUMNS))
    print(f"wrote {result.csv_path} and {result.json_path}")
    return 0


# ----- formatting -------------------------------------------------------------------------------
def _describe(settings: Any) -> str:
    return _describe_dict(settings.identity())


def _describe_dict(settings: dict[str, Any]) -> str:
    keys = ("model", "domain", "strategy", "objective", "skip_ratio", "samples", "seed", "prompt_seed", "prompt_split",
            "max_new_tokens")
    text = ", ".join(f"{key} {settings.get(key)}" for key in keys if settings.get(key) is not None)
    if settings.get("space", "skips") != "skips":  # skip-mask studies read as they always did
        text += f", space {settings['space']}"
    options = settings.get("strategy_options") or {}
    return text + "".join(f", {key} {value}" for key, value in options.items())
