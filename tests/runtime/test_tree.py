"""SWIFT's token-tree verification: layout, mask, acceptance, KV compaction, losslessness."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.drafters import HybridDrafter, LayerSkipDrafter
from layersearch.runtime.lookahead import ConfidenceLookahead, StaticLookahead
from layersearch.runtime.sampling import SamplingConfig
from layersearch.runtime.step import Verifier
from layersearch.runtime.tree import TopKBranching, TreeLayout, TreeVerifier, verify_tree_greedy
from tests.capture import assert_path, captured

WIDE = TopKBranching(levels=((1.0, 6),))  # six candidates at every position: many branches


def plain_generate(model, prompt, new):
    attention = torch.ones_like(prompt)
    out = model.generate(prompt, attention_mask=attention, max_new_tokens=new, do_sample=False)
    return out[0, prompt.shape[1] :].tolist()


def tree_decoder(model, mask, branching=WIDE, lookahead=StaticLookahead(5), verifier=None, compile=False):
    return SpeculativeDecoder(
        model, mask, drafter=LayerSkipDrafter(branching), verifier=verifier or TreeVerifier(), lookahead=lookahead,
        compile=compile,
    )


class Spy(Verifier):
    """Wraps a verifier and keeps (proposal, verdict) pairs."""

    name = "spy"

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def verify(self, request, proposal):
        verdict = self.inner.verify(request, proposal)
        self.calls.append((proposal, verdict))
        return verdict


def test_layout_puts_the_chain_first_and_masks_ancestors():
    layout = TreeLayout.build(9, (1, 2, 3), ((4, 5), (), (6,)))
    assert layout.tokens == (9, 1, 2, 3, 4, 5, 6)
    assert layout.depths == (0, 1, 2, 3, 1, 1, 3)
    assert layout.parents == (-1, 0, 1, 2, 0, 0, 2)
    mask = layout.attention_mask(2, torch.float32, "cpu")[0, 0] == 0  # [7, 9] True = may attend
    assert mask[:, :2].all()  # every node sees the cache
    tree = mask[:, 2:]
    assert tree[3].tolist() == [True, True, True, True, False, False, False]  # d3: root, d1, d2, itself
    assert tree[5].tolist() == [True, False, False, False, False, True, False]  # sibling of d1: root + itself
    assert tree[6].tolist() == [True, True, True, False, False, False, True]  # sibling of d3: root, d1, d2


def test_greedy_tree_acceptance():
    layout = TreeLayout.build(9, (1, 2, 3), ((4, 5), (7,), (6,)))
    # target argmax after each node: root->1, d1->7 (a sibling at level 2), ..., sibling 7 (node 6)->8
    targets = [1, 7, 0, 0, 0, 0, 8, 0]
    assert verify_tree_greedy(layout, targets) == ((1, 7), 8, 6)
    assert verify_tree_greedy(layout, [1, 2, 3, 11, 0, 0, 0, 0]) == ((1, 2, 3), 11, None)  # whole chain + bonus
    assert verify_tree_greedy(layout, [5, 0, 0, 0, 0, 12, 0, 0]) == ((5,), 12, 5)  # sibling at level 1
    assert verify_tree_greedy(layout, [13, 0, 0, 0, 0, 0, 0, 0]) == ((), 13, None)  # nothing matches


def test_branching_widths_follow_swift():
    branching = TopKBranching()
    assert [branching.width(p) for p in (0.3, 0.5, 0.7, 0.9, 0.97)] == [10, 10, 5, 3, 1]


@pytest.mark.parametrize("family", ["tiny_llama", "tiny_qwen2"])
@pytest.mark.parametrize("mask", [SkipMask.uniform(4, 0.5), SkipMask.everything(4), SkipMask(4, (0, 1, 2), ()), SkipMask(4, (), (1, 2))], ids=str)
def test_tree_greedy_equals_generate(request, family, mask, decode_path):
    model = request.getfixturevalue(family)
    prompt = torch.randint(0, 128, (1, 11), generator=torch.Generator().manual_seed(5))
    spy = Spy(TreeVerifier())
    result = tree_decoder(model, mask, verifier=spy, compile=captured(decode_path)).generate(prompt, 40)
    assert list(result.token_ids) == plain_generate(model, prompt, 40)
    assert_path(result, decode_path, blocked_by="tree")  # asked to run captured, a tree runs eagerly
    assert any(any(p.branches) for p, _ in spy.calls)  # trees were really verified
    assert all(v.num_accepted <= len(p.tokens) for p, v in spy.calls)  # a path never outgrows its chain
    assert sum(result.stats.accept_lengths) == 39 and result.stats.accepted <= result.stats.drafted


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flat=st.lists(st.booleans(), min_size=8, max_size=8), seed=st.integers(0, 60), k=st.integers(1, 7), new=st.integers(1, 30))
def test_tree_greedy_equals_generate_for_random_masks_and_lengths(tiny_llama, flat, seed, k, new):
    """Random masks, draft lengths and max_new_tokens (so the budget often ends inside a tree)."""
    prompt = torch.randint(0, 128, (1, 4 + seed % 9), generator=torch.Generator().manual_seed(seed))
    result = tree_decoder(tiny_llama, SkipMask.from_flat(flat), lookahead=StaticLookahead(k)).generate(prompt, new)
    assert list(result.token_ids) == plain_generate(tiny_llama, prompt, new)


def test_sibling_acceptance_moves_its_cache_entry(tiny_llama):
    """Steps that accept a branch must leave the cache exactly as plain decoding would."""
    prompt = torch.randint(0, 128, (1, 9), generator=torch.Generator().manual_seed(2))
    spy = Spy(TreeVerifier())
    result = tree_decoder(tiny_llama, SkipMask.everything(4), verifier=spy).generate(prompt, 48)
    assert list(result.token_ids) == plain_generate(tiny_llama, prompt, 48)
    assert sum(v.path is not None for _, v in spy.calls) >= 3  # several branch acceptances happened


def test_eos_inside_a_branch_stops_like_generate():
    model = build_tiny_model("llama", num_layers=4, seed=0)
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = None
    prompt = torch.randint(0, 128, (1, 9), generator=torch.Generator().manual_seed(2))
    spy = Spy(TreeVerifier())
    free = tree_decoder(model, SkipMask.everything(4), verifier=spy).generate(prompt, 48).token_ids
    branch_tokens = [v.path[-1] for _, v in spy.calls if v.path is not None]
    # A token first emitted as an accepted branch becomes EOS: the tree run must stop there too.
    eos = next(t for t in branch_tokens if free.index(t) == _first_branch_index(free, spy.calls, t))
    model.generation_config.eos_token_id = eos
    result = tree_decoder(model, SkipMask.everything(4)).generate(prompt, 48)
    assert list(result.token_ids) == plain_generate(model, prompt, 48)
    assert result.token_ids[-1] == eos and len(result.token_ids) < 48


def _first_branch_index(tokens, calls, token) -> int:
    emitted = 1  # the prefill's token
    for proposal, verdict in calls:
        accepted = verdict.accepted_tokens(proposal.tokens)
        if verdict.path is not None and accepted[-1] == token:
            return emitted + len(accepted) - 1
        emitted += len(accepted) + 1
    return -1


def test_tree_with_hybrid_drafter_and_confidence_is_lossless(tiny_llama, decode_path):
    prompt = torch.tensor([[3, 4, 5, 6, 3, 4, 5, 9, 3, 4]])
    decoder = SpeculativeDecoder(
        tiny_llama, SkipMask.uniform(4, 0.5), drafter=HybridDrafter(fallback=LayerSkipDrafter(TopKBranching())),
        verifier=TreeVerifier(), lookahead=ConfidenceLookahead(25, 0.05), compile=captured(decode_path),
    )
    result = decoder.generate(prompt, 36)
    assert list(result.token_ids) == plain_generate(tiny_llama, prompt, 36)
    assert_path(result, decode_path, blocked_by="tree")


def test_tree_verifier_refuses_sliding_window_models():
    model = build_tiny_model("mistral", num_layers=2, seed=0)
    model.config.sliding_window = 4
    with pytest.raises(LayersearchError, match="sliding"):
        SpeculativeDecoder(model, SkipMask.none(2), verifier=TreeVerifier())


def test_tree_verifier_sampling_is_distribution_exact(exact_three_token_law):
    """Sampling verifies the chain: chi-square of (t1, t2, t3) against the exact law."""
    from scipy.stats import chisquare

    target = build_tiny_model("llama", num_layers=2, vocab_size=6, seed=21)
    target.generation_config.eos_token_id = None
    prompt = [1, 2, 1, 2]
    exact = exact_three_token_law(target, prompt)
    runs = 1500
    observed = np.zeros(216)
    for seed in range(runs):
        decoder = SpeculativeDecoder(
            target, SkipMask(2, (1,), (0,)), drafter=LayerSkipDrafter(WIDE), verifier=TreeVerifier(),
            lookahead=StaticLookahead(2), sampling=SamplingConfig(temperature=1.0, seed=seed),
        )
        a, b, c = decoder.generate(prompt, 3).token_ids
        observed[a * 36 + b * 6 + c] += 1
    keep = exact * runs >= 5
    expected = np.append(exact[keep], exact[~keep].sum()) * runs
    counts = np.append(observed[keep], observed[~keep].sum())
    assert chisquare(counts, expected * counts.sum() / expected.sum()).pvalue > 1e-3
