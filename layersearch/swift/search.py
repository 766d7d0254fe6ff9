"""SWIFT's mask search without Optuna: its sub-layer count, its even starting mask and its
proposals (a random subset of exactly that count, or a GP-UCB step every ``bo_interval``-th
step). Shared by the offline ``swift`` strategy (:mod:`layersearch.strategies.swift`, which adds
the Optuna sampler and stop rule) and the on-the-fly optimiser (:mod:`.controller`).

Draft plans (``space="plans"``, :mod:`layersearch.strategies.space`): SWIFT's count stays a
count of *skipped* sub-layers over layers 1..L-2; what a plan adds (each sub-layer's precision
and the head's, first and last layers included) is outside the count. A random step draws the
skips as before, then each precision on a fair coin; a BO step fits the GP to the allowed skip
bits and every precision bit, takes the top-``count`` skips and rounds the precisions at 0.5
(``proposals.propose_bits(free=...)``). The starting masks are the uniform one and the same
with its kept sub-layers and head in int8.
"""

from __future__ import annotations

import numpy as np

from layersearch.swift import proposals
from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask

SKIP_RATIO = 0.45
BO_INTERVAL = 25
KAPPA = 2.5
MATCHNESS_TARGET = 0.95
PATIENCE = 300
MAX_TRIALS = 1000


def skip_count(num_layers: int, skip_ratio: float) -> int:
    """SWIFT's number of skipped sub-layers: ``int((L - 2) * 2 * skip_ratio)``."""
    _check_layers(num_layers)
    return int((num_layers - 2) * 2 * skip_ratio)


def allowed_positions(num_layers: int) -> tuple[int, ...]:
    """Flat (interleaved) indices SWIFT may skip: both sub-layers of layers 1..L-2."""
    _check_layers(num_layers)
    return tuple(range(2, 2 * num_layers - 2))


def initial_masks(num_layers: int, skip_ratio: float = SKIP_RATIO, space: str = "skips") -> tuple[SkipMask, ...]:
    """The study's starting masks: :func:`initial_mask`, and for plans also that mask in int8
    (and in int4, where the space has it)."""
    from layersearch.swift.proposals import SPACE_QUANTS

    mask = initial_mask(num_layers, skip_ratio)
    return (mask, *(mask.kept_in(quant, head=True) for quant in SPACE_QUANTS[space]))


def initial_mask(num_layers: int, skip_ratio: float = SKIP_RATIO) -> SkipMask:
    """The evenly spread mask with SWIFT's count over layers 1..L-2 (its uniform starting draft)."""
    count, inner = skip_count(num_layers, skip_ratio), num_layers - 2
    if inner == 0:
        return SkipMask.none(num_layers)
    # Lay the count out on the inner layers with SkipMask.uniform, then shift past layer 0.
    spread = SkipMask.uniform(inner, count / (2 * inner))
    assert spread.num_skipped == count, "uniform spread lost a sub-layer to rounding"
    return SkipMask(
        num_layers,
        attention=tuple(i + 1 for i in spread.attention),
        mlp=tuple(i + 1 for i in spread.mlp),
    )


def is_bo_step(trial_number: int, bo_interval: int = BO_INTERVAL) -> bool:
    """Whether optimization step ``o = trial_number + 1`` is a Bayesian-optimization step (``o % beta == 0``)."""
    return (trial_number + 1) % bo_interval == 0


def propose(
    x: np.ndarray,
    y: np.ndarray,
    *,
    num_layers: int,
    count: int,
    trial_number: int,
    rng: np.random.Generator,
    bo_interval: int = BO_INTERVAL,
    kappa: float = KAPPA,
    space: str = "skips",
) -> tuple[SkipMask, str]:
    """The next mask given flat masks ``x`` [n, 2L] (plan vectors [n, 6L + 2] of
    :func:`~layersearch.swift.proposals.plan_bits` for ``plans``) and values ``y`` [n] to maximize, and its origin."""
    from layersearch.swift.proposals import SPACE_QUANTS

    allowed = np.asarray(allowed_positions(num_layers))
    quants = SPACE_QUANTS[space]
    plans = bool(quants)
    width = proposals.plan_width(num_layers, quants) if plans else 2 * num_layers
    # The GP's columns: the allowed skips, then (plans) every precision bit, outside the count.
    columns = np.concatenate([allowed, np.arange(2 * num_layers, width)]) if plans else allowed
    bits = np.zeros(width, dtype=np.int8)
    # A BO step with fewer than two observations has nothing to fit: it falls back to random.
    if is_bo_step(trial_number, bo_interval) and len(x) >= 2:
        bits[columns] = proposals.propose_bits(
            x[:, columns], y, acquisition="ucb", kappa=kappa, count=count, seed=proposals.trial_seed(rng),
            free=len(columns) - len(allowed),
        )
        origin = "bo"
    else:
        bits[allowed] = proposals.random_bits(len(allowed), count, rng)
        if plans:  # drawn after the skips: a skip-only draw from the same seed is unchanged
            bits[2 * num_layers:] = rng.integers(0, 2, size=width - 2 * num_layers)
        origin = "random"
    if plans:
        return proposals.mask_from_plan_bits(bits, num_layers, quants), origin
    return SkipMask.from_flat(bits.tolist()), origin


def _check_layers(num_layers: int) -> None:
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 3:
        raise LayersearchError(
            f"swift never skips the first and last layers, so it needs at least 3 layers, got {num_layers!r}"
        )
