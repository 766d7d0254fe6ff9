"""Strategy ``uniform``: the evenly spread mask at a given skip ratio, no search at all.

It always proposes ``SkipMask.uniform(L, skip_ratio)`` (``round(r * 2L)`` sub-layers, attention
and MLP halves each spread evenly over the depth; skip ratio 0.45 by default, SWIFT's 13B
setting). It is the baseline every searched mask must beat, and a study of it needs a single
trial: its stop rule fires once one trial has completed.

In the ``plans`` space it proposes the uniform int8 self-draft: the same skips, every kept
sub-layer and the LM head in int8 (:meth:`SkipMask.kept_in_int8`; skip ratio 0: the whole
model in int8, what ``drafter.quant`` ``"int8"`` drafts with), the plan every searched plan must beat.
"""

from __future__ import annotations

import numpy as np
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from layersearch.masks.mask import SkipMask
from layersearch.strategies._sampler import MaskSampler
from layersearch.strategies.base import Strategy
from layersearch.strategies.fixed_ratio_random import skip_count

SKIP_RATIO = 0.45


class UniformSampler(MaskSampler):
    """Optuna sampler that proposes the uniform mask for every trial."""

    def __init__(
        self, *, num_layers: int, skip_ratio: float = SKIP_RATIO, seed: int | None = None, space: str = "skips"
    ) -> None:
        super().__init__(num_layers=num_layers, seed=seed, space=space)
        self._mask = uniform_plan(num_layers, skip_ratio, space)

    @property
    def mask(self) -> SkipMask:
        """The one mask this sampler proposes."""
        return self._mask

    def propose(self, study: Study, trial: FrozenTrial, rng: np.random.Generator) -> tuple[SkipMask, str]:
        """Always the same uniform mask."""
        return self._mask, "uniform"


def uniform_plan(num_layers: int, skip_ratio: float, space: str = "skips") -> SkipMask:
    """The uniform mask at ``skip_ratio``; for ``plans`` with every kept sub-layer and the head in int8."""
    mask = SkipMask.uniform(num_layers, skip_ratio)
    return mask if space == "skips" else mask.kept_in_int8(head=True)  # the int8 self-draft: the plan to beat


def stop_reason(study: Study, rule: object = None) -> str | None:
    """Stop as soon as one trial completed: every further trial would measure the same mask
    (``rule``, another strategy's stop rule, does not apply)."""
    if study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return "the uniform mask has been measured"
    return None


STRATEGY = Strategy(
    name="uniform",
    summary="the evenly spread mask, one trial; skips round(2Lr), r=.45",
    sampler=lambda *, num_layers, skip_ratio, seed, space="skips": UniformSampler(
        num_layers=num_layers, skip_ratio=skip_ratio, seed=seed, space=space
    ),
    skip_count=skip_count,
    default_ratio=SKIP_RATIO,
    stop_reason=stop_reason,
)
