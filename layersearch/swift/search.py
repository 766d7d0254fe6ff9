"""SWIFT's mask search without Optuna: its sub-layer count, its even starting mask and its
proposals (a random subset of exactly that count, or a GP-UCB step every ``bo_interval``-th
step). Shared by the offline ``swift`` strategy (:mod:`layersearch.strategies.swift`, which adds
the Optuna sampler and stop rule) and the on-the-fly optimiser (:mod:`.controller`).
"""

from __future__ import annotations

import numpy as np

from layersearch import proposals
from layersearch.errors import LayersearchError
from layersearch.mask import SkipMask

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
) -> tuple[SkipMask, str]:
    """The next mask given flat masks ``x`` [n, 2L] and values ``y`` [n] to maximize, and its origin."""
    allowed = np.asarray(allowed_positions(num_layers))
    bits = np.zeros(2 * num_layers, dtype=np.int8)
    # A BO step with fewer than two observations has nothing to fit: it falls back to random.
    if is_bo_step(trial_number, bo_interval) and len(x) >= 2:
        bits[allowed] = proposals.propose_bits(
            x[:, allowed], y, acquisition="ucb", kappa=kappa, count=count, seed=proposals.trial_seed(rng)
        )
        origin = "bo"
    else:
        bits[allowed] = proposals.random_bits(len(allowed), count, rng)
        origin = "random"
    return SkipMask.from_flat(bits.tolist()), origin


def _check_layers(num_layers: int) -> None:
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 3:
        raise LayersearchError(
            f"swift never skips the first and last layers, so it needs at least 3 layers, got {num_layers!r}"
        )
