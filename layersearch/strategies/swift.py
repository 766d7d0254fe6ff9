"""Strategy ``swift``: SWIFT's random search with interval Bayesian optimization (Xia et al., ICLR 2025).

SWIFT (§4.1.2 and Appendix B.2 of the paper, and its public code) searches masks with a
fixed number of skipped sub-layers:

* count = ``int((L - 2) * 2 * skip_ratio)`` (their code's truncation, kept for parity); the
  first and the last layer are never skipped, so the count is spread over layers 1..L-2;
  skip_ratio 0.45 by default (their 13B setting; 0.5 for 34B/70B).
* The study starts from the evenly spread mask of that count (SWIFT's drafts start by
  uniform layer skipping): :func:`initial_mask`, enqueued via ``initial_masks``.
* Optimization step ``o = trial.number + 1``: every ``bo_interval``-th step (beta = 25) a GP
  suggestion (UCB with kappa 2.5 over the allowed sub-layers; the top-``count`` coordinates
  of the continuous optimum keep the count exact, refined to the best unmeasured swap
  neighbour, see :mod:`layersearch.swift.proposals`); every other step a uniformly random
  subset of exactly ``count`` allowed sub-layers.
* Early stop (:class:`StopRule`): best value >= 0.95 (matchness; their script uses 0.93), or
  300 steps without improvement, or 1000 steps.

SWIFT keeps a proposal only if it beats the best so far; in a study that is simply the best
trial. In the ``plans`` space (not the paper preset's) the count still counts skipped
sub-layers; each precision is a coin on random steps and a GP coordinate outside the count on
BO steps (:mod:`layersearch.swift.search`). Its on-the-fly setting (matchness on the context window) is the objective's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from layersearch.common.checks import check_int
from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.strategies._sampler import MaskSampler, history
from layersearch.strategies.base import Strategy, StrategyInputs, check_kappa
# SWIFT's count, starting mask and proposals live with its on-the-fly optimiser, without Optuna.
from layersearch.swift.search import (  # noqa: F401  (this module's names for them, as before)
    BO_INTERVAL, KAPPA, MATCHNESS_TARGET, MAX_TRIALS, PATIENCE, SKIP_RATIO, allowed_positions, initial_mask, initial_masks,
    is_bo_step, propose, skip_count,
)

#: SWIFT's settings (Appendix B.2) for preset ``paper``: matchness over a
#: 32-token window, r = 0.45, beta = 25, kappa = 2.5, stop at 0.95 / 300 / 1000.
PAPER_PRESET = {
    "objective": "matchness", "skip_ratio": SKIP_RATIO, "gamma": 32, "bo_interval": BO_INTERVAL, "kappa": KAPPA,
    "target": MATCHNESS_TARGET, "patience": PATIENCE, "max_trials": MAX_TRIALS, "space": "skips",
}


@dataclass(frozen=True)
class StopRule:
    """SWIFT's early stop: a target value reached, ``patience`` steps without improvement, or ``max_trials``.

    ``target`` counts as reached when the best value is at least as good as it in the study's
    direction (``>=`` when maximizing, ``<=`` when minimizing); it is meant for matchness.
    ``None`` switches a criterion off.
    """

    target: float | None = MATCHNESS_TARGET
    patience: int | None = PATIENCE
    max_trials: int | None = MAX_TRIALS

    def reason(self, study: Study) -> str | None:
        """Why ``study`` should stop now, or None to go on."""
        if len(study.directions) != 1:
            raise LayersearchError("swift's stop rule needs a single-objective study")
        finished = study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        )
        values = [t.value if t.state == TrialState.COMPLETE else None for t in sorted(finished, key=lambda t: t.number)]
        return self.reason_for(values, maximize=study.direction == StudyDirection.MAXIMIZE)

    def reason_for(self, values: Sequence[float | None], *, maximize: bool) -> str | None:
        """The stop reason for the values of the finished steps in order (None for a failed step)."""
        sign = 1.0 if maximize else -1.0
        best, since = None, 0
        for value in values:
            if value is not None and (best is None or sign * value > sign * best):
                best, since = value, 0
            else:
                since += 1
        if self.target is not None and best is not None and sign * best >= sign * self.target:
            return f"best value {best:.4g} reached the target {self.target:g}"
        if self.patience is not None and since >= self.patience:
            return f"no improvement in the last {since} trials"
        if self.max_trials is not None and len(values) >= self.max_trials:
            return f"reached {len(values)} trials"
        return None


class SwiftSampler(MaskSampler):
    """Optuna sampler for ``swift``: random fixed-count masks with a GP step every ``bo_interval`` trials."""

    def __init__(
        self,
        *,
        num_layers: int,
        skip_ratio: float = SKIP_RATIO,
        seed: int | None = None,
        bo_interval: int = BO_INTERVAL,
        kappa: float = KAPPA,
        space: str = "skips",
    ) -> None:
        super().__init__(num_layers=num_layers, seed=seed, space=space)
        check_int(bo_interval, "bo_interval")
        check_kappa(kappa)
        self._count = skip_count(num_layers, skip_ratio)
        self._bo_interval = bo_interval
        self._kappa = kappa

    @property
    def count(self) -> int:
        """Exact number of sub-layers every proposal skips."""
        return self._count

    def propose(self, study: Study, trial: FrozenTrial, rng: np.random.Generator) -> tuple[SkipMask, str]:
        """Random subset of the allowed sub-layers, or the GP's choice on every ``bo_interval``-th trial."""
        x, y = history(study, self.num_layers, self.space) if is_bo_step(trial.number, self._bo_interval) else _no_history()
        return propose(
            x,
            y,
            num_layers=self.num_layers,
            count=self._count,
            trial_number=trial.number,
            rng=rng,
            bo_interval=self._bo_interval,
            kappa=self._kappa,
            space=self.space,
        )


def _no_history() -> tuple[np.ndarray, np.ndarray]:
    # Random steps ignore the history; skip reading every trial from storage for them.
    return np.empty((0, 0), dtype=np.int8), np.empty(0)


def _stop_reason(study: Study, rule: StopRule | None = None) -> str | None:
    return (rule or StopRule()).reason(study)


def _initial_masks(inputs: StrategyInputs) -> tuple[SkipMask, ...]:
    """SWIFT's starting masks at the inputs' resolved skip ratio (SWIFT's own where they carry none)."""
    ratio = SKIP_RATIO if inputs.skip_ratio is None else inputs.skip_ratio
    return initial_masks(inputs.num_layers, ratio, inputs.space)


STRATEGY = Strategy(
    name="swift",
    summary="SWIFT: random subsets + a GP-UCB step every 25th trial; skips int((L-2)*2r), r=.45",
    sampler=lambda *, num_layers, skip_ratio, seed, space="skips", **options: SwiftSampler(
        num_layers=num_layers, skip_ratio=skip_ratio, seed=seed, space=space, **options
    ),
    options=("bo_interval", "kappa"),
    stop_options=("target", "patience", "max_trials"),
    presets={"paper": PAPER_PRESET},
    skip_count=skip_count,
    default_ratio=SKIP_RATIO,
    initial_masks=_initial_masks,
    stop_reason=_stop_reason,
    objective="matchness",
)
