"""Apply a draft plan (a SkipMask) to a transformers decoder, only inside a context manager.

An int8 sub-layer runs its int8 twin (:mod:`layersearch.models.precision`) in its place: the
sub-module's forward becomes the twin's for the block, with the same inputs and the same KV
cache layer, so nothing else in the model changes.

Skipping a sub-layer means the residual stream passes through it unchanged. For the
families we support (:mod:`layersearch.models.families`: pre-norm Llama, Mistral, Qwen2/3,
Phi-3, and Gemma 2/3 with sandwich norms) that is achieved by making the skipped sub-module
return zeros and bypassing the norms of its branch (before and, for Gemma, after it):
``h + 0 == h``. A skipped attention sub-layer never calls the KV cache, so it writes nothing.
A layer whose attention and MLP are both skipped is bypassed whole.

The overrides are instance attributes set on entry and removed in ``finally``: the model is
never left modified and no global state is involved.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch
from torch import nn

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.families import LayerLayout, layout_for
from layersearch.models.parts import submodule


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a causal LM (``model.model.layers``), checked to be skippable."""
    if getattr(model, "config", None) is not None:
        layout_for(model.config)  # refuses a family we do not support, in one line
    base = getattr(model, "model", model)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        raise LayersearchError(
            f"{type(model).__name__} is not a decoder-only causal language model (no decoder layers at "
            "model.model.layers): layersearch needs one such as Llama, Qwen2, Mistral or Gemma"
        )
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


def _bypassed_norm(hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    # A norm of a skipped branch: its output feeds only the skipped sub-layer (pre-norm), or
    # its input is that sub-layer's zeros (post-norm, which would map 0 to 0 anyway).
    return hidden_states


def _branch_norms(layer: nn.Module, names: tuple[str, ...]) -> list[nn.Module]:
    return [getattr(layer, name) for name in names if isinstance(getattr(layer, name, None), nn.Module)]


def _overrides(model: nn.Module, layers: nn.ModuleList, mask: SkipMask, layout: LayerLayout) -> list[tuple[nn.Module, Any]]:
    """(module, replacement forward) pairs that skip ``mask``'s sub-layers and run its int8 and int4 ones."""
    whole = set(mask.attention) & set(mask.mlp)
    overrides: list[tuple[nn.Module, Any]] = [(layers[i], _skipped_layer) for i in sorted(whole)]
    for i in mask.attention:
        if i not in whole:
            overrides.append((submodule(layers[i], "self_attn"), _skipped_attention))
            overrides += [(norm, _bypassed_norm) for norm in _branch_norms(layers[i], layout.attention_norms)]
    for i in mask.mlp:
        if i not in whole:
            overrides.append((submodule(layers[i], "mlp"), _skipped_mlp))
            overrides += [(norm, _bypassed_norm) for norm in _branch_norms(layers[i], layout.mlp_norms)]
    if mask.num_int8 or mask.num_int4:
        from layersearch.models.precision import plan_twins

        for quant, twins in plan_twins(model, mask).items():  # int8 and int4 alike
            overrides += [(submodule(layers[i], "self_attn"), twins.attention[i].forward) for i in mask.quantized(quant, "attention")]
            overrides += [(submodule(layers[i], "mlp"), twins.mlp[i].forward) for i in mask.quantized(quant, "mlp")]
    return overrides


@contextmanager
def skipping(model: nn.Module, mask: SkipMask) -> Iterator[nn.Module]:
    """Run ``model`` with ``mask``'s plan applied for the duration of the block: its skipped
    sub-layers skipped, its int8 and int4 sub-layers run by their twins (its low-bit head is the
    drafter's to pass to the forward: the target's head module is shared with verification)."""
    layers = decoder_layers(model)
    if mask.num_layers != len(layers):
        raise LayersearchError(f"mask is for {mask.num_layers} layers but the model has {len(layers)}")
    overrides = _overrides(model, layers, mask, layout_for(model.config))
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
