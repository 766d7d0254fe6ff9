"""0/1 knapsack over sub-layers, solved for every latency budget at once.

The items are the 2L sub-layers of a model (attention and MLP of each decoder layer),
each with an integer latency (its *weight*) and a float score (its *value*, e.g. from
cosine similarity, possibly negative). One dynamic programme answers "which set of
items gives the largest total value within latency ``k``" for every ``k`` in
``0..capacity``, so a caller can sweep budgets without re-solving.

Public API:

* :func:`solve_all_budgets` -- the fast solver (numba core, compiled once and cached; without
  numba, the ``kernels`` extra, it answers with the reference solver and says so once).
* :func:`solve_all_budgets_reference` -- a pure-Python solver with the same contract,
  kept as the oracle for tests.
* :func:`benchmark_solver` / :func:`format_benchmark` -- timing of the two
  (``python -m layersearch.knapspec.solver`` prints it).

Choices (both solvers follow them exactly, so their outputs are bit-identical):

* Weights are non-negative integers (integer dtypes, or floats with integral values
  such as the output of ``np.round``). A 0-weight item is free: it is taken in every
  budget whenever its value is positive (and not so tiny that adding it leaves the
  float total unchanged).
* Values are finite floats. An item with value <= 0 is never taken: it cannot raise
  the total, and the empty set (value 0) always fits, so ``best_values >= 0``.
* Ties are broken deterministically: an item is taken only if it *strictly* increases
  the best float total reachable with the items before it. Among equal-value
  solutions, lower-index items are therefore preferred over later ones.
* Items heavier than ``capacity`` are simply never taken.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable

import numpy as np

from layersearch.common.errors import LayersearchError
from layersearch.common.extras import install_command, note_once

njit: Callable[..., Any] | None  # numba's decorator factory, None without numba
try:
    from numba import njit as _numba_njit
    njit = _numba_njit
except ModuleNotFoundError:  # the kernels extra is missing: solve_all_budgets uses the reference
    njit = None

__all__ = [
    "solve_all_budgets",
    "solve_all_budgets_reference",
    "benchmark_solver",
    "format_benchmark",
]


# --------------------------------------------------------------------------- validation


def _validate(weights: Any, values: Any, capacity: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """Check the inputs; return contiguous int64 weights, float64 values and an int capacity."""
    cap = _validate_capacity(capacity)
    w = _validate_weights(weights, cap)
    v = _validate_values(values)
    if w.shape[0] != v.shape[0]:
        raise LayersearchError(
            f"knapsack: weights and values must have the same length, got {w.shape[0]} and {v.shape[0]}"
        )
    return w, v, cap


def _validate_capacity(capacity: Any) -> int:
    """Capacity must be a non-negative integer (an integral float such as 600.0 is accepted)."""
    ok = isinstance(capacity, (int, np.integer)) and not isinstance(capacity, (bool, np.bool_))
    if not ok and isinstance(capacity, (float, np.floating)):
        ok = math.isfinite(capacity) and float(capacity).is_integer()
    if not ok:
        raise LayersearchError(f"knapsack: capacity must be a non-negative integer, got {capacity!r}")
    cap = int(capacity)
    if cap < 0:
        raise LayersearchError(f"knapsack: capacity must be a non-negative integer, got {cap}")
    return cap


def _as_1d(data: Any, name: str) -> np.ndarray:
    """Turn ``data`` into a 1-D numeric array or raise a one-line error."""
    try:
        arr = np.asarray(data)
    except (TypeError, ValueError) as exc:  # ragged nested lists and the like
        raise LayersearchError(f"knapsack: {name} must be a 1-D array of numbers ({exc})") from None
    if arr.ndim != 1:
        raise LayersearchError(f"knapsack: {name} must be a 1-D array, got shape {arr.shape}")
    # An empty list comes back as float64; anything non-numeric (bool, str, object,
    # complex) is refused so that no silent coercion happens.
    if arr.dtype.kind not in "iuf":
        raise LayersearchError(f"knapsack: {name} must be numbers, got dtype {arr.dtype}")
    return arr


def _validate_weights(weights: Any, capacity: int) -> np.ndarray:
    """Weights must be non-negative integers; returned clipped to ``capacity + 1`` as int64."""
    w = _as_1d(weights, "weights")
    if w.dtype.kind == "f":
        bad = ~np.isfinite(w) | (w != np.floor(w))
        if bad.any():
            i = int(np.argmax(bad))
            raise LayersearchError(f"knapsack: weights must be integers, got {w[i]!r} at index {i}")
    if w.size and (w < 0).any():
        i = int(np.argmax(w < 0))
        raise LayersearchError(f"knapsack: weights must be non-negative, got {w[i]!r} at index {i}")
    # Anything heavier than the capacity never fits, so clipping changes no answer; it
    # keeps huge (e.g. uint64 or 1e30) weights from overflowing the int64 cast.
    heavy = w > capacity
    out = np.full(w.shape[0], capacity + 1, dtype=np.int64)
    out[~heavy] = w[~heavy]  # all <= capacity, so the int64 cast is exact
    return out


def _validate_values(values: Any) -> np.ndarray:
    """Values must be finite numbers; returned as contiguous float64."""
    v = _as_1d(values, "values").astype(np.float64)
    bad = ~np.isfinite(v)
    if bad.any():
        i = int(np.argmax(bad))
        raise LayersearchError(f"knapsack: values must be finite, got {v[i]!r} at index {i}")
    return np.ascontiguousarray(v)


# --------------------------------------------------------------------------- fast solver


# The core is split into small jitted helpers: besides reading better, numba/LLVM
# optimises the separate loops measurably better than one big function (~1.7x here).
# They use plain loops and 2-D indexing, not slice assignment or row views, which
# numba compiles several times slower (a cold compile went from ~12 s to ~3 s).
# All are always called with (int64[::1], float64[::1], int64), so each compiles once,
# and ``cache=True`` keeps the machine code on disk across processes.


def _jit(function):
    """``function`` compiled by numba (lazily, on first call; cached on disk), or as is without numba."""
    return njit(cache=True)(function) if njit is not None else function


@_jit
def _fill_table(weights, values, capacity):  # pragma: no cover - compiled by numba
    """dp[i, k]: best value using items 0..i-1 within budget k, shape (n+1, capacity+1)."""
    n = weights.shape[0]
    dp = np.zeros((n + 1, capacity + 1))
    for i in range(n):
        w = weights[i]
        v = values[i]
        # A non-positive value can never strictly improve a total (rows are
        # non-decreasing in k and float rounding is monotone): just copy the row.
        if v <= 0.0 or w > capacity:
            w = capacity + 1
        for k in range(w):
            dp[i + 1, k] = dp[i, k]
        # Reading row i and writing row i+1 (never in place) keeps each item 0/1 and
        # lets LLVM vectorise; the select keeps the strict-improvement tie rule.
        for j in range(capacity + 1 - w):
            cand = dp[i, j] + v
            old = dp[i, j + w]
            dp[i + 1, j + w] = cand if cand > old else old
    return dp


@_jit
def _take_table(dp):  # pragma: no cover - compiled by numba
    """take[i, k]: item i is in the best solution over items 0..i with budget k.

    A row changes exactly where the item strictly improved it, so this is a cheap
    vectorised comparison instead of a store inside the DP loop.
    """
    n = dp.shape[0] - 1
    take = np.empty((n, dp.shape[1]), dtype=np.bool_)
    for i in range(n):
        for k in range(dp.shape[1]):
            take[i, k] = dp[i + 1, k] != dp[i, k]
    return take


@_jit
def _backtrack(weights, take):  # pragma: no cover - compiled by numba
    """chosen[k]: walk items from last to first, from budget k, following the take table."""
    n = take.shape[0]
    n_budgets = take.shape[1]
    chosen = np.zeros((n_budgets, n), dtype=np.bool_)
    for k in range(n_budgets):
        r = k
        for i in range(n - 1, -1, -1):
            if take[i, r]:
                chosen[k, i] = True
                r -= weights[i]
    return chosen


@_jit
def _solve_core(weights, values, capacity):  # pragma: no cover - compiled by numba
    """Fill the DP table, derive the take table, backtrack every budget."""
    dp = _fill_table(weights, values, capacity)
    chosen = _backtrack(weights, _take_table(dp))
    best = np.empty(capacity + 1)
    n = weights.shape[0]
    for k in range(capacity + 1):
        best[k] = dp[n, k]
    return best, chosen


def solve_all_budgets(weights: Any, values: Any, capacity: Any) -> tuple[np.ndarray, np.ndarray]:
    """Best 0/1 knapsack value and item set for every budget ``k`` in ``0..capacity``.

    Returns ``(best_values, chosen)``: ``best_values`` float64 of shape ``[capacity+1]``,
    ``best_values[k]`` the largest total value with total weight <= k; ``chosen`` bool of
    shape ``[capacity+1, n_items]``, ``chosen[k]`` an item set achieving it. See the module
    docstring for the rules on zero weights, non-positive values and ties. Bad input
    raises :class:`LayersearchError`.
    """
    if njit is None:
        note_once(f"numba is not installed, so KnapSpec's knapsack runs in pure Python (same choices, slower; "
                  f"{install_command('kernels')} adds the fast solver)")
        return solve_all_budgets_reference(weights, values, capacity)
    w, v, cap = _validate(weights, values, capacity)
    return _solve_core(w, v, np.int64(cap))


# --------------------------------------------------------------------------- reference


def solve_all_budgets_reference(weights: Any, values: Any, capacity: Any) -> tuple[np.ndarray, np.ndarray]:
    """Pure-Python textbook solver with the same contract as :func:`solve_all_budgets`.

    Uses the full ``(n+1) x (capacity+1)`` table, kept slow and obvious as a test oracle.
    """
    w_arr, v_arr, cap = _validate(weights, values, capacity)
    w = [int(x) for x in w_arr]
    v = [float(x) for x in v_arr]
    n = len(w)
    # dp[i][k]: best value using items 0..i-1 within budget k.
    dp = [[0.0] * (cap + 1) for _ in range(n + 1)]
    take = [[False] * (cap + 1) for _ in range(n)]
    for i in range(n):
        prev, row = dp[i], dp[i + 1]
        for k in range(cap + 1):
            row[k] = prev[k]
            if w[i] <= k:
                cand = prev[k - w[i]] + v[i]
                if cand > prev[k]:  # same strict tie rule as the fast solver
                    row[k] = cand
                    take[i][k] = True
    chosen = np.zeros((cap + 1, n), dtype=bool)
    for k in range(cap + 1):
        r = k
        for i in range(n - 1, -1, -1):
            if take[i][r]:
                chosen[k, i] = True
                r -= w[i]
    return np.array(dp[n], dtype=np.float64), chosen


# --------------------------------------------------------------------------- benchmark


def _random_instance(n_items: int, capacity: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sub-layer-like instance: latencies whose sum exceeds the capacity, cosine-like values."""
    rng = np.random.default_rng(seed)
    # Mean weight ~ 1.05 * capacity / n_items, so the largest budget still binds.
    high = max(2, int(round(2.1 * capacity / max(n_items, 1))))
    weights = rng.integers(1, high + 1, size=n_items)
    values = rng.uniform(-0.1, 1.0, size=n_items)
    return weights, values


def _median_seconds(fn, repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls."""
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def benchmark_solver(
    n_items: int = 60,
    capacity: int = 600,
    repeats: int = 200,
    seed: int = 0,
    reference_repeats: int = 5,
) -> dict:
    """Median seconds per call of the numba solver and of the reference, and their ratio.

    The numba timing is of the public :func:`solve_all_budgets` (validation included),
    after one warm-up call so compilation or cache loading is not counted.
    """
    weights, values = _random_instance(n_items, capacity, seed)
    solve_all_budgets(weights, values, capacity)  # warm-up: compile / load cache
    fast = _median_seconds(lambda: solve_all_budgets(weights, values, capacity), repeats)
    ref = _median_seconds(lambda: solve_all_budgets_reference(weights, values, capacity), reference_repeats)
    return {
        "n_items": n_items,
        "capacity": capacity,
        "repeats": repeats,
        "reference_repeats": reference_repeats,
        "numba_seconds": fast,
        "reference_seconds": ref,
        "speedup": ref / fast if fast > 0 else float("inf"),
    }


def format_benchmark(result: dict) -> str:
    """One human-readable line for a :func:`benchmark_solver` result."""
    return (
        f"knapsack {result['n_items']} items x {result['capacity'] + 1} budgets: "
        f"numba {result['numba_seconds'] * 1e3:.3f} ms/call (median of {result['repeats']}), "
        f"reference {result['reference_seconds'] * 1e3:.1f} ms/call (median of {result['reference_repeats']}), "
        f"speedup {result['speedup']:.0f}x"
    )


if __name__ == "__main__":
    print(format_benchmark(benchmark_solver()))
