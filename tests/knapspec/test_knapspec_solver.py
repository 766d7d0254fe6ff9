"""Tests for layersearch.knapspec.solver: brute force, reference vs numba, edge cases, bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layersearch.common.errors import LayersearchError
from layersearch.knapspec.solver import (
    _solve_core,
    benchmark_solver,
    format_benchmark,
    solve_all_budgets,
    solve_all_budgets_reference,
)

SOLVERS = [solve_all_budgets, solve_all_budgets_reference]

# Derandomized and bounded: the file must stay fast, and the first call pays numba's
# compile (or cache load), hence no per-example deadline.
PROPERTY = settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def brute_force(weights, values, capacity):
    """Best total value for every budget 0..capacity by enumerating all 2^n subsets."""
    n = len(weights)
    masks = np.array(list(itertools.product([0, 1], repeat=n)), dtype=np.int64).reshape(2**n, n)
    w = masks @ np.asarray(weights, dtype=np.int64).reshape(n)
    v = masks @ np.asarray(values, dtype=np.float64).reshape(n)
    return np.array([v[w <= k].max() for k in range(capacity + 1)])


def check_solution(weights, values, capacity, best, chosen):
    """Shapes and dtypes of the contract, and that chosen[k] reaches best[k] within k."""
    n = len(weights)
    assert best.dtype == np.float64 and best.shape == (capacity + 1,)
    assert chosen.dtype == np.bool_ and chosen.shape == (capacity + 1, n)
    w = np.asarray(weights, dtype=np.int64)
    v = np.asarray(values, dtype=np.float64)
    for k in range(capacity + 1):
        assert int(w[chosen[k]].sum()) <= k
        assert abs(float(v[chosen[k]].sum()) - best[k]) <= 1e-9


# Values drawn partly from a small grid, so exact ties (and zeros) are common.
value_st = st.one_of(
    st.floats(min_value=-1.0, max_value=1.0, allow_nan=False, allow_infinity=False),
    st.sampled_from([-0.5, 0.0, 0.25, 0.5, 1.0]),
)


@st.composite
def instances(draw, max_items=14):
    """(weights, values, capacity) with small integer weights, zeros included."""
    n = draw(st.integers(min_value=0, max_value=max_items))
    weights = draw(st.lists(st.integers(min_value=0, max_value=12), min_size=n, max_size=n))
    values = draw(st.lists(value_st, min_size=n, max_size=n))
    capacity = draw(st.integers(min_value=0, max_value=40))
    return weights, values, capacity


@pytest.mark.parametrize("solver", SOLVERS, ids=["numba", "reference"])
@PROPERTY
@given(instance=instances())
def test_matches_brute_force(solver, instance):
    weights, values, capacity = instance
    best, chosen = solver(weights, values, capacity)
    np.testing.assert_allclose(best, brute_force(weights, values, capacity), rtol=0, atol=1e-9)
    check_solution(weights, values, capacity, best, chosen)


@PROPERTY
@given(instance=instances(max_items=30))
def test_numba_and_reference_identical_small(instance):
    # Both follow the same float operations and tie rule, so they agree bit for bit.
    fast = solve_all_budgets(*instance)
    ref = solve_all_budgets_reference(*instance)
    np.testing.assert_array_equal(fast[0], ref[0])
    np.testing.assert_array_equal(fast[1], ref[1])


@pytest.mark.parametrize("seed", range(5))
def test_numba_and_reference_identical_60_items(seed):
    rng = np.random.default_rng(seed)
    weights = rng.integers(1, 21, size=60)
    values = rng.uniform(-0.2, 1.0, size=60)
    fast_best, fast_chosen = solve_all_budgets(weights, values, 600)
    ref_best, ref_chosen = solve_all_budgets_reference(weights, values, 600)
    np.testing.assert_array_equal(fast_best, ref_best)
    np.testing.assert_array_equal(fast_chosen, ref_chosen)
    check_solution(weights, values, 600, fast_best, fast_chosen)


@pytest.mark.parametrize("solver", SOLVERS, ids=["numba", "reference"])
@PROPERTY
@given(instance=instances(max_items=20))
def test_best_values_monotonic_and_non_negative(solver, instance):
    best, _ = solver(*instance)
    assert (np.diff(best) >= 0).all()
    assert (best >= 0).all()


@pytest.mark.parametrize("solver", SOLVERS, ids=["numba", "reference"])
def test_capacity_zero(solver):
    best, chosen = solver([0, 1, 2, 0], [0.5, 3.0, 1.0, -1.0], 0)
    np.testing.assert_array_equal(best, [0.5])
    np.testing.assert_array_equal(chosen, [[True, False, False, False]])


@pytest.mark.parametrize("solver", SOLVERS, ids=["numba", "reference"])
def test_empty_item_list(solver):
    best, chosen = solver([], [], 5)
    np.testing.assert_array_equal(best, np.zeros(6))
    assert chosen.shape == (6, 0) and chosen.dtype == np.bool_
    best, chosen = solver(np.array([], dtype=np.int64), np.array([]), 0)
    assert best.shape == (1,) and chosen.shape == (1, 0)


@pytest.mark.parametrize("solver", SOLVERS, ids=["numba", "reference"])
def test_non_positive_values_never_taken(solver):
    best, chosen = solver([1, 0, 2, 1], [-0.3, 0.0, -1.0, 0.0], 4)
    np.testing.assert_array_equal(best, np.zeros(5))
    assert not chosen.any()


@pytest.mark.parametrize("solver", SOLVERS, ids=["numba", "reference"])
def test_zero_weight_positive_value_always_taken(solver):
    _, chosen = solver([0, 3], [0.1, 1.0], 5)
    assert chosen[:, 0].all()
    np.testing.assert_array_equal(chosen[:, 1], [False, False, False, True, True, True])


@pytest.mark.parametrize("solver", SOLVERS, ids=["numba", "reference"])
def test_ties_prefer_earlier_items(solver):
    # Three equal items, room for one or two: the lowest indices win, every time.
    for _ in range(3):
        _, chosen = solver([2, 2, 2], [1.0, 1.0, 1.0], 4)
        np.testing.assert_array_equal(chosen[2], [True, False, False])
        np.testing.assert_array_equal(chosen[4], [True, True, False])
    # An equal-value alternative made of later items does not displace an earlier one.
    _, chosen = solver([2, 1, 1], [1.0, 0.5, 0.5], 2)
    np.testing.assert_array_equal(chosen[2], [True, False, False])


def test_weights_heavier_than_capacity_and_input_types():
    weights = np.array([1, 2**40, 3], dtype=np.uint64)
    best, chosen = solve_all_budgets(weights, [1.0, 100.0, 2.0], 4)
    np.testing.assert_array_equal(best, [0.0, 1.0, 1.0, 2.0, 3.0])
    assert not chosen[:, 1].any()
    # Integral floats (e.g. np.round output) and small int dtypes are accepted.
    for w in ([1.0, 3.0, 3.0], np.array([1, 3, 3], dtype=np.int8), (1, 3, 3)):
        best, _ = solve_all_budgets(w, np.array([1, 2, 2], dtype=np.float32), 7)
        np.testing.assert_array_equal(best, [0, 1, 1, 2, 3, 3, 4, 5])


def test_core_compiled_once():
    # Whatever the input dtypes, the public function feeds the core one signature.
    solve_all_budgets([1, 2], [1.0, 2.0], 3)
    solve_all_budgets(np.array([1, 2], dtype=np.int16), np.array([1, 2], dtype=np.float32), np.int32(3))
    solve_all_budgets([1.0, 2.0], [1, 2], 3.0)
    assert len(_solve_core.signatures) == 1


@pytest.mark.parametrize(
    "weights, values, capacity, match",
    [
        ([1, -2], [1.0, 1.0], 3, "non-negative"),
        ([1, 2, 3], [1.0, 1.0], 3, "same length"),
        ([1, 2.5], [1.0, 1.0], 3, "integers"),
        ([1, float("nan")], [1.0, 1.0], 3, "integers"),
        ([1, 2], [1.0, 1.0], -1, "capacity"),
        ([1, 2], [1.0, 1.0], 2.5, "capacity"),
        ([1, 2], [1.0, 1.0], True, "capacity"),
        ([1, 2], [1.0, 1.0], "3", "capacity"),
        ([1, 2], [1.0, float("nan")], 3, "finite"),
        ([1, 2], [float("inf"), 1.0], 3, "finite"),
        ([[1, 2]], [1.0, 1.0], 3, "1-D"),
        ([True, False], [1.0, 1.0], 3, "numbers"),
        ([1, 2], ["a", "b"], 3, "numbers"),
        ([1, [2, 3]], [1.0, 1.0], 3, "weights"),
    ],
)
@pytest.mark.parametrize("solver", SOLVERS, ids=["numba", "reference"])
def test_bad_input_raises_one_line(solver, weights, values, capacity, match):
    with pytest.raises(LayersearchError, match=match) as info:
        solver(weights, values, capacity)
    assert "\n" not in str(info.value)


def test_benchmark_smoke():
    result = benchmark_solver(n_items=10, capacity=50, repeats=3, reference_repeats=1)
    assert result["numba_seconds"] > 0 and result["reference_seconds"] > 0
    assert result["speedup"] == pytest.approx(result["reference_seconds"] / result["numba_seconds"])
    line = format_benchmark(result)
    assert "numba" in line and "speedup" in line and "\n" not in line
