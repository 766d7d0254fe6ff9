"""The glue between the CLI and SWIFT's on-the-fly optimizer: its config from parsed arguments
and a per-input summary for the output (``generate --mask swift``, ``swift stream``)."""

from __future__ import annotations

from typing import Any

from layersearch.common.errors import LayersearchError


def swift_config(args: Any, skip_ratio: float | None = None):
    """A :class:`~layersearch.swift.SwiftConfig` from ``--swift-*`` options, ``--seed`` and the skip ratio
    (``skip_ratio``, else ``--skip-ratio`` where the command has one, else SWIFT's 0.45)."""
    from layersearch.swift import SwiftConfig
    from layersearch.swift.search import SKIP_RATIO

    ratio = skip_ratio if skip_ratio is not None else getattr(args, "skip_ratio", None)
    try:
        return SwiftConfig(
            skip_ratio=SKIP_RATIO if ratio is None else ratio,
            window=args.swift_window, bo_interval=args.swift_bo_interval, kappa=args.swift_kappa,
            target=args.swift_target, patience=args.swift_patience, max_steps=args.swift_max_steps,
            tolerance=args.swift_tolerance, min_skip_ratio=args.swift_min_skip_ratio, seed=getattr(args, "seed", 0) or 0,
        )
    except LayersearchError as exc:  # name the options, not the config fields
        ratio_option = "--skip-ratio" if hasattr(args, "skip_ratio") else "--mask swift:R"
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

