"""SWIFT on the fly from a command's options and back to text: its config from the ``--swift-*``
options (``generate --mask swift``, ``swift stream``, or any object with those attributes) and
a per-input summary of the optimizer for the output."""

from __future__ import annotations

from typing import Any

from layersearch.common.errors import LayersearchError


def swift_config(options: Any, skip_ratio: float | None = None):
    """A :class:`~layersearch.swift.SwiftConfig` from ``--swift-*`` options (``options.swift_window``
    ...), ``seed`` and the skip ratio (``skip_ratio``, else ``options.skip_ratio`` where it has one,
    else SWIFT's 0.45); a bad value is one error naming the options."""
    from layersearch.swift import SwiftConfig
    from layersearch.swift.search import SKIP_RATIO

    ratio = skip_ratio if skip_ratio is not None else getattr(options, "skip_ratio", None)
    try:
        return SwiftConfig(
            skip_ratio=SKIP_RATIO if ratio is None else ratio,
            window=options.swift_window, bo_interval=options.swift_bo_interval, kappa=options.swift_kappa,
            target=options.swift_target, patience=options.swift_patience, max_steps=options.swift_max_steps,
            tolerance=options.swift_tolerance, min_skip_ratio=options.swift_min_skip_ratio,
            seed=getattr(options, "seed", 0) or 0,
        )
    except LayersearchError as exc:  # name the options, not the config fields
        ratio_option = "--skip-ratio" if hasattr(options, "skip_ratio") else "--mask swift:R"
        raise LayersearchError(f"{exc} (see the --swift-* options and {ratio_option})") from None


def input_summary(controller: Any, stats: Any) -> dict[str, Any]:
    """The optimizer's view of the input just generated (closes it): phases, matchness, time."""
    from layersearch.swift import optimization_seconds, phase_counts

    controller.finish()
    summary = controller.inputs[-1]
    return {
        "phase_steps": phase_counts(stats.selections),
        "optimization_seconds": optimization_seconds(stats.selections),
        "optimization_steps": summary.optimization_steps,
        "matchness": summary.matchness,
        "skip_ratio": controller.ratio,
        "phase": controller.phase,
        "best_mask": controller.best.short_string(),
        "best_matchness": controller.best_score,
        **({"stopped": controller.stop_reason} if controller.stop_reason else {}),
    }


def summary_text(swift: dict[str, Any]) -> str:
    """:func:`input_summary` as the tail of ``generate``'s stats line."""
    match = "-" if swift["matchness"] is None else f"{swift['matchness']:.2f}"
    return (f" swift: phase={swift['phase']} matchness={match} opt-steps={swift['optimization_steps']} "
            f"opt-seconds={swift['optimization_seconds']:.2f} skip-ratio={swift['skip_ratio']:g}")
