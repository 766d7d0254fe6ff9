"""Search strategies for skip masks, each an Optuna sampler over the same binary space.

A strategy is known by name (:data:`STRATEGIES`); the study module asks this package for its
sampler (:func:`make_sampler`), for masks to enqueue before the search
(:func:`initial_masks`) and, after every trial, whether to stop (:func:`should_stop`).
All of them search the space of :mod:`layersearch.strategies.space`.

============  ==========================================================  ===================
name          what it does                                                skip count
============  ==========================================================  ===================
selfsd-bo     Self-SD: probes, random to 10 trials, then GP-BO (logEI)    free
swift         SWIFT: random subsets + a GP-UCB step every 25th trial      int((L-2)*2r), r=.45
random        uniformly random masks                                      round(2Lr) if r given
tpe           Optuna's TPESampler                                         free
uniform       the evenly spread mask, one trial                           round(2Lr), r=.45
============  ==========================================================  ===================

Every proposal is recorded on its trial as the system attribute :data:`PROPOSAL_ATTR`
(``"startup"``, ``"random"``, ``"bo"``, ``"uniform"``; enqueued masks have none). The
strategies never import the runtime or models; the GP maths imports torch/BoTorch only when
a GP is fitted.
"""

from __future__ import annotations

import optuna
from optuna.study import Study

from layersearch.errors import LayersearchError
from layersearch.mask import SkipMask
from layersearch.strategies import fixed_ratio_random, selfsd_bo, swift, tpe, uniform
from layersearch.strategies._sampler import PROPOSAL_ATTR, MaskSampler
from layersearch.strategies.fixed_ratio_random import RandomMaskSampler
from layersearch.strategies.selfsd_bo import SelfSDBOSampler
from layersearch.strategies.space import (
    mask_from_params,
    param_names,
    params_from_mask,
    search_space,
    suggest_mask,
)
from layersearch.strategies.swift import StopRule, SwiftSampler
from layersearch.strategies.uniform import UniformSampler

__all__ = [
    "STRATEGIES",
    "PROPOSAL_ATTR",
    "MaskSampler",
    "RandomMaskSampler",
    "SelfSDBOSampler",
    "StopRule",
    "SwiftSampler",
    "UniformSampler",
    "default_skip_ratio",
    "fixed_ratio",
    "initial_masks",
    "make_sampler",
    "mask_from_params",
    "param_names",
    "params_from_mask",
    "search_space",
    "should_stop",
    "skip_count",
    "stop_reason",
    "suggest_mask",
]

STRATEGIES: tuple[str, ...] = ("selfsd-bo", "swift", "random", "tpe", "uniform")

# Strategies that take a skip ratio, with their default (None: unconstrained unless given).
_RATIO_DEFAULTS: dict[str, float | None] = {
    "swift": swift.SKIP_RATIO,
    "uniform": uniform.SKIP_RATIO,
    "random": None,
}


def make_sampler(
    name: str, *, num_layers: int, skip_ratio: float | None = None, seed: int | None = None
) -> optuna.samplers.BaseSampler:
    """A fresh Optuna sampler for strategy ``name`` (one per study; same seed, same proposals)."""
    ratio = _resolve_ratio(name, skip_ratio)
    param_names(num_layers)  # validates num_layers for every strategy, TPE included
    if name == "selfsd-bo":
        return SelfSDBOSampler(num_layers=num_layers, seed=seed)
    if name == "swift":
        return SwiftSampler(num_layers=num_layers, skip_ratio=ratio, seed=seed)
    if name == "random":
        return RandomMaskSampler(num_layers=num_layers, skip_ratio=ratio, seed=seed)
    if name == "tpe":
        return tpe.make_tpe_sampler(seed=seed)
    return UniformSampler(num_layers=num_layers, skip_ratio=ratio, seed=seed)


def initial_masks(name: str, *, num_layers: int, skip_ratio: float | None = None) -> tuple[SkipMask, ...]:
    """Masks the study should enqueue before the search (Self-SD's probes, SWIFT's uniform start); may be empty."""
    ratio = _resolve_ratio(name, skip_ratio)
    param_names(num_layers)  # validates num_layers
    if name == "selfsd-bo":
        return selfsd_bo.probe_masks(num_layers)
    if name == "swift":
        return (swift.initial_mask(num_layers, ratio),)
    return ()


def default_skip_ratio(name: str) -> float | None:
    """The skip ratio a strategy uses when none is given (None: it has no fixed ratio)."""
    _check_name(name)
    return _RATIO_DEFAULTS.get(name)


def fixed_ratio(name: str, skip_ratio: float | None = None) -> bool:
    """Whether every mask the strategy proposes skips an exact count (``random`` only with a ratio)."""
    _check_name(name)
    if name == "random":
        return skip_ratio is not None
    return name in ("swift", "uniform")


def skip_count(name: str, *, num_layers: int, skip_ratio: float | None = None) -> int | None:
    """The exact number of skipped sub-layers the strategy promises, or None when it is free."""
    ratio = _resolve_ratio(name, skip_ratio)
    if not fixed_ratio(name, ratio):
        return None
    if name == "swift":
        return swift.skip_count(num_layers, ratio)
    return fixed_ratio_random.skip_count(num_layers, ratio)


def stop_reason(name: str, study: Study, *, rule: StopRule | None = None) -> str | None:
    """Why the strategy's early-stop rule ends ``study`` now, or None to go on.

    ``swift`` applies ``rule`` (default :class:`StopRule`: best >= 0.95 in the study's
    direction, 300 trials without improvement, or 1000 trials); ``uniform`` stops once its
    single mask was measured; the others never stop on their own.
    """
    _check_name(name)
    if name == "swift":
        return (rule or StopRule()).reason(study)
    if name == "uniform":
        return uniform.stop_reason(study)
    return None


def should_stop(name: str, study: Study, *, rule: StopRule | None = None) -> bool:
    """Whether the strategy's early-stop rule ends ``study`` now (checked after each trial)."""
    return stop_reason(name, study, rule=rule) is not None


def _check_name(name: str) -> None:
    if name not in STRATEGIES:
        raise LayersearchError(f"unknown strategy {name!r}; known strategies: {', '.join(STRATEGIES)}")


def _resolve_ratio(name: str, skip_ratio: float | None) -> float | None:
    """The ratio the strategy will use: the given one, else its default; rejects a ratio it cannot use."""
    _check_name(name)
    if name not in _RATIO_DEFAULTS:
        if skip_ratio is not None:
            raise LayersearchError(f"strategy {name!r} searches the skipped count freely and takes no skip ratio")
        return None
    if skip_ratio is None:
        return _RATIO_DEFAULTS[name]
    if isinstance(skip_ratio, bool) or not isinstance(skip_ratio, (int, float)) or not 0.0 <= skip_ratio <= 1.0:
        raise LayersearchError(f"skip ratio must be between 0 and 1, got {skip_ratio!r}")
    return float(skip_ratio)
