"""``layersearch study <action>``: create, run, list, show, export and compare mask searches. The
work and its text are :mod:`layersearch.study`'s; ``head-to-head`` is in :mod:`.headtohead`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from layersearch.commands import headtohead
from layersearch.commands.args import STORAGE_HELP, model_args, threads_arg
from layersearch.commands.common import set_threads
from layersearch.commands.study_common import OBJECTIVE_HELP, log, search_args, strategy_option_args


def output_paths(args: Any) -> dict[str, str]:
    """The table files an ``--out-prefix`` names (compare, head-to-head): PREFIX.csv and PREFIX.json;
    and the study's storage when ``--name`` derives it (``studies/<name>.db``): opened, never overwritten."""
    from layersearch.study.compare import table_paths

    paths = table_paths(getattr(args, "out_prefix", None))
    if getattr(args, "storage", None) is None and args.action in ("create", "run", "show", "export"):
        paths.update(default_storage_file(args.name))
    return paths


def default_storage_file(name: Any) -> dict[str, str]:
    """{"the study's storage": its file} for the default storage of study ``name`` (none for a bad name,
    which the command itself refuses)."""
    from layersearch.common.errors import LayersearchError
    from layersearch.study.storage import storage_location

    try:
        location = storage_location(None, name)
    except LayersearchError:
        return {}
    return {"the study's storage": str(location.path)}


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Add ``study`` and its sub-actions to the CLI's sub-parsers."""
    p = sub.add_parser("study", help="search masks with Optuna studies (create, run, list, show, export, compare)")
    actions = p.add_subparsers(dest="action", required=True, parser_class=parser_class)

    c = actions.add_parser("create", help="create a study (settings stored with it; latency profile measured)")
    _named(c, storage=False)
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
    _named(r)
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
    _named(s)
    s.add_argument("--json", action="store_true", help="print JSON")
    e = actions.add_parser("export", help="write a trial's mask file (with provenance)")
    _named(e)
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


def _named(parser: argparse.ArgumentParser, storage: bool = True) -> None:
    """``--name`` of the study (and ``--storage``, where it is)."""
    parser.add_argument("--name", required=True)
    if storage:
        parser.add_argument("--storage", help=STORAGE_HELP)


def run(args: Any) -> int:
    """Dispatch on ``args.action``."""
    from layersearch.study.text import quiet_optuna

    quiet_optuna(getattr(args, "quiet", False))
    set_threads(getattr(args, "threads", None))
    if args.action == "head-to-head":
        return headtohead.run(args)
    return {"create": _create, "run": _run, "list": _list, "show": _show, "export": _export,
            "compare": _compare}[args.action](args)


def _create(args: Any) -> int:
    from layersearch.study import create_study
    from layersearch.commands.study_options import settings_from_options
    from layersearch.study.text import created_text

    print(created_text(create_study(args.name, settings_from_options(args), storage=args.storage, profile_path=args.profile,
                                    log=log)))
    return 0


def _run(args: Any) -> int:
    from layersearch.study import run_study
    from layersearch.study.run import format_run_summary
    from layersearch.study.storage import heartbeat_seconds

    summary = run_study(args.name, storage=args.storage, trials=args.trials, timeout=args.timeout,
                        quiet=args.quiet, heartbeat=heartbeat_seconds(args.heartbeat))
    print(format_run_summary(summary))
    return 0


def _list(args: Any) -> int:
    from layersearch.study import list_studies
    from layersearch.study.text import list_text

    rows, problems = list_studies(args.storage)
    for problem in problems:
        log(f"layersearch: warning: {problem}")
    print(json.dumps(rows, indent=2) if args.json else list_text(rows, args.storage))
    return 0


def _show(args: Any) -> int:
    from layersearch.study import show_study
    from layersearch.study.text import show_text

    info = show_study(args.name, storage=args.storage)
    print(json.dumps(info, indent=2, default=str) if args.json else show_text(info))
    return 0


def _export(args: Any) -> int:
    from layersearch.common.outputs import announce, check_output
    from layersearch.study import export_mask
    from layersearch.study.text import exported_text

    out = check_output(args.out, "--out")
    path, mask = export_mask(args.name, out, storage=args.storage, trial=args.trial)
    announce(out, exported_text(path, args.name, mask))
    return 0


def _compare(args: Any) -> int:
    from layersearch.study import COMPARE_COLUMNS, compare_studies
    from layersearch.study.text import format_table

    result = compare_studies(args.names, storage=args.storage, out_prefix=args.out_prefix, measure=not args.no_measure,
                             repeats=args.repeats, log=log, split=args.split)
    print(format_table(result.rows, COMPARE_COLUMNS))
    print(f"wrote {result.csv_path} and {result.json_path}")
    return 0
