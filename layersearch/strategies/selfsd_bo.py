"""Strategy ``selfsd-bo``: Self-SD's (Draft & Verify) Gaussian-process Bayesian optimization.

Self-SD searches the 2L sub-layer switches with ``bayes_opt``: a GP over the continuous
relaxation ``[0, 1]^{2L}``, a sub-layer skipped where ``x > 0.5``, GP noise ``alpha = 1e-2``,
seeded with known-good probe masks. Here:

* The study first runs the probe masks of :func:`probe_masks` (the study enqueues them; see
  :func:`layersearch.strategies.initial_masks`): uniform masks skipping 20 %, 35 % and 50 % of
  the sub-layers, and the attention of the later half of the layers. All of them are derived
  from L, never from a fixed layer offset (Self-SD's probe code only fits 40-layer models).
* Until ``n_startup_trials`` (10) trials have completed, probes included, proposals are random
  (every sub-layer a fair coin, as ``bayes_opt``'s random initial points rounded at 0.5).
* Afterwards each proposal maximizes log expected improvement of a GP fitted to all completed
  trials (:mod:`layersearch.swift.proposals`), rounded at 0.5 and refined to the best
  not-yet-measured neighbour. The skipped count is free: the objective (e.g. tokens/s) has to
  price the draft's cost.

Options (``acquisition``, ``kappa``, ``n_startup_trials``, ``kernel``) and
preset ``paper`` (:data:`PAPER_OPTIONS`, :data:`PAPER_SETTINGS`) run the search as Self-SD's
code does: ``maximize(init_points=0)`` starts from the probes with no random points, and
bayes_opt's defaults are UCB (kappa 2.576) over a Matern-2.5 GP.

In the ``plans`` space (``space="plans"``; the paper preset keeps ``skips``) the GP
relaxes the plan's ``6L + 2`` bits (skips, then 1 = int8 and 1 = int4 per sub-layer, then the head's; see
:mod:`layersearch.strategies.space`) exactly as it relaxes the skips: ``[0, 1]^{6L+2}``, rounded
at 0.5, single-flip neighbours. Every vector is a plan (a skipped sub-layer's precision bits
are ignored), so nothing else changes. The probes are the uniform int8 self-draft (every sub-layer
and the head int8, none skipped) and the uniform int4 one, then each skip probe with its kept
sub-layers and head in int8 and int4 by turns (a skip-only probe is left to the random start, which flips a coin per precision too: on
this project's CPU the int8 self-draft beats every skip mask, so skip-only probes would spend
the start on the known-worse side).
"""

from __future__ import annotations

import numpy as np
from optuna.study import Study
from optuna.trial import FrozenTrial

from layersearch.common.checks import check_int
from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.swift import proposals as _gp
from layersearch.strategies._sampler import MaskSampler, history, mask_from_bits, trial_seed
from layersearch.strategies.space import SKIPS
from layersearch.strategies.base import Strategy, check_kappa
from layersearch.strategies.fixed_ratio_random import random_mask

#: Skip ratios of the uniform probe masks.
PROBE_RATIOS = (0.2, 0.35, 0.5)
N_STARTUP_TRIALS = 10
#: bayes_opt's default UCB kappa (Self-SD's ``maximize`` call kept bayes_opt's acquisition).
UCB_KAPPA = 2.576
#: Self-SD's code as published: probes, no random initial points (``init_points=0``), bayes_opt's
#: default acquisition (UCB, kappa 2.576) and GP kernel (Matern 2.5). Preset ``paper``.
PAPER_OPTIONS = {"acquisition": "ucb", "kappa": UCB_KAPPA, "n_startup_trials": 0, "kernel": "matern-2.5"}
OPTIONS = ("acquisition", "kappa", "n_startup_trials", "kernel")
#: The study settings of Self-SD's search: tokens/s of the decoder over 8 prompts, 32 new
#: tokens each, drafts of at most 8 tokens stopped below top-1 probability 0.8.
PAPER_SETTINGS = {"objective": "time-per-token", "samples": 8, "max_new_tokens": 32, "max_draft": 8, "draft_threshold": 0.8}


def probe_masks(num_layers: int, space: str = SKIPS) -> tuple[SkipMask, ...]:
    """Self-SD-style starting points: uniform masks at :data:`PROBE_RATIOS` and the later half's attention;
    for ``plans`` first the all-int8 plan (and the all-int4 one), then each probe with what it
    keeps in int8, or int4 every other probe where the space has int4 (as many probes as before).

    Duplicates (tiny models) and the empty mask are dropped.
    """
    later_half = tuple(range((num_layers + 1) // 2, num_layers))
    candidates = [SkipMask.uniform(num_layers, ratio) for ratio in PROBE_RATIOS]
    candidates.append(SkipMask(num_layers, attention=later_half))
    if space != SKIPS:
        from layersearch.strategies.space import SPACE_QUANTS

        quants = SPACE_QUANTS[space]  # each precision's uniform self-draft, then the skip probes taking turns
        candidates = [*(SkipMask.none(num_layers).kept_in(quant) for quant in quants),
                      *(c.kept_in(quants[i % len(quants)]) for i, c in enumerate(candidates))]
    probes: list[SkipMask] = []
    for mask in candidates:
        if not mask.is_empty and mask not in probes:
            probes.append(mask)
    return tuple(probes)


def propose(
    x: np.ndarray,
    y: np.ndarray,
    *,
    num_layers: int,
    rng: np.random.Generator,
    n_startup_trials: int = N_STARTUP_TRIALS,
    acquisition: str = "logei",
    kappa: float = UCB_KAPPA,
    kernel: str = "rbf",
    space: str = SKIPS,
) -> tuple[SkipMask, str]:
    """The next mask given the flat masks ``x`` [n, 2L] (plan vectors [n, 6L + 2] for ``plans``)
    and values ``y`` [n] to maximize, and its origin."""
    # A GP needs two distinct values at the very least, whatever n_startup_trials says.
    if len(x) < max(n_startup_trials, 2):
        return random_mask(num_layers, None, rng, space), "startup"
    bits = _gp.propose_bits(x, y, acquisition=acquisition, seed=trial_seed(rng), kappa=kappa, kernel=kernel)
    return mask_from_bits(bits, num_layers, space), "bo"


class SelfSDBOSampler(MaskSampler):
    """Optuna sampler for ``selfsd-bo``: random start, then GP-BO over the binary sub-layer switches."""

    def __init__(
        self,
        *,
        num_layers: int,
        seed: int | None = None,
        n_startup_trials: int = N_STARTUP_TRIALS,
        acquisition: str = "logei",
        kappa: float = UCB_KAPPA,
        kernel: str = "rbf",
        space: str = SKIPS,
    ) -> None:
        super().__init__(num_layers=num_layers, seed=seed, space=space)
        if acquisition not in _gp.ACQUISITIONS:
            raise LayersearchError(f"acquisition must be one of {', '.join(_gp.ACQUISITIONS)}, got {acquisition!r}")
        if kernel not in _gp.KERNELS:
            raise LayersearchError(f"kernel must be one of {', '.join(_gp.KERNELS)}, got {kernel!r}")
        check_int(n_startup_trials, "n_startup_trials", minimum=0)
        check_kappa(kappa)
        self._n_startup_trials = n_startup_trials
        self._acquisition = acquisition
        self._kappa = kappa
        self._kernel = kernel

    def propose(self, study: Study, trial: FrozenTrial, rng: np.random.Generator) -> tuple[SkipMask, str]:
        """Random while the history is short, then the GP's suggestion."""
        x, y = history(study, self.num_layers, self.space)
        return propose(
            x,
            y,
            num_layers=self.num_layers,
            rng=rng,
            n_startup_trials=self._n_startup_trials,
            acquisition=self._acquisition,
            kappa=self._kappa,
            kernel=self._kernel,
            space=self.space,
        )


STRATEGY = Strategy(
    name="selfsd-bo",
    summary="Self-SD: probes, random to 10 trials, then GP-BO (logEI); skip count free",
    sampler=lambda *, num_layers, skip_ratio, seed, space=SKIPS, **options: SelfSDBOSampler(
        num_layers=num_layers, seed=seed, space=space, **options
    ),
    options=OPTIONS,
    presets={"paper": {**PAPER_SETTINGS, **PAPER_OPTIONS, "space": SKIPS}},
    initial_masks=lambda inputs: probe_masks(inputs.num_layers, inputs.space),
    objective="time-per-token",
)
