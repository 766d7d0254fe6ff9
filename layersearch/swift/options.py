"""SWIFT on the fly back to text: a per-input summary of the optimizer for the output (its
config from the command line is :func:`layersearch.commands.args.swift_config`'s)."""

from __future__ import annotations

from typing import Any


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
