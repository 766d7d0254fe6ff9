"""``steer shrink``: the pruned drafter is the verifier run through only the kept layers."""

from __future__ import annotations

import pytest
import torch

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.skipping import skipping
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.cache import new_cache
from layersearch.runtime.forward import forward_tokens
from layersearch.steer.shrink import kept_layers, prune_layers, shrink


def test_kept_layers_are_spread_with_first_and_last():
    assert kept_layers(30, 8) == (0, 4, 8, 12, 17, 21, 25, 29)
    assert kept_layers(6, 2) == (0, 5)
    for bad in (1, 6, 0, True):
        with pytest.raises(LayersearchError, match="^keep_layers must"):
            kept_layers(6, bad)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_pruned_logits_equal_the_original_through_the_kept_layers(family):
    model = build_tiny_model(family, num_layers=6, seed=4)
    small, layers = shrink(model, 3)
    assert layers == (0, 2, 5) and small.config.num_hidden_layers == 3 and model.config.num_hidden_layers == 6
    dropped = tuple(i for i in range(6) if i not in layers)
    ids = torch.randint(0, 128, (1, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        with skipping(model, SkipMask(6, attention=dropped, mlp=dropped)):
            expected = model(ids).logits
        torch.testing.assert_close(small(ids).logits, expected)
        # Its own KV cache: incremental decoding gives the same logits as one forward.
        cache = new_cache(small)
        head = forward_tokens(small, ids[0, :7].tolist(), 0, cache)
        tail = forward_tokens(small, ids[0, 7:].tolist(), 7, cache)
        torch.testing.assert_close(torch.cat([head, tail]), expected[0], rtol=1e-4, atol=1e-4)
    assert small.get_input_embeddings().weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()  # a copy


def test_bad_layer_lists_are_refused():
    model = build_tiny_model("llama", num_layers=4, seed=0)
    for bad in ((), (2, 1), (0, 4), (1, 1)):
        with pytest.raises(LayersearchError, match="increasing"):
            prune_layers(model, bad)
