"""Small queries on a study's trials: finished ones, the best one, JSON-safe attribute values."""

from __future__ import annotations

import math
from typing import Any


def finished_trials(study: Any) -> list[Any]:
    """The study's COMPLETE, FAIL and PRUNED trials."""
    from optuna.trial import TrialState

    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED))


def best_trial(study: Any) -> Any:
    """The best COMPLETE trial, or None (Optuna raises when there is none, and for a
    multi-objective study, which has no single best: another tool's, never ours)."""
    try:
        return study.best_trial
    except (ValueError, RuntimeError):
        return None


def best_value_of(study: Any) -> float | None:
    """The best COMPLETE trial's value, or None."""
    best = best_trial(study)
    return None if best is None else float(best.value)


def json_value(value: Any) -> Any:
    """Plain JSON scalars for user attrs (NaN/inf become None)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
