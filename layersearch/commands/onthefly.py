"""The glue between the CLI and SWIFT's on-the-fly optimizer: its config from parsed arguments
and a per-input summary for the output (``generate --on-the-fly swift``, ``swift stream``)."""

from __future__ import annotations

from typing import Any

from layersearch.errors import LayersearchError
from layersearch.sources import ON_THE_FLY_SOURCES as ON_THE_FLY


def swift_config(args: Any, skip_ratio: float | None = None):
    """A :class:`~layersearch.swift.SwiftConfig` from ``--swift-*`` options (and ``--skip-ratio``, ``--seed``)."""
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
        raise LayersearchError(f"{exc} (see the --swift-* options and --skip-ratio)") from None


def check_on_the_fly(args: Any) -> None:
    """Refuse option combinations ``--on-the-fly`` cannot honour (before the model loads)."""
    kind = getattr(args, "on_the_fly", None)
    if kind is None:
        return
    if kind not in ON_THE_FLY:
        raise LayersearchError(f"unknown on-the-fly optimizer {kind!r} (only 'swift')")
    others = (("--mask", args.mask), ("--dynamic", args.dynamic), ("--baseline", args.baseline),
              ("--router", getattr(args, "router", None)))
    for flag, value in others:
        if value:
            raise LayersearchError(f"--on-the-fly swift chooses the mask while decoding; it takes no {flag}")
    swift_config(args)


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

