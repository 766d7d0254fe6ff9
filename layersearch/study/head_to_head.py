"""``layersearch study head-to-head`` as a function (:func:`run_head_to_head`): any strategies (swift, selfsd-bo, knapsack, random, tpe,
uniform) under one wall-clock budget each.

A benchmark in the spirit of swift.txt Table 12 (SWIFT 1.56x after 116 s; Self-SD's BO 0.97x
after 155 s). On one model and one domain, each strategy gets its own study, searched with
its native objective for ``budget`` seconds (Optuna's timeout: no trial starts after the
budget, the running one finishes):

==========  ==============================================================================
swift       matchness (its paper's objective), fixed skip count int((L-2)*2r), r = 0.45
selfsd-bo   time-per-token of the speculative decoder (Self-SD's objective)
random      the objective its plan names (default matchness, with swift's skip ratio: the control
            that shows what SWIFT's sampler adds over random masks of the same size)
==========  ==============================================================================

Best objective values are not comparable across objectives, so the common yardstick is
measured at the end, in this one process: tokens/s of the speculative decoder with each
study's best mask against plain ``generate`` on the same domain prompts (``study compare``),
plus the M and alpha of that run. The model is loaded once and shared by all the searches.

The report (``out``, JSON) gives per strategy its best-so-far curve against wall time, the
held-out speedup, the best mask, its skip ratio, M, alpha and the seconds it took to reach 95%
of its final best; the figure (``plot``) draws the curves, one panel per strategy (their
objectives differ), with the held-out speedups in the legends.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

PAPER = "swift.txt Table 12: SWIFT 1.56x after 116 s, Self-SD BO 0.97x after 155 s"


def run_head_to_head(plans: Sequence[tuple[str, Any]], *, prefix: str, storage: str | None, budget: float, quiet: bool,
                     profile_path: str | None, targets: Any, repeats: int, log: Callable[[str], None]) -> tuple[Any, dict[str, Any]]:
    """Create (or resume) and search each planned study (name, StudySettings) for ``budget``
    seconds on one loaded model, then compare their best masks: (the comparison, the report).
    A latency profile measured for the first study is saved and reused by the others."""
    from layersearch.study import compare_studies, create_study, load_study_model, run_study
    from layersearch.study.run import format_run_summary

    loaded = load_study_model(plans[0][1])
    key = (plans[0][1].model, plans[0][1].device, plans[0][1].dtype)
    names = []
    for name, settings in plans:
        created = create_study(name, settings, storage=storage, profile_path=profile_path, loaded=loaded, log=log)
        if profile_path is None and created.settings.profile is not None:
            # Measure the profile once and reuse it for the other studies.
            from layersearch.profiling.profile import LatencyProfile

            profile_path = _profile_file(LatencyProfile.from_dict(created.settings.profile), prefix)
        log(f"{'created' if created.created else 'resuming'} {name}: {settings.strategy} / {settings.objective}, "
            f"budget {budget:g} s")
        summary = run_study(name, storage=storage, timeout=budget, quiet=quiet, loaded=loaded)
        log(format_run_summary(summary))
        names.append(name)
    result = compare_studies(names, storage=storage, out_prefix=targets, repeats=repeats, loaded={key: loaded}, log=log)
    return result, head_to_head_report(names, result.rows, storage)


def head_to_head_report(names: list[str], rows: list[dict[str, Any]], storage: str | None) -> dict[str, Any]:
    """Per strategy (under ``strategies.<name>``): the best-so-far curve against wall time, the
    held-out speedup of its best mask, the mask, its skip ratio, M, alpha, trials, seconds and
    the time it took to reach 95% of its final best."""
    from layersearch.objectives import objective_direction
    from layersearch.study.inspect import best_curve, time_to_fraction
    from layersearch.study.storage import open_study

    strategies: dict[str, Any] = {}
    for name, row in zip(names, rows):
        study = open_study(name, storage, read_only=True)[0]
        curve = [(round(s, 3), v) for s, v in best_curve(study)]
        maximize = objective_direction(row["objective"]) == "maximize"
        strategies[row["strategy"]] = {
            "study": name,
            "objective": row["objective"],
            "direction": "maximize" if maximize else "minimize",
            "curve": [list(point) for point in curve],
            "trials": row["trials"],
            "search_seconds": row["search_seconds"],
            "seconds_to_95pct": time_to_fraction(curve, maximize),
            "heldout_speedup": row["speedup"],
            "mask": row["mask"],
            "skip_ratio": row["skip_ratio"],
            "M": row["M"],
            "alpha": row["alpha"],
        }
    domain = rows[0]["domain"] if rows else None
    return {"kind": "layersearch-head-to-head", "domain": domain, "model": rows[0]["model"] if rows else None,
            "split": "test", "strategies": strategies}


def write_report(report: dict[str, Any], out: Any, plot: Any) -> None:
    """Write the report (JSON) and the curves' figure to their checked targets."""
    from layersearch.common.jsonfile import json_text
    from layersearch.common.outputs import write_outputs
    from layersearch.evaluation.plots import plot_head_to_head

    write_outputs([(out, json_text(report))], "out")
    plot_head_to_head(report["strategies"], plot)


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


