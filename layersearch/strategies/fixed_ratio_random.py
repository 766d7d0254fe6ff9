"""Strategy ``random``: uniformly random masks, optionally with an exact number skipped.

With a skip ratio ``r`` each proposal is a uniformly random subset of exactly
``round(r * 2L)`` of the 2L sub-layers (the random-search baseline at a fixed draft cost).
Without one, every sub-layer is skipped with probability 1/2 independently: the same
distribution as Optuna's ``RandomSampler`` over the binary space, but drawn per trial from
``(seed, trial.number)`` so that a resumed study continues the sequence instead of replaying
its first draws (see :mod:`layersearch.strategies._sampler`).

In the ``plans`` space the skips are drawn as above, then each kept sub-layer and the head run
full, int8 or int4, each a third of the time (:func:`~layersearch.strategies._sampler.random_precisions`).
"""

from __future__ import annotations

import numpy as np
from optuna.study import Study
from optuna.trial import FrozenTrial

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.swift.proposals import random_bits  # noqa: F401  (also this module's name for it)
from layersearch.strategies._sampler import MaskSampler, mask_from_bits, random_precisions
from layersearch.strategies.base import Strategy


def skip_count(num_layers: int, skip_ratio: float) -> int:
    """Sub-layers skipped at ``skip_ratio``: ``round(r * 2L)``, the rounding of :meth:`SkipMask.uniform`."""
    return int(round(skip_ratio * 2 * num_layers))


def random_mask(num_layers: int, count: int | None, rng: np.random.Generator, space: str = "skips") -> SkipMask:
    """A uniformly random mask over all 2L sub-layers (exactly ``count`` skipped when given); in the
    ``plans`` space with random precisions for the kept sub-layers and the head."""
    mask = mask_from_bits(random_bits(2 * num_layers, count, rng))
    return mask if space == "skips" else random_precisions(mask, rng, space)


class RandomMaskSampler(MaskSampler):
    """Optuna sampler proposing :func:`random_mask` for every trial."""

    def __init__(
        self, *, num_layers: int, skip_ratio: float | None = None, seed: int | None = None, space: str = "skips"
    ) -> None:
        super().__init__(num_layers=num_layers, seed=seed, space=space)
        self._count = None if skip_ratio is None else skip_count(num_layers, skip_ratio)

    def propose(self, study: Study, trial: FrozenTrial, rng: np.random.Generator) -> tuple[SkipMask, str]:
        """A fresh random mask; the history is not used."""
        return random_mask(self.num_layers, self._count, rng, self.space), "random"


STRATEGY = Strategy(
    name="random",
    summary="uniformly random masks; skips round(2Lr) when a ratio is given",
    sampler=lambda *, num_layers, skip_ratio, seed, space="skips": RandomMaskSampler(
        num_layers=num_layers, skip_ratio=skip_ratio, seed=seed, space=space
    ),
    skip_count=skip_count,
)
