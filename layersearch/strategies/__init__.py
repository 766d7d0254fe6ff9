"""Search strategies for skip masks: one module per strategy, one registry (:data:`REGISTRY`).

Each strategy module ends with a :class:`~layersearch.strategies.base.Strategy` value
(``STRATEGY``) that says everything a study needs: its Optuna sampler, the skip ratio it takes,
the masks to enqueue before the search and its stop rule, checked after every trial. Adding a
strategy is one new module here and one line in :data:`REGISTRY`; the contract suite
(``tests/strategies/test_contract.py``) runs over the registry. All strategies search either
space of :mod:`layersearch.strategies.space`: skip masks (``skips``, the default and every
paper preset's) or draft plans (``plans``: each sub-layer skipped, int4, int8 or full, the head
int4, int8 or full), chosen per study (its settings' ``space``) and passed as ``space``.

In the ``plans`` space: ``selfsd-bo`` probes the all-int8 and all-int4 plans and each probe in
int8 or int4 by turns, and its GP relaxes the plan's 6L + 2 bits; ``swift`` keeps its count of
skips, precisions are coins (random steps) or GP coordinates outside the count (BO steps);
``random`` draws each precision uniformly; ``tpe`` models the precision categoricals; ``uniform``
is the uniform int8 self-draft (the uniform skips, every kept sub-layer and the head int8);
``knapsack`` solves a multiple-choice knapsack (each sub-layer full, int8, int4 or skipped,
:func:`layersearch.knapspec.knapsack_plans`).

============  ==========================================================  ===================
name          what it does                                                skip count
============  ==========================================================  ===================
selfsd-bo     Self-SD: probes, random to 10 trials, then GP-BO (logEI)    free
swift         SWIFT: random subsets + a GP-UCB step every 25th trial      int((L-2)*2r), r=.45
random        uniformly random masks                                      round(2Lr) if r given
tpe           Optuna's TPESampler                                         free
uniform       the evenly spread mask, one trial                           round(2Lr), r=.45
knapsack      KnapSpec's knapsack candidates, each measured once          free
============  ==========================================================  ===================

Every proposal is recorded on its trial as the system attribute :data:`PROPOSAL_ATTR`
(``"startup"``, ``"random"``, ``"bo"``, ``"uniform"``; enqueued masks have none). The
strategies never import the runtime or models (``knapsack`` imports KnapSpec only to make its
candidates); the GP maths imports torch/BoTorch only when a GP is fitted.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any, Mapping

import optuna
from optuna.study import Study

from layersearch.common.checks import check_fraction
from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.strategies import fixed_ratio_random, knapsack, selfsd_bo, swift, tpe, uniform
from layersearch.strategies._sampler import PROPOSAL_ATTR, MaskSampler
from layersearch.strategies.base import Strategy, StrategyInputs
from layersearch.strategies.fixed_ratio_random import RandomMaskSampler
from layersearch.strategies.selfsd_bo import SelfSDBOSampler
from layersearch.strategies.space import (
    PLANS,
    SKIPS,
    SPACES,
    check_space,
    mask_from_params,
    param_names,
    params_from_mask,
    search_space,
    suggest_mask,
)
from layersearch.strategies.swift import StopRule, SwiftSampler
from layersearch.strategies.uniform import UniformSampler

__all__ = [
    "PLANS",
    "REGISTRY",
    "SKIPS",
    "SPACES",
    "STRATEGIES",
    "Strategy",
    "StrategyInputs",
    "PROPOSAL_ATTR",
    "MaskSampler",
    "RandomMaskSampler",
    "SelfSDBOSampler",
    "StopRule",
    "SwiftSampler",
    "UniformSampler",
    "default_skip_ratio",
    "fixed_ratio",
    "get_strategy",
    "initial_masks",
    "make_sampler",
    "check_options",
    "check_space",
    "preset",
    "stop_rule",
    "mask_from_params",
    "param_names",
    "params_from_mask",
    "search_space",
    "should_stop",
    "skip_count",
    "stop_reason",
    "suggest_mask",
]

#: Every strategy by name, in the order the CLI lists them.
REGISTRY: MappingProxyType[str, Strategy] = MappingProxyType(
    {
        strategy.name: strategy
        for strategy in (
            selfsd_bo.STRATEGY,
            swift.STRATEGY,
            fixed_ratio_random.STRATEGY,
            tpe.STRATEGY,
            uniform.STRATEGY,
            knapsack.STRATEGY,
        )
    }
)
STRATEGIES: tuple[str, ...] = tuple(REGISTRY)


def get_strategy(name: str) -> Strategy:
    """The registered strategy ``name``; a LayersearchError listing the known ones otherwise."""
    if name not in REGISTRY:
        raise LayersearchError(f"unknown strategy {name!r}; known strategies: {', '.join(STRATEGIES)}")
    return REGISTRY[name]


def make_sampler(
    name: str, *, num_layers: int, skip_ratio: float | None = None, seed: int | None = None,
    options: Mapping[str, Any] | None = None, space: str = SKIPS,
) -> optuna.samplers.BaseSampler:
    """A fresh Optuna sampler for strategy ``name`` (one per study; same seed, same proposals);
    ``options``: its sampler and stop-rule settings (:func:`check_options`); ``space``: ``skips``
    or ``plans``."""
    ratio = _resolve_ratio(name, skip_ratio)
    param_names(num_layers)  # validates num_layers for every strategy, TPE included
    check_space(space)
    sampler_options = {k: v for k, v in check_options(name, options).items() if k in REGISTRY[name].options}
    return REGISTRY[name].sampler(num_layers=num_layers, skip_ratio=ratio, seed=seed, space=space, **sampler_options)


def check_options(name: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` as a dict if strategy ``name`` takes every one of them; a LayersearchError otherwise."""
    strategy = get_strategy(name)
    options = dict(options or {})
    known = strategy.options + strategy.stop_options
    unknown = [key for key in options if key not in known]
    if unknown:
        takes = f"it takes {', '.join(known)}" if known else "it takes none"
        raise LayersearchError(f"strategy {name!r} has no option {', '.join(unknown)} ({takes})")
    if strategy.stop_options:
        stop_rule(options)  # checks the values
    return options


def stop_rule(options: Mapping[str, Any] | None, *, objective_is_matchness: bool = True) -> StopRule:
    """SWIFT's stop rule with a study's ``target`` / ``patience`` / ``max_trials`` options.

    The target is a matchness level: with another objective only patience and length apply."""
    from layersearch.common.checks import check_fraction, check_int

    options = dict(options or {})
    target = options.get("target", StopRule.target)
    if target is not None:
        check_fraction(target, "target")
    for key in ("patience", "max_trials"):
        if options.get(key) is not None:
            check_int(options[key], key.replace("_", " "))
    return StopRule(
        target=target if objective_is_matchness else None,
        patience=options.get("patience", StopRule.patience),
        max_trials=options.get("max_trials", StopRule.max_trials),
    )


def preset(name: str, preset_name: str) -> Mapping[str, Any]:
    """The study settings and options of preset ``preset_name`` of strategy ``name`` (e.g. ``paper``)."""
    strategy = get_strategy(name)
    if preset_name not in strategy.presets:
        have = ", ".join(strategy.presets) or "none"
        raise LayersearchError(f"strategy {name!r} has no preset {preset_name!r} (presets: {have})")
    return strategy.presets[preset_name]


def initial_masks(
    name: str, *, num_layers: int, skip_ratio: float | None = None, inputs: StrategyInputs | None = None,
    space: str | None = None,
) -> tuple[SkipMask, ...]:
    """Masks the study should enqueue before the search (Self-SD's probes, SWIFT's uniform start,
    KnapSpec's candidates); may be empty. ``inputs`` carries the model, prompts and profile for
    strategies that need them (``knapsack``); ``space`` (default: the inputs', else ``skips``)
    the study's search space: plans for ``plans``."""
    ratio = _resolve_ratio(name, skip_ratio)
    param_names(num_layers)  # validates num_layers
    base = inputs or StrategyInputs(num_layers=num_layers)
    space = check_space(base.space if space is None else space)
    return REGISTRY[name].initial_masks(replace(base, num_layers=num_layers, skip_ratio=ratio, space=space))


def default_skip_ratio(name: str) -> float | None:
    """The skip ratio a strategy uses when none is given (None: it has no fixed ratio)."""
    return get_strategy(name).default_ratio


def fixed_ratio(name: str, skip_ratio: float | None = None) -> bool:
    """Whether every mask the strategy proposes skips an exact count (``random`` only with a ratio)."""
    strategy = get_strategy(name)
    return strategy.takes_ratio and (skip_ratio if skip_ratio is not None else strategy.default_ratio) is not None


def skip_count(name: str, *, num_layers: int, skip_ratio: float | None = None) -> int | None:
    """The exact number of skipped sub-layers the strategy promises, or None when it is free."""
    ratio = _resolve_ratio(name, skip_ratio)
    count = REGISTRY[name].skip_count
    if ratio is None or count is None:  # a resolved ratio means the strategy counts (takes_ratio)
        return None
    return count(num_layers, ratio)


def stop_reason(name: str, study: Study, *, rule: StopRule | None = None) -> str | None:
    """Why the strategy's early-stop rule ends ``study`` now, or None to go on.

    ``swift`` applies ``rule`` (default :class:`StopRule`: best >= 0.95 in the study's
    direction, 300 trials without improvement, or 1000 trials); ``uniform`` stops once its
    single mask was measured; ``knapsack`` once its candidates are measured; the others never
    stop on their own.
    """
    return get_strategy(name).stop_reason(study, rule)


def should_stop(name: str, study: Study, *, rule: StopRule | None = None) -> bool:
    """Whether the strategy's early-stop rule ends ``study`` now (checked after each trial)."""
    return stop_reason(name, study, rule=rule) is not None


def _resolve_ratio(name: str, skip_ratio: float | None) -> float | None:
    """The ratio the strategy will use: the given one, else its default; rejects a ratio it cannot use."""
    strategy = get_strategy(name)
    if not strategy.takes_ratio:
        if skip_ratio is not None:
            raise LayersearchError(f"strategy {name!r} searches the skipped count freely and takes no skip ratio")
        return None
    if skip_ratio is None:
        return strategy.default_ratio
    return check_fraction(skip_ratio, "skip ratio")
