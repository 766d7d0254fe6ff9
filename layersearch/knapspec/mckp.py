"""Multiple-choice knapsack over sub-layers, solved for every cost budget at once (draft plans).

A draft plan gives each sub-layer one of several options (full, int8, int4 or skipped), each with an
integer cost (its *weight*: profiled seconds in integer units) and a float *value*. The
multiple-choice knapsack picks exactly one option per group so that the total value is largest
within cost ``k``, for every ``k`` in ``0..capacity`` at once: one DP table, like
:func:`~layersearch.knapspec.solver.solve_all_budgets` for the 0/1 case (which is the special
case of two options, skip at weight 0 and value 0, or run).

Public API:

* :func:`solve_choices_all_budgets` -- the fast solver (numba core, compiled once and cached;
  without numba it answers with the reference solver: the same choices, slower).
* :func:`solve_choices_reference` -- a pure-Python solver with the same contract and the same
  tie rules (bit-identical outputs), and :func:`solve_choices_brute_force`, which enumerates
  every combination: the oracles of the tests.

Rules (both solvers follow them exactly):

* ``weights`` ``[G, O]`` non-negative integers, ``values`` ``[G, O]`` finite floats or ``-inf``
  for an option a group does not have (e.g. skipping the last layer). An option heavier than
  the capacity is never taken.
* ``best[k]`` is ``-inf`` when no choice fits within ``k`` (a group whose every option is too
  heavy); its ``chosen[k]`` row is then all ``-1``.
* Within budget ``k`` means total weight ``<= k``. Ties: an option replaces the best one so far
  for a group only if it *strictly* increases the total, so among equal totals the lower option
  index wins, group by group from the last one (the order of the backtrack).
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable

import numpy as np

from layersearch.common.errors import LayersearchError

njit: Callable[..., Any] | None  # numba's decorator factory, None without numba
try:
    from numba import njit as _numba_njit
    njit = _numba_njit
except ModuleNotFoundError:  # numba is an optional extra: the reference solver answers instead
    njit = None

__all__ = ["solve_choices_all_budgets", "solve_choices_reference", "solve_choices_brute_force"]


def _validate(weights: Any, values: Any, capacity: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """Contiguous int64 weights, float64 values ``[G, O]`` and an int capacity; a one-line error otherwise."""
    if isinstance(capacity, (bool, np.bool_)) or not isinstance(capacity, (int, np.integer)) or capacity < 0:
        raise LayersearchError(f"knapsack: capacity must be a non-negative integer, got {capacity!r}")
    cap = int(capacity)
    try:
        w = np.asarray(weights)
        v = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise LayersearchError(f"knapsack: weights and values must be [groups, options] arrays ({exc})") from None
    if w.ndim != 2 or v.shape != w.shape or (w.size and w.shape[1] == 0):
        raise LayersearchError(f"knapsack: weights and values must be [groups, options] of one shape, got {w.shape} and {v.shape}")
    if w.dtype.kind not in "iu" or v.dtype.kind not in "iuf":
        raise LayersearchError(f"knapsack: weights must be integers and values numbers, got {w.dtype} and {v.dtype}")
    if w.size and (w < 0).any():
        raise LayersearchError("knapsack: weights must be non-negative")
    v = v.astype(np.float64)
    if np.isnan(v).any() or np.isposinf(v).any():
        raise LayersearchError("knapsack: values must be finite (or -inf for an option a group lacks)")
    # Heavier than the capacity never fits: clipping changes no answer and keeps the int64 cast exact.
    clipped = np.where(w > cap, cap + 1, w).astype(np.int64)
    return np.ascontiguousarray(clipped), np.ascontiguousarray(v), cap


def _jit(function):
    """``function`` compiled by numba (on first call, cached on disk), or as is without numba."""
    return njit(cache=True)(function) if njit is not None else function


@_jit
def _fill(weights, values, capacity):  # pragma: no cover - compiled by numba
    """dp[g, k]: best total of groups 0..g-1 within k; take[g, k]: group g's option there (-1: none)."""
    groups, options = weights.shape
    dp = np.full((groups + 1, capacity + 1), -np.inf)
    for k in range(capacity + 1):
        dp[0, k] = 0.0
    take = np.full((groups, capacity + 1), -1, dtype=np.int64)
    for g in range(groups):
        for k in range(capacity + 1):
            best = -np.inf
            arg = -1
            for o in range(options):
                w = weights[g, o]
                v = values[g, o]
                if w > k or v == -np.inf:
                    continue
                prev = dp[g, k - w]
                if prev == -np.inf:
                    continue
                cand = prev + v
                if arg < 0 or cand > best:
                    best = cand
                    arg = o
            dp[g + 1, k] = best
            take[g, k] = arg
    return dp, take


@_jit
def _backtrack(weights, take):  # pragma: no cover - compiled by numba
    """chosen[k, g]: each group's option in the best choice within k (-1 where none fits)."""
    groups = take.shape[0]
    budgets = take.shape[1]
    chosen = np.full((budgets, groups), -1, dtype=np.int64)
    for k in range(budgets):
        if groups and take[groups - 1, k] < 0:
            continue
        r = k
        for g in range(groups - 1, -1, -1):
            o = take[g, r]
            chosen[k, g] = o
            r -= weights[g, o]
    return chosen


def solve_choices_all_budgets(weights: Any, values: Any, capacity: Any) -> tuple[np.ndarray, np.ndarray]:
    """Best multiple-choice knapsack total and choice for every budget ``0..capacity``.

    Returns ``(best, chosen)``: ``best`` float64 ``[capacity + 1]``; ``chosen`` int64
    ``[capacity + 1, G]``, the option index of each group. See the module docstring for the rules.
    """
    if njit is None:
        return solve_choices_reference(weights, values, capacity)
    w, v, cap = _validate(weights, values, capacity)
    dp, take = _fill(w, v, np.int64(cap))
    return dp[w.shape[0]].copy(), _backtrack(w, take)


def solve_choices_reference(weights: Any, values: Any, capacity: Any) -> tuple[np.ndarray, np.ndarray]:
    """Pure-Python textbook solver with the same contract (and ties) as :func:`solve_choices_all_budgets`."""
    w_arr, v_arr, cap = _validate(weights, values, capacity)
    groups = w_arr.shape[0]
    w = w_arr.tolist()
    v = v_arr.tolist()
    dp = [[0.0] * (cap + 1)] + [[-math.inf] * (cap + 1) for _ in range(groups)]
    take = [[-1] * (cap + 1) for _ in range(groups)]
    for g in range(groups):
        for k in range(cap + 1):
            for o, (wo, vo) in enumerate(zip(w[g], v[g])):
                if wo > k or vo == -math.inf or dp[g][k - wo] == -math.inf:
                    continue
                cand = dp[g][k - wo] + vo
                if take[g][k] < 0 or cand > dp[g + 1][k]:
                    dp[g + 1][k], take[g][k] = cand, o
    chosen = np.full((cap + 1, groups), -1, dtype=np.int64)
    for k in range(cap + 1):
        if groups and take[groups - 1][k] < 0:
            continue
        r = k
        for g in range(groups - 1, -1, -1):
            chosen[k, g] = take[g][r]
            r -= w[g][take[g][r]]
    return np.array(dp[groups], dtype=np.float64), chosen


def solve_choices_brute_force(weights: Any, values: Any, capacity: Any) -> np.ndarray:
    """The best total for every budget by enumerating all ``O^G`` choices (tiny instances only)."""
    w, v, cap = _validate(weights, values, capacity)
    best = np.full(cap + 1, -np.inf)
    for combo in itertools.product(range(w.shape[1]), repeat=w.shape[0]):
        total_w, total_v = 0, 0.0
        for g, o in enumerate(combo):  # summed in group order, as the DP adds them
            total_w += int(w[g, o])
            total_v += float(v[g, o])
        if total_w > cap or total_v == -np.inf:
            continue
        best[total_w:] = np.maximum(best[total_w:], total_v)
    return best
