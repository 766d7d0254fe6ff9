"""Shared plumbing of the mask samplers: the Optuna adapter and the study's history as arrays.

Each strategy's sampler subclasses :class:`MaskSampler` and implements only
:meth:`MaskSampler.propose`, a call into the strategy's pure functions. This base does the
Optuna side: it declares the study's whole space (the 2L skip switches, and for a ``plans``
study each sub-layer's and the head's precision; see :mod:`layersearch.strategies.space`),
turns the proposed mask (plan) into trial parameters, records where the proposal came from, and
falls back to a :class:`~optuna.samplers.RandomSampler` for any parameter outside the mask.

Randomness is drawn from a generator seeded by ``(seed, trial.number)`` rather than from a
stream that advances with every call. A sampler rebuilt with the same seed (a resumed study,
another process) therefore proposes the same mask for the same trial and the same history,
and a resumed study does not replay the draws of its first trials.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.swift.proposals import trial_seed  # noqa: F401  (the strategies' name for it)
from layersearch.strategies.space import (
    SKIPS, check_space, mask_from_params, mask_from_space_bits, params_from_mask, precision_choices, search_space,
    space_bits, space_names, vector_width,
)

#: Trial system attribute naming how a strategy produced the trial's mask
#: (e.g. ``"random"``, ``"startup"``, ``"bo"``, ``"uniform"``). Enqueued masks have none.
PROPOSAL_ATTR = "layersearch:proposal"


class MaskSampler(BaseSampler):
    """Base of the strategies' samplers: proposes a whole mask per trial via :meth:`propose`."""

    def __init__(self, *, num_layers: int, seed: int | None = None, space: str = SKIPS) -> None:
        self._num_layers = num_layers
        self._space_name = check_space(space)
        self._space = search_space(num_layers, space)  # also validates num_layers
        self._seed = fresh_seed() if seed is None else int(seed)
        self._independent = RandomSampler(seed=seed)

    @property
    def num_layers(self) -> int:
        """Number of decoder layers the masks are for."""
        return self._num_layers

    @property
    def space(self) -> str:
        """The search space proposals are drawn from: ``skips`` or ``plans``."""
        return self._space_name

    def propose(self, study: Study, trial: FrozenTrial, rng: np.random.Generator) -> tuple[SkipMask, str]:
        """The mask for ``trial`` and a short label of how it was made; subclasses implement it."""
        raise NotImplementedError

    # ----- optuna.samplers.BaseSampler ----------------------------------------------------
    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        """The study's whole space (2L binary switches, plus the precisions for plans), whatever the history holds."""
        return dict(self._space)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        """Propose one mask for the whole space and return it as trial parameters."""
        if not search_space:
            return {}
        mask, origin = self.propose(study, trial, trial_rng(self._seed, trial.number))
        study._storage.set_trial_system_attr(trial._trial_id, PROPOSAL_ATTR, origin)
        return params_from_mask(mask, self._space_name)

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        """Parameters outside the mask space are drawn at random."""
        return self._independent.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        """Forwarded to the fallback sampler."""
        self._independent.before_trial(study, trial)

    def after_trial(
        self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None
    ) -> None:
        """Forwarded to the fallback sampler."""
        self._independent.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        """Reseed the fallback sampler only (Optuna calls this for each worker of ``n_jobs > 1``).

        The base seed stays: draws already differ per trial number, so parallel workers never
        repeat each other, and a seeded study stays reproducible in its random proposals.
        """
        self._independent.reseed_rng()


# ----- pure helpers --------------------------------------------------------------------------
def fresh_seed() -> int:
    """A random 32-bit seed from the operating system's entropy."""
    return int(np.random.SeedSequence().generate_state(1)[0])


def trial_rng(seed: int, trial_number: int) -> np.random.Generator:
    """The generator for one trial: a function of the base seed and the trial number only."""
    return np.random.default_rng(np.random.SeedSequence(seed % 2**64, spawn_key=(trial_number,)))


def history(study: Study, num_layers: int, space: str = SKIPS) -> tuple[np.ndarray, np.ndarray]:
    """Completed trials as ``(X, y)``: X the 0/1 flat masks ``[n, 2L]`` (for ``plans`` the plan
    vectors ``[n, 6L + 2]`` of :func:`~layersearch.strategies.space.plan_bits`), y the values to
    *maximize* ``[n]``.

    Trials without every parameter of the space, or with a non-finite value, are left out;
    minimized objectives are negated so every strategy can maximize.
    """
    if len(study.directions) != 1:
        raise LayersearchError("the Bayesian-optimization strategies need a single-objective study")
    sign = -1.0 if study.direction == StudyDirection.MINIMIZE else 1.0
    names = space_names(num_layers, space)
    rows, values = [], []
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    for trial in sorted(trials, key=lambda t: t.number):
        if trial.value is None or not math.isfinite(trial.value):
            continue
        if not all(name in trial.params for name in names):
            continue
        if space == SKIPS:
            rows.append([int(trial.params[name]) for name in names])
        else:  # through the plan, so a skipped sub-layer's precision (TPE draws one) reads 0
            rows.append(list(space_bits(mask_from_params(trial.params, num_layers, space), space)))
        values.append(sign * float(trial.value))
    x = np.asarray(rows, dtype=np.int8).reshape(len(rows), vector_width(num_layers, space))
    return x, np.asarray(values, dtype=np.float64)


def mask_from_bits(bits: Sequence[int] | np.ndarray, num_layers: int | None = None, space: str = SKIPS) -> SkipMask:
    """A :class:`SkipMask` from an interleaved 0/1 vector, or for ``plans`` from a plan vector
    (:func:`~layersearch.strategies.space.mask_from_plan_bits`, which needs ``num_layers``)."""
    if space == SKIPS:
        return SkipMask.from_flat([int(b) for b in bits])
    assert num_layers is not None
    return mask_from_space_bits(bits, num_layers, space)


def random_precisions(mask: SkipMask, rng: np.random.Generator, space: str = "plans") -> SkipMask:
    """``mask`` with each sub-layer it keeps, and the head, at a precision of ``space`` drawn
    uniformly (full, int8, int4; ``plans-int8``: full or int8 on a fair coin). The random part of
    a plan, drawn after the skips, so a skip-only draw from the same seed is unchanged."""
    choices = precision_choices(space)
    L = mask.num_layers
    drawn = rng.integers(0, len(choices), size=2 * L + 1)  # [2L + 1]: interleaved sub-layers, then the head
    picked = {quant: [item for item in range(2 * L) if choices[drawn[item]] == quant] for quant in choices[1:]}
    plan = mask
    for quant, items in picked.items():
        plan = getattr(plan, f"with_{quant}")([i // 2 for i in items if i % 2 == 0 and i // 2 not in mask.attention],
                                               [i // 2 for i in items if i % 2 == 1 and i // 2 not in mask.mlp],
                                               choices[drawn[-1]] == quant)
    return plan
