"""``layersearch study head-to-head``: strategies under one wall-clock budget each, then compared on
held-out prompts; the design and the report are :mod:`layersearch.study.head_to_head`'s."""

from __future__ import annotations

import argparse
import time
from typing import Any

from layersearch.common.checks import check_positive
from layersearch.commands.args import model_args
from layersearch.commands.study_common import OBJECTIVE_HELP, log, search_args


def add_parser(actions: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``study head-to-head``: its arguments (on the ``study`` command's actions)."""
    h = actions.add_parser(
        "head-to-head",
        help="benchmark: swift, selfsd-bo and random under the same wall-clock budget on one domain",
    )
    model_args(h)
    h.add_argument("--domain", help="prompt domain (default summarization; or --prompts)")
    h.add_argument("--prompts", metavar="FILE", help="your own prompts (JSONL), split by a hash of each row")
    h.add_argument("--budget", type=float, default=600.0, help="search seconds per strategy (default 600)")
    h.add_argument("--strategies", default="swift,selfsd-bo,random", help="comma-separated (default swift,selfsd-bo,random)")
    h.add_argument("--random-objective", default="matchness", help=f"objective of the random search ({OBJECTIVE_HELP}; default matchness)")
    h.add_argument("--prefix", default=None, help="study name prefix (default h2h-<domain>-<time>)")
    h.add_argument("--storage", help="one Optuna storage for all three studies (default: sqlite file per study)")
    h.add_argument("--out-prefix", default=None, help="table files PREFIX.csv/.json (default: the study prefix)")
    h.add_argument("--repeats", type=int, default=1, help="measurement rounds of the final comparison")
    h.add_argument("--quiet", action="store_true")
    h.add_argument("--profile", help="latency profile JSON (default: measure a quick one)")
    h.add_argument("--preset", choices=["paper"],
                   help="each strategy that has this preset (selfsd-bo, swift) runs with its paper's settings")
    h.add_argument("--out", default=None,
                   help="the report: per strategy its search curve, held-out speedup, best mask, M and alpha "
                        "(default PREFIX-head-to-head.json)")
    h.add_argument("--plot", default=None, help="the curves' figure (default PREFIX-head-to-head.png)")
    search_args(h, ratio_help="skip ratio of swift and random (default: swift's 0.45)")


def run(args: Any) -> int:
    """Create, search and compare one study per strategy; print the table and the ordering."""
    from layersearch.objectives import check_objective
    from layersearch.study import COMPARE_COLUMNS
    from layersearch.study.compare import table_targets
    from layersearch.commands.study_options import domain_from_options, head_to_head_plans, report_targets, strategies_named
    from layersearch.study.head_to_head import ordering, run_head_to_head, write_report
    from layersearch.study.text import format_table

    check_positive(args.budget, "--budget", unit="seconds")
    registered = strategies_named(args.strategies)
    check_objective(args.random_objective)
    args.domain, args.prompts = domain_from_options(args, default="summarization"), None
    label = "prompts" if args.domain.startswith("file:") else args.domain
    prefix = args.prefix or f"h2h-{label}-{time.strftime('%Y%m%d-%H%M%S')}"
    targets = table_targets(prefix if args.out_prefix is None else args.out_prefix)  # checked before hours of searching
    report_out, plot_out = report_targets(args.out_prefix or prefix, args.out, args.plot)
    plans = head_to_head_plans(args, registered, prefix)
    result, report = run_head_to_head(plans, prefix=prefix, storage=args.storage, budget=args.budget, quiet=args.quiet,
                                      profile_path=args.profile, targets=targets, repeats=args.repeats, log=log)
    print(format_table(result.rows, COMPARE_COLUMNS))
    print(ordering(result.rows))
    write_report(report, report_out, plot_out)
    print(f"wrote {result.csv_path}, {result.json_path}, {report_out.given} and {plot_out.given}")
    return 0
