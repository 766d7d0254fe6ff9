"""``layersearch study head-to-head``: swift, selfsd-bo and random under one wall-clock budget.

A benchmark in the spirit of swift.txt Table 12 (SWIFT 1.56x after 116 s; Self-SD's BO 0.97x
after 155 s). On one model and one domain, each strategy gets its own study, searched with
its native objective for ``--budget`` seconds (Optuna's timeout: no trial starts after the
budget, the running one finishes):

==========  ==============================================================================
swift       matchness (its paper's objective), fixed skip count int((L-2)*2r), r = 0.45
selfsd-bo   time-per-token of the speculative decoder (Self-SD's objective)
random      ``--random-objective`` (default matchness, with swift's skip ratio: the control
            that shows what SWIFT's sampler adds over random masks of the same size)
==========  ==============================================================================

Best objective values are not comparable across objectives, so the common yardstick is
measured at the end, in this one process: tokens/s of the speculative decoder with each
study's best mask against plain ``generate`` on the same domain prompts (``study compare``),
plus the M and alpha of that run. The model is loaded once and shared by all three searches.
"""

from __future__ import annotations

import time
from typing import Any

from layersearch.errors import LayersearchError

NATIVE_OBJECTIVES = {"swift": "matchness", "selfsd-bo": "time-per-token"}
RATIO_STRATEGIES = ("swift", "random", "uniform")
PAPER = "swift.txt Table 12: SWIFT 1.56x after 116 s, Self-SD BO 0.97x after 155 s"


def run(args: Any) -> int:
    """Create, search and compare one study per strategy; print the table and the ordering."""
    from layersearch.commands.study import format_run_summary, format_table, log, settings_from_args
    from layersearch.objectives import check_objective
    from layersearch.strategies import default_skip_ratio
    from layersearch.study import COMPARE_COLUMNS, _load_model, check_strategy, compare_studies, create_study, run_study

    if not args.budget > 0:
        raise LayersearchError(f"--budget must be > 0 seconds, got {args.budget}")
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    if not strategies or len(set(strategies)) != len(strategies):
        raise LayersearchError("--strategies must list distinct strategy names")
    for name in strategies:
        check_strategy(name)
    check_objective(args.random_objective)
    prefix = args.prefix or f"h2h-{args.domain}-{time.strftime('%Y%m%d-%H%M%S')}"
    ratio = args.skip_ratio if args.skip_ratio is not None else default_skip_ratio("swift")
    from layersearch.study.compare import table_targets

    targets = table_targets(prefix if args.out_prefix is None else args.out_prefix)  # checked before hours of searching

    plans = []
    for strategy in strategies:
        objective = NATIVE_OBJECTIVES.get(strategy, args.random_objective)
        settings = settings_from_args(
            args, strategy=strategy, objective=objective,
            skip_ratio=ratio if strategy in RATIO_STRATEGIES else None,
        ).validated()
        plans.append((f"{prefix}-{strategy}", settings))
    loaded = _load_model(plans[0][1])
    key = (plans[0][1].model, plans[0][1].device, plans[0][1].dtype)

    profile_path = args.profile
    names = []
    for name, settings in plans:
        result = create_study(name, settings, storage=args.storage, profile_path=profile_path, loaded=loaded, log=log)
        if profile_path is None and result.settings.profile is not None:
            # Measure the profile once and reuse it for the other studies.
            from layersearch.profile import LatencyProfile

            profile_path = _profile_file(LatencyProfile.from_dict(result.settings.profile), prefix)
        log(f"{'created' if result.created else 'resuming'} {name}: {settings.strategy} / {settings.objective}, "
            f"budget {args.budget:g} s")
        summary = run_study(name, storage=args.storage, timeout=args.budget, quiet=args.quiet, loaded=loaded)
        log(format_run_summary(summary))
        names.append(name)

    result = compare_studies(names, storage=args.storage, out_prefix=targets, repeats=args.repeats,
                             loaded={key: loaded}, log=log)
    print(format_table(result.rows, COMPARE_COLUMNS))
    print(ordering(result.rows))
    print(f"wrote {result.csv_path} and {result.json_path}")
    return 0


def ordering(rows: list[dict[str, Any]]) -> str:
    """Whether SWIFT's mask beat Self-SD BO's in measured speedup, as in the paper."""
    by_strategy = {row["strategy"]: row for row in rows}
    swift, selfsd = by_strategy.get("swift"), by_strategy.get("selfsd-bo")
    if not swift or not selfsd or swift.get("speedup") is None or selfsd.get("speedup") is None:
        return f"ordering: not measured ({PAPER})"
    ours = (f"swift {swift['speedup']:.2f}x after {swift['search_seconds']:.0f} s, "
            f"selfsd-bo {selfsd['speedup']:.2f}x after {selfsd['search_seconds']:.0f} s")
    verdict = "reproduced" if swift["speedup"] > selfsd["speedup"] else "NOT reproduced"
    if max(swift["speedup"], selfsd["speedup"]) < 1:
        verdict += " (but neither mask beats plain decoding here)"
    return f"ordering swift > selfsd-bo {verdict}: {ours} ({PAPER})"


def _profile_file(profile: Any, prefix: str) -> str:
    from layersearch.study import STUDIES_DIR

    path = STUDIES_DIR / f"{prefix}-profile.json"
    profile.save(path)
    return str(path)
