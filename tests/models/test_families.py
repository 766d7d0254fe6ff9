"""Skipping leaves the residual stream unchanged in every supported family; others are refused."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, GPTNeoXConfig

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.families import SUPPORTED_FAMILIES, layout_for
from layersearch.models.loading import load_model
from layersearch.models.skipping import skipping
from layersearch.models.tiny import SLIDING_FAMILIES, TINY_FAMILIES, build_tiny_model


def tiny(family: str) -> torch.nn.Module:
    window = 3 if family in SLIDING_FAMILIES else None
    return build_tiny_model(family, num_layers=3, seed=4, sliding_window=window)


def residual_streams(model, mask: SkipMask, layer: int) -> dict[str, torch.Tensor]:
    """Layer ``layer``'s input, its stream between the two branches, and its output."""
    seen: dict[str, torch.Tensor] = {}
    block = model.model.layers[layer]
    first_mlp_norm = getattr(block, layout_for(model.config).mlp_norms[0])

    def layer_input(module, args, kwargs) -> None:
        seen["input"] = (args[0] if args else kwargs["hidden_states"]).clone()

    def middle(module, args) -> None:
        seen["middle"] = args[0].clone()

    def output(module, args, out) -> None:
        seen["output"] = (out[0] if isinstance(out, tuple) else out).clone()

    hooks = [
        block.register_forward_pre_hook(layer_input, with_kwargs=True),
        first_mlp_norm.register_forward_pre_hook(middle),
        block.register_forward_hook(output),
    ]
    try:
        with torch.no_grad(), skipping(model, mask):
            model(torch.tensor([[5, 9, 17, 33, 8, 64, 3]]))
    finally:
        for hook in hooks:
            hook.remove()
    return seen


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_skipped_attention_leaves_the_residual_stream_unchanged(family):
    model = tiny(family)
    streams = residual_streams(model, SkipMask(3, (1,), ()), layer=1)
    # The stream entering the MLP branch is the layer's input: no attention, no attention norm.
    assert torch.equal(streams["middle"], streams["input"])
    assert not torch.equal(streams["output"], streams["input"])  # the MLP still ran


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_skipped_mlp_leaves_the_residual_stream_unchanged(family):
    model = tiny(family)
    streams = residual_streams(model, SkipMask(3, (), (1,)), layer=1)
    assert torch.equal(streams["output"], streams["middle"])
    assert not torch.equal(streams["middle"], streams["input"])  # the attention still ran


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_skipping_one_branch_at_a_time_equals_bypassing_the_layer(family):
    # Attention skipped in one layer and the MLP in the same layer add up to a bypassed layer.
    model = tiny(family)
    ids = torch.tensor([[5, 9, 17, 33, 8, 64, 3, 12, 40]])
    with torch.no_grad():
        with skipping(model, SkipMask(3, (1,), (1,))):  # the whole layer, bypassed
            whole = model(ids).logits
        layer = model.model.layers[1]
        with skipping(model, SkipMask(3, (1,), ())):
            # ...against the two branch overrides applied one after the other by hand:
            layer.mlp.forward = lambda h, *a, **k: torch.zeros_like(h)
            for name in layout_for(model.config).mlp_norms:
                getattr(layer, name).forward = lambda h, *a, **k: h
            try:
                branches = model(ids).logits
            finally:
                del layer.mlp.forward
                for name in layout_for(model.config).mlp_norms:
                    del getattr(layer, name).forward
    torch.testing.assert_close(branches, whole, rtol=0, atol=1e-6)


def test_every_tiny_family_is_supported():
    for family in TINY_FAMILIES:
        assert layout_for(tiny(family).config) in SUPPORTED_FAMILIES.values()


def gpt_neox():
    config = GPTNeoXConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    return AutoModelForCausalLM.from_config(config)


def test_an_unsupported_family_is_refused_in_one_line():
    with pytest.raises(LayersearchError, match="'gpt_neox' is not supported") as excinfo:
        with skipping(gpt_neox(), SkipMask(2, (0,), ())):
            pass
    assert "\n" not in str(excinfo.value) and "llama" in str(excinfo.value)


def test_loading_refuses_an_unsupported_family_before_reading_weights(tmp_path):
    gpt_neox().config.save_pretrained(tmp_path)  # a config only: reading weights would fail otherwise
    with pytest.raises(LayersearchError, match="'gpt_neox' is not supported"):
        load_model(str(tmp_path))
