"""Sliding-window families decode losslessly far beyond their window, for every mask shape."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from layersearch.masks.mask import SkipMask
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.cache import can_truncate, cache_length, commit_cache, new_cache, truncate_cache
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.draft_policy import DraftPolicy
from layersearch.runtime.forward import forward_tokens
from layersearch.runtime.sampling import SamplingConfig
from tests.capture import assert_path, captured
from test_sampling import P_MIN, exact_sequence_probs, pooled_chisquare  # same folder (pytest's rootdir-less import)

WINDOW = 3
PROMPT = 14  # several windows long, and generation goes on for ten more windows
NEW = 30
FAMILIES = ["mistral", "qwen2", "gemma2", "gemma3", "phi3"]
MASKS = {
    "none": SkipMask.none(4),
    "attention-only": SkipMask(4, (0, 1, 2), ()),
    "mlp-only": SkipMask(4, (), (1, 2)),
    "whole-layers": SkipMask(4, (1, 2), (1, 2)),
    "all": SkipMask.everything(4),
    "mixed": SkipMask(4, (0, 3), (1,)),
}


@pytest.fixture(scope="module", params=FAMILIES)
def sliding_model(request) -> torch.nn.Module:
    model = build_tiny_model(request.param, num_layers=4, sliding_window=WINDOW, seed=1)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def plain_generate(model, prompt, new=NEW):
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new, min_new_tokens=new, do_sample=False)
    return out[0, prompt.shape[1] :].tolist()


def prompt_for(seed: int, length: int = PROMPT, vocab: int = 128) -> torch.Tensor:
    return torch.randint(3, vocab, (1, length), generator=torch.Generator().manual_seed(seed))


def test_tiny_models_really_slide(sliding_model):
    cache = new_cache(sliding_model)
    windows = [getattr(layer, "sliding_window", None) for layer in cache.layers if layer.is_sliding]
    assert windows and set(windows) == {WINDOW}
    # The same weights without the window give other logits: the window matters in these tests.
    family = sliding_model.config.model_type.removesuffix("_text")
    unwindowed = build_tiny_model(family, num_layers=4, sliding_window=None, seed=1)
    ids = prompt_for(0)
    with torch.no_grad():
        assert not torch.allclose(sliding_model(ids).logits[0, -1], unwindowed(ids).logits[0, -1])


@pytest.mark.parametrize("mask_name", sorted(MASKS))
def test_greedy_equals_generate_beyond_the_window(sliding_model, mask_name):
    prompt = prompt_for(7)
    result = SpeculativeDecoder(sliding_model, MASKS[mask_name], policy=DraftPolicy(4, 0.0)).generate(prompt, NEW)
    assert list(result.token_ids) == plain_generate(sliding_model, prompt)
    if mask_name != "none":
        assert result.stats.drafted > 0  # drafts were made and rolled back past the window


def test_long_drafts_roll_back_more_than_a_window(sliding_model, decode_path):
    # Drafts of 8 tokens are longer than the window: a rejection rolls back past evicted entries
    # unless the cache recorded them.
    prompt = prompt_for(3)
    decoder = SpeculativeDecoder(sliding_model, MASKS["mixed"], policy=DraftPolicy(8, 0.0), compile=captured(decode_path))
    result = decoder.generate(prompt, NEW)
    assert list(result.token_ids) == plain_generate(sliding_model, prompt)
    assert_path(result, decode_path, blocked_by="sliding-window")  # asked to run captured, a ring cache runs eagerly
    assert result.stats.drafted > result.stats.accepted  # some drafts were rejected


def test_rollback_restores_the_exact_cache(sliding_model):
    ids = prompt_for(5, length=20)[0]
    with torch.inference_mode():
        cache = new_cache(sliding_model)
        forward_tokens(sliding_model, ids[:12], 0, cache)
        forward_tokens(sliding_model, ids[12:18], 12, cache)  # six tokens, two windows
        truncate_cache(cache, 12)
        rolled = forward_tokens(sliding_model, ids[12:15], 12, cache)
        fresh_cache = new_cache(sliding_model)
        forward_tokens(sliding_model, ids[:12], 0, fresh_cache)
        fresh = forward_tokens(sliding_model, ids[12:15], 12, fresh_cache)
    torch.testing.assert_close(rolled, fresh, rtol=0, atol=1e-5)


def test_sliding_layers_stay_within_their_window(sliding_model):
    ids = prompt_for(2, length=20)[0]
    with torch.inference_mode():
        cache = new_cache(sliding_model)
        forward_tokens(sliding_model, ids[:16], 0, cache)
        commit_cache(cache)
        for layer in cache.layers:
            held = layer.keys.shape[-2]
            assert held == (WINDOW - 1 if layer.is_sliding else 16)
        forward_tokens(sliding_model, ids[16:20], 16, cache)
        truncate_cache(cache, 18)
        assert cache_length(cache) == 18
        assert all(layer.keys.shape[-2] == WINDOW - 1 for layer in cache.layers if layer.is_sliding)


def test_committed_positions_cannot_be_rolled_back(sliding_model):
    ids = prompt_for(4)[0]
    with torch.inference_mode():
        cache = new_cache(sliding_model)
        forward_tokens(sliding_model, ids, 0, cache)
        assert can_truncate(cache, 5)
        truncate_cache(cache, 12)  # positions < 12 are final now
        assert can_truncate(cache, 12) and not can_truncate(cache, 11)
        with pytest.raises(RuntimeError, match="already committed"):
            truncate_cache(cache, 5)


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_skipping_the_first_layer_attention_keeps_masks_consistent(attention):
    # transformers sizes every attention mask from one reference layer (layer 0 here); while a
    # draft skips that layer's attention it lags behind, and an eager mask used to crash.
    model = build_tiny_model("llama", num_layers=4, seed=2, attn_implementation=attention)
    model.generation_config.eos_token_id = None
    prompt = prompt_for(9)
    result = SpeculativeDecoder(model, SkipMask(4, (0, 1), ()), policy=DraftPolicy(4, 0.0)).generate(prompt, NEW)
    assert list(result.token_ids) == plain_generate(model, prompt)


def peaked_sliding_model(family: str) -> torch.nn.Module:
    # As in test_sampling: a scaled head makes draft and target disagree on a tiny vocabulary.
    model = build_tiny_model(family, num_layers=2, hidden_size=32, vocab_size=6, seed=5, sliding_window=2)
    with torch.no_grad():
        model.lm_head.weight.mul_(12.0)
    model.generation_config.eos_token_id = None
    return model


@pytest.mark.parametrize("family", ["mistral", "qwen2", "gemma2", "gemma3"])
def test_sampling_follows_the_target_distribution_beyond_the_window(family):
    model = peaked_sliding_model(family)
    prompt = [1, 4, 2, 5, 3, 0, 4]  # three windows of 2, so every step attends past evictions
    base = SamplingConfig(temperature=1.0, top_p=0.8)
    # The exact law comes from cache-free forwards over whole sequences (no rollback involved).
    sequences, exact = exact_sequence_probs(model, prompt, base)
    pairs = {pair: i for i, pair in enumerate(itertools.product(range(6), repeat=2))}
    exact_pairs = np.zeros(len(pairs))
    for seq, prob in zip(sequences, exact):
        exact_pairs[pairs[seq[1:]]] += prob
    observed = np.zeros(len(pairs))
    mask = SkipMask(2, (1,), (0,))
    drafted = 0
    runs = 800
    for seed in range(runs):
        config = SamplingConfig(temperature=1.0, top_p=0.8, seed=seed)
        result = SpeculativeDecoder(model, mask, policy=DraftPolicy(2, 0.0), sampling=config).generate(prompt, 3)
        observed[pairs[result.token_ids[1:]]] += 1
        drafted += result.stats.drafted
    assert drafted == runs
    assert pooled_chisquare(observed, exact_pairs) > P_MIN
