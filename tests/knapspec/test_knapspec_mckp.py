"""Tests for layersearch.knapspec.mckp: the multiple-choice knapsack of draft plans against brute force."""

from __future__ import annotations

import numpy as np
import pytest

from layersearch.common.errors import LayersearchError
from layersearch.knapspec.mckp import solve_choices_all_budgets, solve_choices_brute_force, solve_choices_reference

SOLVERS = [solve_choices_all_budgets, solve_choices_reference]


def random_instance(rng: np.random.Generator):
    """A small plan-like instance: 1..6 groups of 1..3 options, some missing (-inf), ties on purpose."""
    groups, options = int(rng.integers(1, 7)), int(rng.integers(1, 4))
    weights = rng.integers(0, 7, size=(groups, options))
    values = np.round(rng.uniform(-0.3, 1.0, size=(groups, options)), 1)  # rounded: equal totals happen
    values[rng.random((groups, options)) < 0.15] = -np.inf
    return weights, values, int(rng.integers(0, 25))


def total(weights, values, choice):
    return sum(int(weights[g, o]) for g, o in enumerate(choice)), sum(float(values[g, o]) for g, o in enumerate(choice))


@pytest.mark.parametrize("seed", range(200))
def test_matches_brute_force_on_random_small_instances(seed):
    weights, values, capacity = random_instance(np.random.default_rng(seed))
    expected = solve_choices_brute_force(weights, values, capacity)
    fast_best, fast_chosen = solve_choices_all_budgets(weights, values, capacity)
    ref_best, ref_chosen = solve_choices_reference(weights, values, capacity)
    np.testing.assert_array_equal(fast_best, expected)
    np.testing.assert_array_equal(ref_best, expected)
    np.testing.assert_array_equal(fast_chosen, ref_chosen)  # the same tie rule, bit for bit
    for k in range(capacity + 1):
        if expected[k] == -np.inf:
            assert (fast_chosen[k] == -1).all()
            continue
        w, v = total(weights, values, fast_chosen[k])
        assert w <= k and v == expected[k]  # the choice achieves the optimum within the budget


def test_zero_one_knapsack_is_the_two_option_case():
    """Skip (weight 0, value 0) or run: the plans' knapsack reduces to KnapSpec's 0/1 one."""
    from layersearch.knapspec.solver import solve_all_budgets

    rng = np.random.default_rng(3)
    w = rng.integers(1, 6, size=8)
    v = rng.uniform(0.01, 1.0, size=8)
    best01, chosen01 = solve_all_budgets(w, v, 20)
    best, chosen = solve_choices_all_budgets(np.stack([np.zeros(8, int), w], 1), np.stack([np.zeros(8), v], 1), 20)
    np.testing.assert_allclose(best, best01)
    np.testing.assert_array_equal(chosen == 1, chosen01)


def test_ties_take_the_lower_option():
    best, chosen = solve_choices_all_budgets(np.array([[1, 1, 1]]), np.array([[0.5, 0.5, 0.4]]), 1)
    assert chosen[1].tolist() == [0] and best[1] == 0.5
    assert chosen[0].tolist() == [-1] and best[0] == -np.inf  # nothing fits within 0


def test_a_missing_option_is_never_taken():
    best, chosen = solve_choices_all_budgets(np.array([[0, 1, 2]]), np.array([[-np.inf, 0.1, 0.9]]), 5)
    assert chosen[:, 0].tolist() == [-1, 1, 2, 2, 2, 2]


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize(
    "weights, values, capacity",
    [
        ([[1, 2]], [[0.1]], 3),  # shapes differ
        ([1, 2], [0.1, 0.2], 3),  # not [groups, options]
        ([[1.5, 2]], [[0.1, 0.2]], 3),  # weights not integers
        ([[-1, 2]], [[0.1, 0.2]], 3),  # negative weight
        ([[1, 2]], [[np.nan, 0.2]], 3),  # NaN value
        ([[1, 2]], [[np.inf, 0.2]], 3),  # +inf value
        ([[1, 2]], [[0.1, 0.2]], -1),  # negative capacity
        ([[1, 2]], [[0.1, 0.2]], True),  # bool capacity
    ],
)
def test_bad_input_is_one_error(solver, weights, values, capacity):
    with pytest.raises(LayersearchError, match="knapsack"):
        solver(weights, values, capacity)


def test_without_numba_the_reference_answers(monkeypatch):
    from layersearch.knapspec import mckp

    weights, values, capacity = random_instance(np.random.default_rng(7))
    expected = solve_choices_reference(weights, values, capacity)
    monkeypatch.setattr(mckp, "njit", None)
    best, chosen = mckp.solve_choices_all_budgets(weights, values, capacity)
    np.testing.assert_array_equal(best, expected[0])
    np.testing.assert_array_equal(chosen, expected[1])
