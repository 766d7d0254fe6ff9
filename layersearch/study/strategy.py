"""A study's strategy: the names a study accepts and strategies plugged in from elsewhere.

Built-in strategies come from :mod:`layersearch.strategies`; others (KnapSpec's ``knapsack``
candidates) plug in through :func:`_extra_strategies`, which enqueues their masks at creation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from layersearch.errors import LayersearchError
from layersearch.mask import SkipMask


@dataclass(frozen=True)
class _StrategyPlan:
    """What a run needs from a strategy: its sampler and its stop rule (checked after each trial)."""

    sampler: Any
    stop_reason: Callable[[Any], str | None]


@dataclass(frozen=True)
class _ExtraStrategy:
    """A strategy from outside :mod:`layersearch.strategies`.

    ``plan(settings, num_layers, n_finished)`` gives the run's sampler and stop rule;
    ``initial(settings, loaded, texts, profile)`` the masks enqueued at creation.
    """

    plan: Callable[[Any, int, int], _StrategyPlan]
    initial: Callable[[Any, Any, Sequence[str], Any], tuple[SkipMask, ...]]
    help: str


def _extra_strategies() -> dict[str, _ExtraStrategy]:
    """Strategies that are not Optuna samplers but generators of candidate masks.

    ``knapsack``: KnapSpec's knapsack DP (:func:`layersearch.knapspec.knapsack_masks`) proposes
    its best candidate masks (by predicted TPT on the study's prompts and profile); the study
    enqueues them at creation, measures each with the study's objective and stops when the
    queue is empty. A new mask generator plugs in the same way: a function returning masks
    for the model, prompts and profile, wrapped with :func:`_queue_plan`.
    """
    return {"knapsack": _ExtraStrategy(_queue_plan, _knapsack_initial, "KnapSpec knapsack candidates")}


def _queue_plan(settings: Any, num_layers: int, n_finished: int) -> _StrategyPlan:
    """Measure the enqueued masks, then stop (the random sampler only fills unexpected gaps)."""
    import optuna
    from optuna.trial import TrialState

    def stop_reason(study: Any) -> str | None:
        if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return None
        if study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)):
            return "every enqueued candidate mask was measured"
        return "the strategy proposed no candidate mask"

    return _StrategyPlan(optuna.samplers.RandomSampler(seed=settings.seed), stop_reason)


def _knapsack_initial(settings: Any, loaded: Any, texts: Sequence[str], profile: Any) -> tuple[SkipMask, ...]:
    from layersearch.knapspec import knapsack_masks

    ids = [loaded.tokenizer(text, return_tensors="pt").input_ids[0] for text in texts]
    context = int(sum(len(i) for i in ids) / len(ids) + settings.max_new_tokens / 2)
    return tuple(row[0] for row in knapsack_masks(loaded.model, profile, ids, context=context))


def available_strategies() -> tuple[str, ...]:
    """Strategy names a study accepts."""
    from layersearch.strategies import STRATEGIES

    return tuple(STRATEGIES) + tuple(_extra_strategies())


def check_strategy(name: str) -> str:
    """``name`` if known, else a LayersearchError listing the known strategies."""
    from layersearch.strategies import STRATEGIES

    if name in STRATEGIES:
        return name
    known = available_strategies()
    if name not in known:
        raise LayersearchError(f"unknown strategy {name!r}; known strategies: {', '.join(known)}")
    return name


def _builtin_strategies() -> tuple[str, ...]:
    from layersearch.strategies import STRATEGIES

    return tuple(STRATEGIES)
