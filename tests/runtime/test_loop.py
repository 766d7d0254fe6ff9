"""The decode loop is lossless: greedy output equals plain generate token by token."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.draft_policy import DraftPolicy
from tests.capture import assert_path, captured

NEW = 40


def plain_generate(model, prompt, new=NEW):
    # An explicit attention mask: otherwise generate() takes prompt tokens equal to pad_token_id as padding.
    mask = torch.ones_like(prompt)
    out = model.generate(prompt, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False)
    return out[0, prompt.shape[1] :].tolist()


def prompt_for(seed: int, length: int = 12) -> torch.Tensor:
    return torch.randint(0, 128, (1, length), generator=torch.Generator().manual_seed(seed))


MASKS = {
    "none": SkipMask.none(4),
    "everything": SkipMask.everything(4),
    "uniform-0.5": SkipMask.uniform(4, 0.5),
    "attention-only": SkipMask(4, (0, 1, 2), ()),
    "mixed": SkipMask(4, (0,), (3,)),
    "mlp-only": SkipMask(4, (), (1, 2)),
}


POLICIES = [DraftPolicy(4, 0.0), DraftPolicy(8, 0.05), DraftPolicy(1, 0.0)]
# Captured: every mask on the Llama, drafts of up to 4 (each draft length and mask is a compiled
# shape; test_draft_plans.py runs the Qwen2 captured).
CAPTURED_CASES = [("captured", POLICIES[0], name, "tiny_llama") for name in sorted(MASKS)]


@pytest.mark.parametrize("decode_path, policy, mask_name, family", [
    *[("eager", policy, name, family) for policy in POLICIES for name in sorted(MASKS) for family in ("tiny_llama", "tiny_qwen2")],
    *CAPTURED_CASES,
], ids=str)
def test_greedy_equals_generate(request, family, mask_name, policy, decode_path):
    model = request.getfixturevalue(family)
    prompt = prompt_for(7)
    result = SpeculativeDecoder(model, MASKS[mask_name], policy=policy, compile=captured(decode_path)).generate(prompt, NEW)
    assert list(result.token_ids) == plain_generate(model, prompt)
    assert_path(result, decode_path)
    assert result.stats.new_tokens == NEW


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flat=st.lists(st.booleans(), min_size=8, max_size=8), seed=st.integers(0, 50), k=st.integers(1, 6))
def test_greedy_equals_generate_for_random_masks(tiny_llama, flat, seed, k):
    prompt = prompt_for(seed, length=5 + seed % 7)
    mask = SkipMask.from_flat(flat)
    result = SpeculativeDecoder(tiny_llama, mask, policy=DraftPolicy(k, 0.0)).generate(prompt, 24)
    assert list(result.token_ids) == plain_generate(tiny_llama, prompt, 24)


@pytest.mark.parametrize("family", ["mistral", "qwen3"])
def test_other_families_are_lossless(family):
    # Eager only: a fresh model compiles every shape anew (some 15 s for these two).
    model = build_tiny_model(family, num_layers=4, seed=3)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    prompt = prompt_for(3)
    result = SpeculativeDecoder(model, SkipMask.uniform(4, 0.5), policy=DraftPolicy(4, 0.0)).generate(prompt, 30)
    assert list(result.token_ids) == plain_generate(model, prompt, 30)


def test_stops_after_eos_like_generate(tiny_llama, decode_path):
    prompt = prompt_for(11)
    reference = plain_generate(tiny_llama, prompt)
    eos = reference[17]  # some token the model really emits mid-way
    decoder = SpeculativeDecoder(tiny_llama, MASKS["mixed"], policy=DraftPolicy(4, 0.0), compile=captured(decode_path))
    result = decoder.generate(prompt, NEW, eos_token_ids=[eos])
    first = reference.index(eos)
    assert list(result.token_ids) == reference[: first + 1]
    assert_path(result, decode_path)


def test_statistics_add_up(tiny_llama):
    result = SpeculativeDecoder(tiny_llama, MASKS["mixed"], policy=DraftPolicy(4, 0.0)).generate(prompt_for(1), NEW)
    stats = result.stats
    assert stats.accepted <= stats.drafted
    # Every target forward emits its accepted drafts plus exactly one token of its own.
    assert stats.new_tokens - 1 == stats.accepted + stats.target_forwards
    assert stats.mean_accepted_length == pytest.approx((NEW - 1) / stats.target_forwards)
    assert 0 <= stats.acceptance_rate <= 1
    assert stats.draft_seconds > 0 and stats.verify_seconds > 0
    assert stats.total_seconds >= stats.draft_seconds + stats.verify_seconds + stats.prefill_seconds
    # Each draft forward proposes a token, except the one per cycle at most that stops on low confidence.
    assert stats.drafted <= stats.draft_forwards <= stats.drafted + stats.target_forwards
    assert 0 < stats.forward_seconds <= stats.total_seconds and stats.bookkeeping_seconds >= 0


def test_empty_mask_is_plain_decoding(tiny_llama):
    stats = SpeculativeDecoder(tiny_llama, SkipMask.none(4)).generate(prompt_for(2), 10).stats
    assert stats.drafted == 0 and stats.target_forwards == 9 and stats.mean_accepted_length == 1.0
    assert stats.acceptance_rate is None


def test_draft_never_overshoots_max_new_tokens(tiny_llama, decode_path):
    for new in (1, 2, 3, 7):
        decoder = SpeculativeDecoder(tiny_llama, MASKS["mixed"], policy=DraftPolicy(8, 0.0), compile=captured(decode_path))
        result = decoder.generate(prompt_for(4), new)
        assert list(result.token_ids) == plain_generate(tiny_llama, prompt_for(4), new)
        assert_path(result, decode_path)


def test_batch_larger_than_one_is_an_error(tiny_llama):
    with pytest.raises(LayersearchError, match="batch size must be 1"):
        SpeculativeDecoder(tiny_llama, MASKS["mixed"]).generate(torch.zeros(2, 5, dtype=torch.long), 4)


def test_mask_for_other_layer_count_is_an_error(tiny_llama):
    with pytest.raises(LayersearchError, match="6 layers"):
        SpeculativeDecoder(tiny_llama, SkipMask.uniform(6, 0.5))


def test_high_threshold_still_lossless(tiny_llama, decode_path):
    # A threshold no random-model draft reaches means zero drafts: every step is a plain target step.
    decoder = SpeculativeDecoder(tiny_llama, MASKS["mixed"], policy=DraftPolicy(4, 0.99), compile=captured(decode_path))
    result = decoder.generate(prompt_for(5), 20)
    assert list(result.token_ids) == plain_generate(tiny_llama, prompt_for(5), 20)
    assert_path(result, decode_path)
    assert result.stats.drafted == 0


def test_adaptive_threshold_run_is_lossless(tiny_llama, decode_path):
    adaptive = DraftPolicy(6, 0.02).lookahead("adaptive")
    decoder = SpeculativeDecoder(tiny_llama, MASKS["attention-only"], lookahead=adaptive, compile=captured(decode_path))
    result = decoder.generate(prompt_for(6), NEW)
    assert list(result.token_ids) == plain_generate(tiny_llama, prompt_for(6))
    assert_path(result, decode_path)
