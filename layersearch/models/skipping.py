"""Apply a SkipMask to a transformers decoder, only inside a context manager.

Skipping a sub-layer means the residual stream passes through it unchanged. For the
pre-norm decoders we support (Llama, Qwen2/Qwen3, Mistral and others whose layers have
``self_attn`` and ``mlp`` children), that is achieved by making the skipped sub-module
return zeros: ``h + 0 == h``. A skipped attention sub-layer never calls the KV cache, so it
writes nothing. A layer whose attention and MLP are both skipped is bypassed whole, which
also saves its two norms.

The overrides are instance attributes set on entry and removed in ``finally``: the model is
never left modified and no global state is involved.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch
from torch import nn

from layersearch.errors import LayersearchError
from layersearch.mask import SkipMask


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a causal LM (``model.model.layers``), checked to be skippable."""
    base = getattr(model, "model", model)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        raise LayersearchError(f"{type(model).__name__}: no decoder layers found (expected model.model.layers)")
    first = layers[0]
    if not (hasattr(first, "self_attn") and hasattr(first, "mlp")):
        raise LayersearchError(
            f"{type(model).__name__}: layers lack self_attn/mlp sub-layers; this model family is not supported"
        )
    return layers


def _skipped_attention(hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, None]:
    # Attention modules return (output, weights); zeros leave the residual unchanged.
    return torch.zeros_like(hidden_states), None


def _skipped_mlp(hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return torch.zeros_like(hidden_states)


def _skipped_layer(hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return hidden_states


@contextmanager
def skipping(model: nn.Module, mask: SkipMask) -> Iterator[nn.Module]:
    """Run ``model`` with the sub-layers of ``mask`` skipped for the duration of the block."""
    layers = decoder_layers(model)
    if mask.num_layers != len(layers):
        raise LayersearchError(f"mask is for {mask.num_layers} layers but the model has {len(layers)}")
    whole = set(mask.attention) & set(mask.mlp)
    overrides: list[tuple[nn.Module, Any]] = []
    overrides += [(layers[i], _skipped_layer) for i in sorted(whole)]
    overrides += [(layers[i].self_attn, _skipped_attention) for i in mask.attention if i not in whole]
    overrides += [(layers[i].mlp, _skipped_mlp) for i in mask.mlp if i not in whole]
    applied: list[nn.Module] = []
    try:
        for module, replacement in overrides:
            if "forward" in module.__dict__:
                raise LayersearchError("a skip mask is already applied to this model (nested skipping)")
            module.forward = replacement
            applied.append(module)
        yield model
    finally:
        for module in applied:
            del module.forward
