"""A study's enqueued candidates (KnapSpec's knapsack masks, Self-SD's probes, SWIFT's start):
which were measured, and which an interrupt lost.

Optuna hands an enqueued trial's parameters to the first trial that starts (its
``fixed_params``); when that trial fails (Ctrl-C, SIGTERM, a killed worker whose RUNNING trial
is failed as stale) the candidate leaves the queue unmeasured. A candidate counts as measured
only by a COMPLETE or PRUNED trial; :func:`requeue_unmeasured` puts each lost one back, once.
"""

from __future__ import annotations

from typing import Any

from optuna.study import Study
from optuna.trial import TrialState

#: Where Optuna keeps the parameters an enqueued trial was given.
FIXED_PARAMS = "fixed_params"
MEASURED = (TrialState.COMPLETE, TrialState.PRUNED)
#: States in which a candidate is still on its way to a measurement (queued, or a live worker's).
PENDING = (TrialState.WAITING, TrialState.RUNNING)


def _key(params: dict[str, Any]) -> tuple:
    return tuple(sorted(params.items()))


def unmeasured_candidates(study: Study) -> list[dict[str, Any]]:
    """The enqueued parameters (in enqueue order, each once) that no COMPLETE or PRUNED trial
    measured and no WAITING or RUNNING trial holds: those a failed trial took with it."""
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    done = {_key(t.system_attrs.get(FIXED_PARAMS, t.params)) for t in trials if t.state in MEASURED + PENDING}
    lost: dict[tuple, dict[str, Any]] = {}
    for trial in trials:
        params = trial.system_attrs.get(FIXED_PARAMS)
        if trial.state == TrialState.FAIL and isinstance(params, dict) and _key(params) not in done:
            lost.setdefault(_key(params), dict(params))
    return list(lost.values())


def requeue_unmeasured(study: Study) -> int:
    """Enqueue again every candidate an interrupted trial lost; returns how many."""
    lost = unmeasured_candidates(study)
    for params in lost:
        study.enqueue_trial(params)
    return len(lost)


def candidates_left(study: Study) -> bool:
    """Whether an enqueued candidate still waits for a measurement (queued or lost by a failed trial)."""
    return bool(study.get_trials(deepcopy=False, states=(TrialState.WAITING,))) or bool(unmeasured_candidates(study))
