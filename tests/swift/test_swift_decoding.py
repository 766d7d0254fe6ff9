"""On-the-fly SWIFT on tiny real models: lossless (greedy == model.generate), the loop's cache
untouched by the matchness forward, and the in-loop matchness equal to the offline one."""

from __future__ import annotations

import pytest
import torch

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.cache import cache_length, new_cache
from layersearch.runtime.draft_policy import DraftPolicy
from layersearch.runtime.forward import forward_tokens
from layersearch.runtime.teacher import draft_logits, draft_logits_in_cache, target_continuation
from layersearch.runtime.tree import TopKBranching, TreeVerifier
from layersearch.runtime.drafters import LayerSkipDrafter
from layersearch.swift import SwiftConfig, optimization_seconds, phase_counts
from layersearch.experiments.swift import swift_decoder
from tests.capture import assert_path, captured, cheap_capture


@pytest.fixture(scope="module")
def tiny8():
    model = cheap_capture(build_tiny_model("llama", num_layers=8, seed=4))
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def prompt_for(seed: int, length: int = 10) -> torch.Tensor:
    return torch.randint(0, 128, (1, length), generator=torch.Generator().manual_seed(seed))


def hf_greedy(model, prompt, new):
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new, do_sample=False)
    return out[0, prompt.shape[1] :].tolist()


def test_in_loop_matchness_forward_equals_the_offline_one_and_leaves_the_cache_exact(tiny8):
    prompt = prompt_for(0)[0].tolist()
    run = target_continuation(tiny8, prompt, 9)
    mask = SkipMask(8, attention=(2, 5), mlp=(3, 4, 6))
    offline = draft_logits(tiny8, mask, run)  # [8, vocab], cache holds the prompt only
    # A decode loop's cache: the prompt and the generated tokens (all but the newest).
    cache = new_cache(tiny8)
    with torch.inference_mode():
        forward_tokens(tiny8, prompt + list(run.tokens[:-1]), 0, cache)
    before = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
    in_loop = draft_logits_in_cache(tiny8, mask, cache, list(run.tokens[:-1]), len(prompt))
    torch.testing.assert_close(in_loop, offline, rtol=1e-4, atol=1e-4)
    assert cache_length(cache) == len(prompt) + len(run.tokens) - 1
    for layer, (keys, values) in zip(cache.layers, before):
        assert torch.equal(layer.keys, keys) and torch.equal(layer.values, values)


@pytest.mark.parametrize("decode_path, verification", [
    ("eager", "chain"), ("eager", "tree"), ("captured", "chain"), ("captured", "tree"),
])
def test_on_the_fly_swift_is_lossless_over_a_stream(tiny8, verification, decode_path):
    config = SwiftConfig(window=4, bo_interval=3, seed=0, tolerance=0.0)
    decoder = swift_decoder(tiny8, config, policy=DraftPolicy(6, 0.0), verifier=verification, compile=captured(decode_path))
    if verification == "tree":  # the tree verifier checks the layer-skip drafter's top-k token trees
        assert isinstance(decoder.verifier, TreeVerifier) and isinstance(decoder.drafter, LayerSkipDrafter)
        assert isinstance(decoder.drafter.branching, TopKBranching)
    optimized = 0
    for seed in range(4):
        prompt = prompt_for(seed, 8 + seed)
        result = decoder.generate(prompt, 24)
        assert list(result.token_ids) == hf_greedy(tiny8, prompt, 24)
        # Captured, the tree runs eagerly (a mask per step); chain decoding runs captured, the
        # controller scoring matchness in the loop's static cache.
        assert_path(result, decode_path, blocked_by="tree" if verification == "tree" else None)
        phases = phase_counts(result.stats.selections)
        assert sum(phases.values()) == result.stats.target_forwards  # one record per decoding step
        optimized += phases["optimize"]
        # The mask each step drafted with is the one the controller chose for it.
        chosen = [s["mask"] for s in result.stats.selections]
        assert chosen == [step.mask.short_string() for step in result.stats.steps]
        if phases["optimize"]:
            assert optimization_seconds(result.stats.selections) > 0
    assert optimized > 0
    decoder.controller.finish()
    assert len(decoder.controller.inputs) == 4
    assert all(0.0 <= s.matchness <= 1.0 for s in decoder.controller.inputs if s.matchness is not None)


def test_swift_decoder_refuses_sliding_window_models():
    model = build_tiny_model("mistral", num_layers=4, sliding_window=8, seed=0)
    with pytest.raises(LayersearchError, match="sliding-window"):
        swift_decoder(model, SwiftConfig())
