"""Candidate sets: the hidden-state DP on a tiny Llama, the item-value knapsack against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from transformers import DynamicCache

from layersearch.common.errors import LayersearchError
from layersearch.knapspec import (
    SubLayerRunner,
    build_groups,
    candidates_hidden_dp,
    candidates_item_values,
    item_importance,
    mask_weight,
    mean_cosine,
    window_from_cache,
    window_from_prompt,
)
from layersearch.masks.mask import SkipMask
from layersearch.models.skipping import skipping
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.cache import commit_cache, new_cache
from layersearch.runtime.forward import forward_tokens

L = 4


@pytest.fixture(scope="module")
def llama6():
    return build_tiny_model("llama", num_layers=6, seed=5)


def ids(seed: int, n: int = 20) -> torch.Tensor:
    return torch.randint(0, 128, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    "family, sliding_window",
    [("llama", None), ("qwen3", None), ("mistral", 3), ("qwen2", 3), ("phi3", 3), ("gemma2", 3), ("gemma3", 3), ("gemma2", None)],
)
def test_sublayer_runner_equals_masked_forward(family, sliding_window):
    """A state of the runner is what the masked draft computes on the window over the target's cache.

    Sliding windows of 3 tokens are shorter than the reference windows (5 and 3 tokens), so the
    runner's context and mask must end where the model's own sliding mask does.
    """
    model = build_tiny_model(family, num_layers=L, seed=2, sliding_window=sliding_window)
    tokens = ids(1)
    windows = [window_from_prompt(model, tokens, 5), window_from_prompt(model, tokens[:9], 3)]
    masks = [SkipMask.none(L), SkipMask(L, (0, 2), (1,)), SkipMask.everything(L)]
    runner = SubLayerRunner(model)
    with torch.inference_mode():
        final = runner.run_masks(masks, windows)
        for row, mask in enumerate(masks):
            expected = []
            for cut, end in ((15, 20), (6, 9)):
                cache = DynamicCache(config=model.config)
                forward_tokens(model, tokens[:cut], 0, cache, keep=1)
                with skipping(model, mask):
                    expected.append(forward_tokens(model, tokens[cut:end], cut, cache))
            torch.testing.assert_close(runner.logits(final[row]), torch.cat(expected), atol=1e-5, rtol=1e-5)


def test_window_reads_the_cache_without_changing_it(tiny_llama):
    tokens = ids(3)
    cache = DynamicCache(config=tiny_llama.config)
    with torch.inference_mode():
        forward_tokens(tiny_llama, tokens[:-1], 0, cache, keep=1)  # all but the newest token, as in the decoder
        before = [layer.keys.clone() for layer in cache.layers]
        window = window_from_cache(cache, tokens, 5)
        SubLayerRunner(tiny_llama).run_masks([SkipMask(L, (1,), (2,))], [window])
    assert window.start == 15 and window.token_ids.tolist() == tokens[15:].tolist()
    for layer, old in zip(cache.layers, before):
        assert torch.equal(layer.keys, old)
    with pytest.raises(LayersearchError, match="cache holds"):
        window_from_cache(cache, torch.cat([tokens, tokens]), 5)


def test_hidden_dp_candidates(llama6):
    window = window_from_prompt(llama6, ids(4), 5)
    groups = build_groups(6, 3, 1)
    result = candidates_hidden_dp(llama6, [window], groups, tau=-1.0, max_budget=40)
    cands = result.candidates
    budgets = [c.budget for c in cands]
    assert budgets == sorted(set(budgets)) and budgets[0] == 0
    assert cands[0].mask.is_empty and cands[0].cosine == pytest.approx(1.0)
    assert max(budgets) == 20  # tau -1 prunes nothing: every budget up to the skippable weight (5 * 4)
    runner = SubLayerRunner(llama6)
    final = runner.run_masks([c.mask for c in cands], [window])
    recomputed = mean_cosine(final, final[0])
    for cand, cos, state in zip(cands, recomputed, result.final_states):
        assert cand.mask.num_layers == 6
        assert mask_weight(cand.mask, 3, 1) == cand.budget  # the backtracked mask has the budget's weight
        assert 5 not in cand.mask.attention and 5 not in cand.mask.mlp  # last block always executed
        assert cand.cosine == pytest.approx(float(cos), abs=1e-5)  # the DP's state is the mask's state
        torch.testing.assert_close(state, final[budgets.index(cand.budget)], atol=1e-5, rtol=1e-5)
    # "Monotone-ish": the full model is the closest, and the cosine trends down with the budget.
    cosines = np.array([c.cosine for c in cands])
    assert cosines.max() == cosines[0]
    assert np.corrcoef(budgets, cosines)[0, 1] < -0.5


def test_hidden_dp_prunes_at_tau_and_caps_budget(llama6):
    window = window_from_prompt(llama6, ids(5), 4)
    groups = build_groups(6, 2, 1)
    loose = candidates_hidden_dp(llama6, [window], groups, tau=-1.0, max_budget=100)
    tau = float(np.median([c.cosine for c in loose.candidates]))
    strict = candidates_hidden_dp(llama6, [window], groups, tau=tau, max_budget=100)
    assert 1 <= len(strict.candidates) < len(loose.candidates)
    assert all(c.cosine >= tau for c in strict.candidates)
    capped = candidates_hidden_dp(llama6, [window], groups, tau=-1.0)  # K/2 by default
    assert max(c.budget for c in capped.candidates) <= 15 // 2
    assert strict.states_evaluated < loose.states_evaluated
    only = candidates_hidden_dp(llama6, [window], groups, tau=-1.0, max_budget=0)
    assert [c.budget for c in only.candidates] == [0] and only.candidates[0].mask.is_empty


def test_hidden_dp_bound_skips_whole_layers(llama6):
    window = window_from_prompt(llama6, ids(6), 5)
    result = candidates_hidden_dp(llama6, [window], build_groups(6, 2, 1, bound=True), tau=-1.0, max_budget=100)
    assert [c.budget for c in result.candidates] == [0, 3, 6, 9, 12, 15]
    for cand in result.candidates:
        assert cand.mask.attention == cand.mask.mlp


def brute_force(weights, values, capacity):
    best = np.zeros(capacity + 1)
    for subset in itertools.product([0, 1], repeat=len(weights)):
        w = sum(wi for wi, s in zip(weights, subset) if s)
        v = sum(vi for vi, s in zip(values, subset) if s)
        for k in range(w, capacity + 1):
            best[k] = max(best[k], v)
    return best


def test_item_value_path_equals_brute_force():
    groups = build_groups(4, 3, 1, keep_last_layers=1)  # 6 skippable items, weights 3,1,3,1,3,1
    rng = np.random.default_rng(0)
    values = rng.uniform(0.01, 1.0, size=len(groups))
    movable = [g for g, grp in enumerate(groups) if grp.skippable]
    weights = [groups[g].weight for g in movable]
    total = sum(weights)
    best = brute_force(weights, values[movable], total)
    cands = candidates_item_values(groups, values, 4, max_budget=total)
    assert cands[0].mask.is_empty and cands[0].budget == 0
    seen_budgets = {}
    for cand in cands:
        skipped = cand.mask.to_flat()
        executed_value = sum(values[g] for g in movable if not skipped[g])
        assert mask_weight(cand.mask, 3, 1) == cand.budget
        assert not skipped[6] and not skipped[7]  # the last layer is outside the knapsack
        seen_budgets[cand.budget] = executed_value
        # Optimal: the executed set is the best within the executed-weight budget total - budget.
        assert executed_value == pytest.approx(best[total - cand.budget])
        assert cand.cosine == pytest.approx(1.0 - sum(values[g] for g in movable if skipped[g]))
    for k in range(total + 1):  # every budget's optimum is reached by some candidate at >= k skipped
        reached = [v for b, v in seen_budgets.items() if b >= k]
        assert max(reached) == pytest.approx(best[total - k])


def test_item_importance_is_a_cosine_drop(llama6):
    window = window_from_prompt(llama6, ids(7), 5)
    groups = build_groups(6, 2, 1)
    values = item_importance(llama6, [window], groups)
    assert values.shape == (12,)
    assert values[10] == 0 and values[11] == 0  # the kept last block
    assert (values[:10] >= -1e-6).all() and (values[:10] <= 2).all() and values[:10].max() > 0
    cands = candidates_item_values(groups, values, 6)
    assert all(c.budget <= 15 // 2 for c in cands)
    with pytest.raises(LayersearchError):
        candidates_item_values(groups, values[:3], 6)


def test_a_window_needing_evicted_sliding_entries_is_refused():
    model = build_tiny_model("mistral", num_layers=L, seed=2, sliding_window=3)
    tokens = ids(4)
    cache = new_cache(model)
    with torch.inference_mode():
        forward_tokens(model, tokens[:-1], 0, cache, keep=1)
        commit_cache(cache)  # as in the decoder: only the last window - 1 positions are kept
        assert window_from_cache(cache, tokens, 1).start == 19  # one token needs only what is kept
        with pytest.raises(LayersearchError, match="no longer holds position"):
            window_from_cache(cache, tokens, 5)
