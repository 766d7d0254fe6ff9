"""The private GP core: rounding, neighbours, and the properties of a proposal."""

from __future__ import annotations

import numpy as np
import pytest

from layersearch.swift import proposals as _gp


def test_discretize_thresholds_or_takes_top_k():
    point = np.array([0.9, 0.5, 0.51, 0.2, 0.7])
    assert _gp.discretize(point, None).tolist() == [1, 0, 1, 0, 1]
    assert _gp.discretize(point, 2).tolist() == [1, 0, 0, 0, 1]
    assert _gp.discretize(np.full(4, 0.5), 2).tolist() == [1, 1, 0, 0]


def test_neighbours_flip_one_or_swap_one_pair():
    row = np.array([[1, 0, 0, 1]], dtype=np.int8)
    flips = _gp.neighbours(row, None)
    assert len(flips) == 4 and all(np.abs(f - row[0]).sum() == 1 for f in flips)
    swaps = _gp.neighbours(row, 2)
    assert len(swaps) == 4 and all(s.sum() == 2 and np.abs(s - row[0]).sum() == 2 for s in swaps)


def test_standardize():
    assert _gp.standardize(np.array([1.0, 3.0])).tolist() == pytest.approx([-0.7071, 0.7071], abs=1e-4)
    assert _gp.standardize(np.array([2.0, 2.0])).tolist() == [0.0, 0.0]


@pytest.fixture(scope="module")
def observations():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2, size=(8, 10)).astype(np.int8)
    weights = np.linspace(-1, 1, 10)
    return x, x @ weights


def test_proposal_keeps_the_count_and_is_new(observations):
    x, y = observations
    bits = _gp.propose_bits(x, y, acquisition="ucb", seed=1, count=4)
    assert bits.shape == (10,) and bits.sum() == 4 and set(bits.tolist()) <= {0, 1}
    assert not any((bits == row).all() for row in x)


def test_proposal_is_deterministic_for_a_seed(observations):
    x, y = observations
    first = _gp.propose_bits(x, y, acquisition="logei", seed=3)
    assert (first == _gp.propose_bits(x, y, acquisition="logei", seed=3)).all()
    assert not any((first == row).all() for row in x)


def test_scores_match_botorch_acquisitions(observations):
    import torch

    x, y = observations
    train_y = torch.as_tensor(_gp.standardize(y)).unsqueeze(-1)
    model = _gp.fit_gp(torch.as_tensor(x, dtype=torch.float64), train_y)
    pool = _gp.neighbours(x[:2], None)
    for name in _gp.ACQUISITIONS:
        acq = _gp.make_acquisition(model, name, best_f=float(train_y.max()), kappa=2.5)
        with torch.no_grad():
            expected = acq(torch.as_tensor(pool, dtype=torch.float64).unsqueeze(1)).numpy()
        scores = _gp.acquisition_scores(model, pool, name, best_f=float(train_y.max()), kappa=2.5)
        assert scores == pytest.approx(expected, rel=1e-4, abs=1e-4)


def test_needs_two_observations(observations):
    x, y = observations
    with pytest.raises(ValueError):
        _gp.propose_bits(x[:1], y[:1], acquisition="ucb", seed=0)


def test_free_coordinates_are_outside_the_count():
    # A plan's precisions (the last ``free`` coordinates) are rounded and flipped alone; the count
    # binds the skips only.
    point = np.array([0.9, 0.5, 0.51, 0.2, 0.7, 0.4])
    assert _gp.discretize(point, 2, free=2).tolist() == [1, 0, 1, 0, 1, 0]
    row = np.array([[1, 0, 1, 0, 1, 0]], dtype=np.int8)
    moves = _gp.neighbours(row, 2, free=2)
    assert len(moves) == 2 + 2 * 2  # one flip per free coordinate, every swap among the first four
    for move in moves:
        assert move[:4].sum() == 2 and np.abs(move - row[0]).sum() in (1, 2)
        assert np.abs(move - row[0]).sum() == 2 or np.array_equal(move[:4], row[0, :4])


def test_a_proposal_with_free_coordinates_keeps_the_count_on_the_others(observations):
    x, y = observations
    bits = _gp.propose_bits(x, y, acquisition="ucb", seed=1, count=3, free=4)
    assert bits[:6].sum() == 3 and set(bits.tolist()) <= {0, 1}
    with pytest.raises(ValueError, match="count"):
        _gp.propose_bits(x, y, acquisition="ucb", seed=1, count=7, free=4)
