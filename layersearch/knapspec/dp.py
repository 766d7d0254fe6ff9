"""KnapSpec's candidate sets: one draft sub-network per skipped-weight budget.

Two ways to fill the knapsack, both returning :class:`Candidate` lists (one mask per budget):

* :func:`candidates_hidden_dp` -- KnapSpec's own DP over hidden states (§4.2). State
  ``g[i, j]`` is the best residual stream after the first ``i`` items with skipped weight
  exactly ``j``; item ``i`` either runs on ``g[i-1, j]`` or is skipped from ``g[i-1, j-w_i]``,
  whichever is closer by cosine to the full model's state at that depth (``g[i, 0]``). All
  budgets are one batch per item. A state whose best mean cosine falls below ``tau`` (0.5) is
  pruned, the skipped weight is capped at ``max_budget`` (K/2 by default) and the last block is
  always executed. Backtracking ``g[2L, .]`` gives one mask per surviving budget.
* :func:`candidates_item_values` -- the cheap path when each item has a value measured once
  (e.g. :func:`item_importance`, the cosine drop of skipping that item alone): the numba
  :func:`~layersearch.knapspec.solver.solve_all_budgets` picks, for every budget, the executed items of
  largest total importance within the executed-weight budget; the rest are skipped.

* :func:`candidates_plans` -- draft plans: a multiple-choice knapsack
  (:func:`~layersearch.knapspec.mckp.solve_choices_all_budgets`) gives each sub-layer one of
  skip, int4, int8 or full at its profiled cost (:meth:`LatencyProfile.sublayer_seconds`) for every
  cost budget. The value of an option is minus the cosine it loses: skipping loses the item's
  :func:`item_importance`, int8 loses :func:`int8_importance` (the same measurement with that
  one sub-layer run by its int8 twin instead of skipped), int4 :func:`int4_importance`, full
  loses nothing.

Cosine along the DP (what "monotone" means here): ``g[i, 0]`` is the full model, so budget 0
always has cosine 1. More skipped weight can only be reached by skipping more, so the final
cosine *tends* to fall as the budget grows, but it is not guaranteed to: each step keeps the
locally closer state (the DP is greedy per depth, as in the paper), so a larger budget can end
up a little closer than a smaller one. Every surviving candidate has final cosine >= tau.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
from transformers import PreTrainedModel

from layersearch.common.errors import LayersearchError
from layersearch.knapspec.mckp import solve_choices_all_budgets
from layersearch.knapspec.solver import solve_all_budgets
from layersearch.knapspec.sublayers import ReferenceWindow, SubLayerRunner, mean_cosine
from layersearch.knapspec.weights import Group, default_max_budget, mask_from_groups, skippable_weight
from layersearch.masks.mask import ModelInfo, SkipMask

#: Per-item values (or losses) as callers hold them: a list of floats or a 1-D float array.
Values = Sequence[float] | np.ndarray

TAU = 0.5

_INVALID, _EXECUTE, _SKIP = 0, 1, 2


@dataclass(frozen=True)
class Candidate:
    """One draft sub-network: its mask, skipped weight, cosine to the full model, and alpha once known."""

    mask: SkipMask
    budget: int
    cosine: float
    alpha: float | None = None


@dataclass
class DPResult:
    """Candidates by increasing budget, their final hidden states ``[n, R, d]`` and the full model's ``[R, d]``."""

    candidates: list[Candidate]
    final_states: torch.Tensor  # [n, R, d]
    reference: torch.Tensor
    seconds: float = 0.0
    states_evaluated: int = 0
    extra: dict = field(default_factory=dict)


def _check_groups(groups: Sequence[Group], num_layers: int) -> None:
    covered = sorted(i for g in groups for i in g.items)
    if covered != list(range(2 * num_layers)):
        raise LayersearchError("the DP items must cover each of the 2L sub-layers exactly once, in order")
    for g in groups:
        if g.skippable and g.weight < 1:
            raise LayersearchError(f"a skippable item needs an integer weight >= 1, got {g.weight}")


def candidates_hidden_dp(
    model: PreTrainedModel,
    windows: Sequence[ReferenceWindow],
    groups: Sequence[Group],
    *,
    tau: float = TAU,
    max_budget: int | None = None,
    runner: SubLayerRunner | None = None,
    info: ModelInfo | None = None,
) -> DPResult:
    """KnapSpec's hidden-state DP over ``groups`` (see :func:`~layersearch.knapspec.weights.build_groups`).

    Returns every surviving budget's mask, budget 0 (the empty mask, cosine 1) first.
    ``max_budget`` defaults to half the skippable weight (KnapSpec's K/2 bound).
    """
    runner = runner or SubLayerRunner(model)
    num_layers = runner.num_layers
    _check_groups(groups, num_layers)
    if not windows:
        raise LayersearchError("the DP needs at least one reference window")
    cap = default_max_budget(groups) if max_budget is None else int(max_budget)
    cap = max(0, min(cap, skippable_weight(groups)))
    t0 = time.perf_counter()
    with torch.inference_mode():
        h0 = runner.embed(windows)  # [1, R, d]
        states = h0.new_zeros((cap + 1, *h0.shape[1:]))
        states[0] = h0[0]
        valid = torch.zeros(cap + 1, dtype=torch.bool)
        valid[0] = True
        cosine = torch.full((cap + 1,), -torch.inf)
        cosine[0] = 1.0
        choice = np.zeros((len(groups), cap + 1), dtype=np.int8)
        evaluated = 0
        for g, group in enumerate(groups):
            idx = valid.nonzero().flatten()  # budgets alive before this item; idx[0] == 0
            executed = states[idx.to(states.device)]
            for item in group.items:
                executed = runner.sublayer(item, executed, windows)
            evaluated += int(idx.numel())
            reference = executed[0]  # budget 0 executes everything: the full model at this depth
            exec_cos = torch.full((cap + 1,), -torch.inf)
            exec_cos[idx] = mean_cosine(executed, reference).cpu()
            skip_cos = torch.full((cap + 1,), -torch.inf)
            w = group.weight
            src = idx[idx + w <= cap] if group.skippable else idx[:0]
            if src.numel():
                skip_cos[src + w] = mean_cosine(states[src.to(states.device)], reference).cpu()
            take_skip = skip_cos > exec_cos  # ties: execute
            best = torch.where(take_skip, skip_cos, exec_cos)
            alive = best >= tau
            alive[0] = True  # the full model is the reference; never pruned
            new_states = torch.empty_like(states)
            keep_exec = alive[idx] & ~take_skip[idx]
            if keep_exec.any():
                new_states[idx[keep_exec].to(states.device)] = executed[keep_exec.to(executed.device)]
            dst = src + w
            keep_skip = alive[dst] & take_skip[dst]
            if keep_skip.any():
                new_states[dst[keep_skip].to(states.device)] = states[src[keep_skip].to(states.device)]
            choice[g] = np.where(alive.numpy(), np.where(take_skip.numpy(), _SKIP, _EXECUTE), _INVALID)
            states, valid, cosine = new_states, alive, torch.where(alive, best, torch.tensor(-torch.inf))
        budgets = valid.nonzero().flatten().tolist()
        candidates = [
            Candidate(_backtrack(choice, groups, j, num_layers, info), j, float(cosine[j])) for j in budgets
        ]
        final_states = states[torch.tensor(budgets, device=states.device)]
        reference = final_states[0]
    return DPResult(candidates, final_states, reference, time.perf_counter() - t0, evaluated)


def _backtrack(choice: np.ndarray, groups: Sequence[Group], budget: int, num_layers: int, info) -> SkipMask:
    skipped = [False] * len(groups)
    j = budget
    for g in range(len(groups) - 1, -1, -1):
        step = choice[g, j]
        if step == _SKIP:
            skipped[g] = True
            j -= groups[g].weight
        elif step != _EXECUTE:  # pragma: no cover - a surviving budget always has a path
            raise LayersearchError("internal error: broken DP path")
    assert j == 0
    return mask_from_groups(num_layers, groups, skipped, info)


def item_importance(
    model: PreTrainedModel,
    windows: Sequence[ReferenceWindow],
    groups: Sequence[Group],
    *,
    runner: SubLayerRunner | None = None,
) -> np.ndarray:
    """Per-group value: ``1 - cos(full final state, final state with only that group skipped)``.

    Measured once, in one batch of ``len(groups) + 1`` rows; unskippable groups get 0.
    """
    runner = runner or SubLayerRunner(model)
    _check_groups(groups, runner.num_layers)
    masks = [SkipMask.none(runner.num_layers)]
    skippable = [g for g, group in enumerate(groups) if group.skippable]
    for g in skippable:
        masks.append(mask_from_groups(runner.num_layers, groups, [i == g for i in range(len(groups))]))
    with torch.inference_mode():
        final = runner.run_masks(masks, windows)
        cos = mean_cosine(final[1:], final[0]).cpu().numpy()
    values = np.zeros(len(groups))
    values[skippable] = 1.0 - cos
    return values


def int8_importance(
    model: PreTrainedModel, windows: Sequence[ReferenceWindow], *, runner: SubLayerRunner | None = None
) -> np.ndarray:
    """Per sub-layer (interleaved, 2L): ``1 - cos(full final state, final state with only that
    sub-layer run by its int8 twin)``, measured as :func:`item_importance` measures skipping."""
    return low_bit_importance(model, windows, "int8", runner=runner)


def int4_importance(
    model: PreTrainedModel, windows: Sequence[ReferenceWindow], *, runner: SubLayerRunner | None = None
) -> np.ndarray:
    """:func:`int8_importance` with the int4 twins (in the runner's group size)."""
    return low_bit_importance(model, windows, "int4", runner=runner)


def low_bit_importance(
    model: PreTrainedModel, windows: Sequence[ReferenceWindow], quant: str, *, runner: SubLayerRunner | None = None
) -> np.ndarray:
    """Per sub-layer (interleaved, 2L): the cosine drop of running only that sub-layer in ``quant``."""
    runner = runner or SubLayerRunner(model)
    L = runner.num_layers
    masks = [SkipMask.none(L)]
    for item in range(2 * L):
        layer = (item // 2,)
        plan = SkipMask.none(L) if quant == "int8" else SkipMask(L, int4_group_size=runner.int4_group_size())
        masks.append(getattr(plan, f"with_{quant}")(() if item % 2 else layer, layer if item % 2 else (), False))
    with torch.inference_mode():
        final = runner.run_masks(masks, windows)
        cos = mean_cosine(final[1:], final[0]).cpu().numpy()
    return 1.0 - cos.astype(np.float64)


#: Integer cost units of the plans' knapsack: the full model's sub-layers cost this many.
PLAN_RESOLUTION = 400
#: Option order of a sub-layer in the plans' knapsack (ties go to the earlier, cheaper one).
PLAN_OPTIONS = ("skip", "int4", "int8", "full")
_FULL = PLAN_OPTIONS.index("full")


def plan_costs(profile, context: int) -> np.ndarray:
    """Each sub-layer's cost ``[2L, 4]`` (skip, int4, int8, full) in integer units: the profile's
    seconds at ``context`` scaled so the full sub-layers sum to :data:`PLAN_RESOLUTION`. A
    profile without int4 timings gives int4 the full cost (:func:`candidates_plans` is then
    given no int4 values, so it never chooses it)."""
    L = profile.num_layers

    def seconds_of(kind: str, precision: str, layer: int) -> float:
        if precision == "int4" and not profile.has_int4:
            precision = "full"
        return profile.sublayer_seconds(kind, precision, context, layer)

    seconds = np.array([[seconds_of(kind, precision, layer) for precision in PLAN_OPTIONS]
                        for layer in range(L) for kind in ("attention", "mlp")])
    unit = seconds[:, _FULL].sum() / PLAN_RESOLUTION
    if unit <= 0:
        raise LayersearchError("the profile gives the sub-layers no cost: nothing to trade for acceptance")
    return np.round(seconds / unit).astype(np.int64)


def candidates_plans(
    costs: np.ndarray,
    skip_values: Values,
    int8_values: Values,
    num_layers: int,
    *,
    keep_last_layers: int = 1,
    tau: float = TAU,
    info: ModelInfo | None = None,
    int4_values: Values | None = None,
    int4_group_size: int = 128,
) -> list[Candidate]:
    """One plan per cost budget ``0..sum of full costs`` by the multiple-choice knapsack.

    ``costs`` ``[2L, 4]`` (:func:`plan_costs`), ``skip_values``, ``int8_values`` and
    ``int4_values`` the 2L cosine losses (:func:`item_importance` per sub-layer,
    :func:`int8_importance`, :func:`int4_importance`; None: int4 is not offered). Each sub-layer
    is skipped, int4, int8 or full (int4 in groups of ``int4_group_size``); the last
    ``keep_last_layers`` layers are never skipped. Values are
    minus the losses, a skip's clipped to a tiny positive loss (skipping is never free) and an
    int8's to none (an int8 twin that loses nothing is as good as the full sub-layer, and
    cheaper). Each candidate's ``budget`` is its cost and ``cosine`` the additive estimate
    ``1 - sum of losses``; candidates below ``tau`` are dropped, identical plans kept once (at
    their smallest budget). The plans carry the full LM head; the caller tries the int8 one.
    """
    costs = np.asarray(costs)
    skip = np.maximum(np.asarray(skip_values, dtype=np.float64), 1e-9)
    int8 = np.maximum(np.asarray(int8_values, dtype=np.float64), 0.0)
    items = 2 * num_layers
    int4 = np.full(items, np.inf) if int4_values is None else np.maximum(np.asarray(int4_values, dtype=np.float64), 0.0)
    if costs.shape != (items, len(PLAN_OPTIONS)) or skip.shape != (items,) or int8.shape != (items,) or int4.shape != (items,):
        raise LayersearchError(f"need costs [{items}, {len(PLAN_OPTIONS)}] and {items} skip, int8 and int4 values "
                               f"for {num_layers} layers")
    if not (np.isfinite(skip).all() and np.isfinite(int8).all() and (int4_values is None or np.isfinite(int4).all())):
        raise LayersearchError("sub-layer values must be finite")
    values = np.stack([-skip, -int4, -int8, np.zeros(items)], axis=1)  # in PLAN_OPTIONS order
    first_kept = num_layers - keep_last_layers
    values[2 * first_kept:, 0] = -np.inf  # the last layers always run (as KnapSpec's DP)
    capacity = int(costs[:, _FULL].sum())
    best, chosen = solve_choices_all_budgets(costs, values, capacity)
    out: list[Candidate] = []
    seen: set[SkipMask] = set()
    for k in range(capacity + 1):
        if best[k] == -np.inf or 1.0 + best[k] < tau:
            continue
        choice = chosen[k]
        flat = [PLAN_OPTIONS[int(o)] == "skip" for o in choice]
        picked = {quant: ([i for i in range(num_layers) if PLAN_OPTIONS[int(choice[2 * i])] == quant],
                          [i for i in range(num_layers) if PLAN_OPTIONS[int(choice[2 * i + 1])] == quant])
                  for quant in ("int8", "int4")}
        plan = SkipMask.from_flat(flat, info, int4_group_size=int4_group_size).with_int8(*picked["int8"], False)
        plan = plan.with_int4(*picked["int4"], False)
        if plan in seen:
            continue
        seen.add(plan)
        cost = int(sum(costs[j, o] for j, o in enumerate(choice)))
        out.append(Candidate(plan, cost, float(1.0 + best[k])))
    return out


def candidates_item_values(
    groups: Sequence[Group],
    values: Values,
    num_layers: int,
    *,
    max_budget: int | None = None,
    info: ModelInfo | None = None,
) -> list[Candidate]:
    """One mask per skipped-weight budget ``0..max_budget`` from per-group values, by :func:`solve_all_budgets`.

    The knapsack chooses the *executed* groups: value = importance (clipped to a tiny positive
    number so every group is worth executing when it fits), weight = latency weight, capacity
    ``W - k`` for skipped budget ``k`` (``W`` the skippable weight); unskippable groups are
    outside the knapsack and always run. Each candidate's ``cosine`` is the additive estimate
    ``1 - sum(skipped values)``. Identical masks (several budgets, same solution) appear once,
    at their smallest budget.
    """
    _check_groups(groups, num_layers)
    item = np.asarray(values, dtype=np.float64)  # [groups]
    if item.shape != (len(groups),):
        raise LayersearchError(f"need one value per DP item ({len(groups)}), got shape {item.shape}")
    if not np.isfinite(item).all():
        raise LayersearchError("item values must be finite")
    movable = [g for g, group in enumerate(groups) if group.skippable]
    total = sum(groups[g].weight for g in movable)
    cap = default_max_budget(groups) if max_budget is None else max(0, min(int(max_budget), total))
    weights = np.array([groups[g].weight for g in movable], dtype=np.int64)
    item_values = np.maximum(item[movable], 1e-9)
    _, chosen = solve_all_budgets(weights, item_values, total)
    out: list[Candidate] = []
    seen: set[tuple[bool, ...]] = set()
    for k in range(cap + 1):
        executed = chosen[total - k]
        skipped = [False] * len(groups)
        for pos, g in enumerate(movable):
            skipped[g] = not executed[pos]
        mask = mask_from_groups(num_layers, groups, skipped, info)
        flat = mask.to_flat()
        if flat in seen:
            continue
        seen.add(flat)
        budget = int(weights[~executed].sum())
        out.append(Candidate(mask, budget, float(1.0 - item[movable][~executed].sum())))
    return out
