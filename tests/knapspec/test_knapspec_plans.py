"""KnapSpec over draft plans: int8 sub-layers in the runner (per-token activation scales, as a
draft step has them), the multiple-choice knapsack's candidates against brute force, and the
study entry point knapsack_plans."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from transformers import DynamicCache

from layersearch.common.errors import LayersearchError
from layersearch.knapspec import (
    KnapSpecConfig,
    PerTokenInt8Linear,
    SubLayerRunner,
    build_groups,
    candidates_item_values,
    candidates_plans,
    int8_importance,
    knapsack_plans,
    plan_costs,
    window_from_prompt,
)
from layersearch.knapspec.dp import PLAN_RESOLUTION
from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.models.precision import int8_twins
from layersearch.models.skipping import skipping
from layersearch.models.tiny import build_tiny_model
from layersearch.profiling.profile import LatencyProfile
from layersearch.runtime.forward import forward_tokens

INFO = ModelInfo("tiny-llama", 4, 64, "fp")


def int8_profile(info=INFO, **changes) -> LatencyProfile:
    values = dict(attention_slope=1e-6, attention_intercept=1e-3, mlp_seconds=1e-3, base_seconds=5e-4,
                  verify_ratios=(1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35, 1.4), int8_attention_slope=1e-6,
                  int8_attention_intercept=3e-4, int8_mlp_seconds=3e-4, int8_head_saving=1e-4)
    values.update(changes)
    return LatencyProfile(info, "cpu", "float32", "x", **values)


def ids(seed: int, n: int = 20) -> torch.Tensor:
    return torch.randint(0, 128, (n,), generator=torch.Generator().manual_seed(seed))


def test_per_token_int8_is_the_int8_linear_one_token_at_a_time(tiny_llama):
    twin = int8_twins(tiny_llama).mlp[0].down_proj
    linear = getattr(twin, "kernel", twin)  # torch's int8 Linear, what a one-token draft step runs
    x = torch.randn(2, 5, linear.weight().shape[1], generator=torch.Generator().manual_seed(0))
    one_by_one = torch.stack([torch.stack([linear(x[b, t : t + 1])[0] for t in range(5)]) for b in range(2)])
    torch.testing.assert_close(PerTokenInt8Linear(twin)(x), one_by_one, atol=1e-5, rtol=1e-5)
    # One call over many tokens shares one scale between them: not what a draft step computes.
    assert not torch.allclose(linear(x), one_by_one, atol=1e-5, rtol=1e-5)


def test_runner_states_of_a_plan_are_what_the_plan_drafts():
    model = build_tiny_model("llama", num_layers=4, seed=2)
    tokens = ids(1)
    windows = [window_from_prompt(model, tokens, 5), window_from_prompt(model, tokens[:9], 3)]
    plans = [SkipMask.none(4).kept_in_int8(head=False), SkipMask(4, (0,), (2,)).with_int8((1, 3), (0, 3), False)]
    runner = SubLayerRunner(model)
    with torch.inference_mode():
        final = runner.run_masks([SkipMask.none(4), *plans], windows)
        for row, plan in enumerate(plans, 1):
            expected = []
            for cut, end in ((15, 20), (6, 9)):
                cache = DynamicCache(config=model.config)
                forward_tokens(model, tokens[:cut], 0, cache, keep=1)
                with skipping(model, plan):  # a draft step: one token at a time
                    expected += [forward_tokens(model, tokens[i : i + 1], i, cache) for i in range(cut, end)]
            torch.testing.assert_close(runner.logits(final[row]), torch.cat(expected), atol=1e-4, rtol=1e-4)
        head = int8_twins(model).head  # one token at a time, as a draft step runs it
        states = final[1].reshape(-1, final.shape[-1])
        expected = torch.stack([head.logits(runner.norm(states[i : i + 1]))[0].argmax() for i in range(len(states))])
        assert torch.equal(runner.top1(final[1], int8_head=True).reshape(-1), expected)


def test_int8_importance_is_the_cosine_drop_of_one_int8_sub_layer(tiny_llama):
    windows = [window_from_prompt(tiny_llama, ids(2), 6)]
    runner = SubLayerRunner(tiny_llama)
    drops = int8_importance(tiny_llama, windows, runner=runner)
    assert drops.shape == (8,)
    with torch.inference_mode():
        states = runner.run_masks([SkipMask.none(4), SkipMask.none(4).with_int8((), (1,), False)], windows)
    cos = torch.nn.functional.cosine_similarity(states[1], states[0], dim=-1).mean().item()
    assert drops[3] == pytest.approx(1 - cos, abs=1e-6)
    assert (np.abs(drops) < 0.5).all()


def plan_loss(plan, skip, int8, int4=None):
    return sum(skip[2 * i] for i in plan.attention) + sum(skip[2 * i + 1] for i in plan.mlp) + \
        sum(int8[2 * i] for i in plan.int8_attention) + sum(int8[2 * i + 1] for i in plan.int8_mlp) + \
        sum(int4[2 * i] for i in plan.int4_attention) + sum(int4[2 * i + 1] for i in plan.int4_mlp)


def plan_cost(plan, costs):
    return sum(int(costs[j, ["skip", "int4", "int8", "full"].index(plan.precision(("attention", "mlp")[j % 2], j // 2))])
               for j in range(len(costs)))


def every_plan(L, options):
    """Every plan of L layers whose sub-layers take the option indices (0 skip, 1 int4, 2 int8, 3 full) in ``options``."""
    plans = []
    for choice in itertools.product(options, repeat=2 * L):
        pick = lambda o: ([i for i in range(L) if choice[2 * i] == o], [i for i in range(L) if choice[2 * i + 1] == o])  # noqa: E731
        plans.append(SkipMask.from_flat([c == 0 for c in choice]).with_int8(*pick(2), False).with_int4(*pick(1), False))
    return plans


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("with_int4", [False, True])
def test_plan_candidates_are_the_best_plans_within_their_cost(seed, with_int4):
    rng = np.random.default_rng(seed)
    L = 3
    full = rng.integers(2, 9, size=2 * L)
    int8_cost = rng.integers(1, full + 1)
    costs = np.stack([np.zeros(2 * L, dtype=int), rng.integers(1, int8_cost + 1), int8_cost, full], axis=1)
    skip, int8, int4 = rng.uniform(0.0, 0.3, 2 * L), rng.uniform(0.0, 0.1, 2 * L), rng.uniform(0.0, 0.2, 2 * L)
    candidates = candidates_plans(costs, skip, int8, L, keep_last_layers=1, tau=0.5, int4_values=int4 if with_int4 else None)
    every = every_plan(L, range(4) if with_int4 else (0, 2, 3))
    allowed = [p for p in every if L - 1 not in p.attention and L - 1 not in p.mlp]  # the last layer runs
    assert candidates and len(set(c.mask for c in candidates)) == len(candidates)
    for cand in candidates:
        plan = cand.mask
        assert L - 1 not in plan.attention and L - 1 not in plan.mlp
        assert cand.budget == plan_cost(plan, costs) and not plan.int8_head
        assert with_int4 or not plan.has_int4
        best = min(plan_loss(p, skip, int8, int4) for p in allowed if plan_cost(p, costs) <= cand.budget)
        assert plan_loss(plan, skip, int8, int4) == pytest.approx(best, abs=1e-9)
        assert cand.cosine == pytest.approx(1 - best, abs=1e-9) and cand.cosine >= 0.5
    assert candidates[-1].mask == SkipMask.none(L)  # the largest budget keeps every sub-layer full


@pytest.mark.parametrize("seed", range(8))
def test_a_skip_only_plans_knapsack_is_the_masks_knapsack(seed):
    """With skip and full the only options (no int8 or int4 to offer), the plans' multiple-choice
    knapsack finds the same masks, with the same cosine estimates, as the skip masks' 0/1 knapsack."""
    rng = np.random.default_rng(seed)
    L = 4
    w_attn, w_mlp = (int(w) for w in rng.integers(1, 9, size=2))
    skip = rng.uniform(0.0, 0.1, 2 * L)
    groups = build_groups(L, w_attn, w_mlp, keep_last_layers=1)
    weights = np.array([g.weight for g in groups])
    masks = candidates_item_values(groups, skip, L, max_budget=sum(g.weight for g in groups if g.skippable))
    costs = np.stack([np.zeros(2 * L, dtype=int), weights, weights, weights], axis=1)
    no_int8 = np.full(2 * L, 1.0)  # an int8 twin that costs what the full sub-layer does and loses more
    plans = candidates_plans(costs, skip, no_int8, L, keep_last_layers=1, tau=-1.0)
    assert not any(c.mask.has_int8 or c.mask.has_int4 for c in plans)
    assert {c.mask: c.cosine for c in plans} == pytest.approx({c.mask: c.cosine for c in masks}, abs=1e-12)
    assert len(masks) > 2  # the weights leave room for more than the empty and the largest mask


def test_plan_costs_come_from_the_profile():
    p = int8_profile()
    costs = plan_costs(p, 100)
    assert costs.shape == (8, 4) and (costs[:, 0] == 0).all()
    assert abs(int(costs[:, 3].sum()) - PLAN_RESOLUTION) <= 8  # rounding, one unit per sub-layer at most
    unit = sum(p.sublayer_seconds(k, "full", 100, i) for i in range(4) for k in ("attention", "mlp")) / PLAN_RESOLUTION
    assert costs[1, 2] == round(p.sublayer_seconds("mlp", "int8", 100, 0) / unit)
    assert (costs[:, 1] == costs[:, 3]).all()  # no int4 timings: int4 costs what full does (and is never chosen)
    with_int4 = plan_costs(int8_profile(int4_attention_slope=1e-6, int4_attention_intercept=2e-4, int4_mlp_seconds=2e-4,
                                        int4_head_saving=2e-4), 100)
    assert with_int4[1, 1] == round(2e-4 / unit) and (with_int4[:, 2] == costs[:, 2]).all()
    skip_only = LatencyProfile(INFO, "cpu", "float32", "x", 1e-6, 1e-3, 1e-3, 5e-4, (1.0, 1.1))
    with pytest.raises(LayersearchError, match="int8"):
        plan_costs(skip_only, 100)


def test_knapsack_plans_for_a_study(tiny_llama):
    p = int8_profile()
    prompts = [torch.arange(5, 25), [7, 8, 9, 10, 11, 12, 13, 14]]
    config = KnapSpecConfig(method="plans", max_alpha_candidates=None, tau=0.0)
    rows = knapsack_plans(tiny_llama, p, prompts, context=512, max_candidates=6, window=6, config=config)
    assert 1 <= len(rows) <= 6
    assert [row[1] for row in rows] == sorted((row[1] for row in rows), reverse=True)
    assert any(plan.has_int8 for plan, *_ in rows)
    with_int4 = int8_profile(int4_attention_slope=1e-6, int4_attention_intercept=1e-4, int4_mlp_seconds=1e-4,
                             int4_head_saving=2e-4)
    rows4 = knapsack_plans(tiny_llama, with_int4, prompts, context=512, max_candidates=6, window=6, config=config)
    assert any(plan.has_int4 for plan, *_ in rows4)  # the cheapest twin is a choice where the profile costs it
    assert all(plan.int4_group_size == 64 for plan, *_ in rows4)  # the tiny model is 64 wide
    for plan, value, gamma, alpha in rows:
        assert not plan.is_empty and plan.model == INFO and plan.provenance["strategy"] == "knapsack"
        assert value == pytest.approx(p.best_tpt(alpha, plan, 512, max_draft=config.max_draft)[0])
    skip_only = LatencyProfile(INFO, "cpu", "float32", "x", 1e-6, 1e-3, 1e-3, 5e-4, (1.0, 1.1))
    with pytest.raises(LayersearchError, match="int8 timings"):
        knapsack_plans(tiny_llama, skip_only, prompts, context=512, config=config)
    with pytest.raises(LayersearchError, match="method 'plans'"):
        knapsack_plans(tiny_llama, p, prompts, context=512, config=KnapSpecConfig(method="items"))
    with pytest.raises(LayersearchError, match="bind"):
        KnapSpecConfig(method="plans", bound=True)
