"""Teacher-forced drafts of a plan with int8 or int4 parts (SWIFT's matchness, on the fly and
offline): every position is drafted as a decode step drafts it, one token with its own
activation scale (int8; int4 is weight-only)."""

from __future__ import annotations

import pytest
import torch

from layersearch.masks.mask import SkipMask
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.cache import cache_length, new_cache
from layersearch.runtime.forward import forward_tokens
from layersearch.runtime.teacher import draft_logits, draft_logits_in_cache, target_continuation


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model("llama", num_layers=4, seed=1)


PLANS = [
    SkipMask.none(4).kept_in_int8(head=True),
    SkipMask(4, attention=(1,), mlp=(2,)).kept_in_int8(head=False),
    SkipMask(4, attention=(1,), int4_attention=(0, 2), int4_mlp=(0, 1, 2, 3), int4_head=True, int4_group_size=32),
]
IDS = ["all-int8", "skips-and-int8", "skips-and-int4"]


def assert_drafts_as(in_loop: torch.Tensor, offline: torch.Tensor, plan: SkipMask) -> None:
    """The same drafts: SWIFT's matchness reads the argmax, so that is equal token for token.
    The logits agree to float rounding; with int8 parts, attention over another key layout (a
    static cache's whole capacity against exactly the prefix) differs by ~1e-7, which may move
    an activation across an int8 rounding boundary (a different code on one CPU, the same on
    another), so there the bound is one int8 step of the logits' range. int4 twins round their
    products to bf16, where a ~1e-7 difference may cross a bf16 rounding boundary: one bf16 step
    (2^-8) of the logits' range."""
    assert torch.equal(in_loop.argmax(-1), offline.argmax(-1))
    largest = offline.abs().max().item()
    atol = largest / 127 if plan.has_int8 else largest * 2.0**-8 if plan.has_int4 else 1e-4
    torch.testing.assert_close(in_loop, offline, rtol=0, atol=atol)


@pytest.mark.parametrize("plan", PLANS, ids=IDS)
def test_a_position_is_drafted_the_same_whatever_follows_it(tiny, plan):
    # With one activation scale for the whole teacher-forced pass, the tokens after a position
    # would change what is drafted there; a draft step never sees them.
    prompt = torch.randint(0, 128, (9,), generator=torch.Generator().manual_seed(2)).tolist()
    run = target_continuation(tiny, prompt, 8)
    full = draft_logits(tiny, plan, run)
    inputs = list(run.tokens[:-1])
    for k in (1, 3):
        prefix = draft_logits_in_cache(tiny, plan, run.cache, inputs[:k], run.length)
        if plan.has_int4:  # one bf16 product over k tokens against n: a BLAS may block them differently
            assert_drafts_as(prefix, full[:k], plan)
        else:
            torch.testing.assert_close(prefix, full[:k], rtol=0, atol=0)
    assert cache_length(run.cache) == len(prompt)  # the cache is back to the prompt


@pytest.mark.parametrize("plan", PLANS, ids=IDS)
def test_in_a_decode_loops_cache_it_drafts_as_offline(tiny, plan):
    prompt = torch.randint(0, 128, (9,), generator=torch.Generator().manual_seed(3)).tolist()
    run = target_continuation(tiny, prompt, 7)
    offline = draft_logits(tiny, plan, run)
    cache = new_cache(tiny)
    with torch.inference_mode():
        forward_tokens(tiny, prompt + list(run.tokens[:-1]), 0, cache)
    before = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
    in_loop = draft_logits_in_cache(tiny, plan, cache, list(run.tokens[:-1]), len(prompt))
    assert_drafts_as(in_loop, offline, plan)
    for layer, (keys, values) in zip(cache.layers, before):
        assert torch.equal(layer.keys, keys) and torch.equal(layer.values, values)


@pytest.mark.parametrize("plan", [*PLANS, SkipMask(4, attention=(1, 3), mlp=(2,))], ids=[*IDS, "skips"])
def test_in_a_captured_loops_static_cache_it_drafts_as_offline(tiny, plan):
    """A captured loop's static cache holds its valid positions in tensors of its whole capacity:
    the draft goes after them, sees only what it should, and leaves the valid entries alone."""
    from layersearch.runtime.cache import new_static_cache, seat_static_cache

    prompt = torch.randint(0, 128, (9,), generator=torch.Generator().manual_seed(3)).tolist()
    run = target_continuation(tiny, prompt, 7)
    offline = draft_logits(tiny, plan, run)
    cache = new_static_cache(tiny, 64)
    valid = len(prompt) + len(run.tokens) - 1
    with torch.inference_mode():
        seat_static_cache(cache, 0)
        forward_tokens(tiny, prompt + list(run.tokens[:-1]), 0, cache)
    before = [(layer.keys[:, :, :valid].clone(), layer.values[:, :, :valid].clone()) for layer in cache.layers]
    in_loop = draft_logits_in_cache(tiny, plan, cache, list(run.tokens[:-1]), len(prompt), valid=valid)
    assert_drafts_as(in_loop, offline, plan)
    for layer, (keys, values) in zip(cache.layers, before):
        assert torch.equal(layer.keys[:, :, :valid], keys) and torch.equal(layer.values[:, :, :valid], values)
    assert not any("forward" in vars(m) for m in tiny.modules())  # the plan ran as a view, not patched in


def test_the_int8_head_is_the_one_that_drafts(tiny):
    prompt = torch.randint(0, 128, (9,), generator=torch.Generator().manual_seed(4)).tolist()
    run = target_continuation(tiny, prompt, 6)
    body = SkipMask.none(4).kept_in_int8(head=False)
    with_head = draft_logits(tiny, body.with_int8(body.int8_attention, body.int8_mlp, True), run)
    assert not torch.equal(with_head, draft_logits(tiny, body, run))
