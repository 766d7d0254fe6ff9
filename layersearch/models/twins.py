"""What every precision's twins share: a twin of a sub-layer is a shallow copy whose Linears are
replaced, and the low-bit LM head runs from final-norm states to logits. The int8 twins
(:mod:`layersearch.models.precision`) and the int4 twins (:mod:`layersearch.models.int4`) are
both built by :func:`build_twins`."""

from __future__ import annotations

import copy
from typing import Any, Callable, cast

import torch
from torch import nn

from layersearch.common.errors import LayersearchError
from layersearch.models.parts import submodule


class TwinHead:
    """The LM head in low precision (int8, or int4 with an Int4Linear): final-norm states ->
    logits, as ``forward_tokens(head=...)`` takes."""

    def __init__(self, linear: nn.Module, softcap: float | None) -> None:
        self.linear = linear
        self.softcap = softcap

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits ``[n, vocab]`` from final-norm states ``hidden`` [n, hidden]."""
        scores = self.linear(hidden)
        if self.softcap:  # Gemma 2/3 squash the final logits: tanh(x / cap) * cap
            scores = torch.tanh(scores / self.softcap) * self.softcap
        return scores


def build_twins(model: nn.Module, make: Callable[[nn.Linear, str], nn.Module], what: str
                ) -> tuple[tuple[nn.Module, ...], tuple[nn.Module, ...], TwinHead]:
    """Per decoder layer an attention and an MLP twin, and the head, each Linear made by
    ``make(linear, its module name)``: the shared construction of every precision's twins."""
    layers = getattr(getattr(model, "model", model), "layers", None)  # [L] decoder layers (skipping.py checks them)
    if not isinstance(layers, nn.ModuleList) or not all(hasattr(layer, "self_attn") and hasattr(layer, "mlp") for layer in layers):
        raise LayersearchError(f"{type(model).__name__} has no decoder layers with self_attn and mlp: it cannot take {what} twins")
    names = {module: name for name, module in model.named_modules()}
    head = cast(Any, model).get_output_embeddings()  # a transformers model, typed as the Module the callers hold
    config = model.config
    softcap = getattr(getattr(config, "get_text_config", lambda: config)(), "final_logit_softcapping", None)
    with torch.no_grad():
        attention = tuple(_twin(submodule(layer, "self_attn"), make, names) for layer in layers)
        mlp = tuple(_twin(submodule(layer, "mlp"), make, names) for layer in layers)
        quantized_head = TwinHead(make(_linear(head, what), names.get(head, "lm_head")), softcap)
    return attention, mlp, quantized_head


def _twin(module: nn.Module, make: Callable[[nn.Linear, str], nn.Module], names: dict[nn.Module, str]) -> nn.Module:
    """A shallow copy of ``module`` whose Linears are made by ``make`` (its other children are shared)."""
    twin = copy.copy(module)
    twin.__dict__.pop("forward", None)  # never inherit a skip or kernel override
    twin._modules = dict(module._modules)
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            twin._modules[name] = make(child, names.get(child, name))
    return twin


def _linear(linear: nn.Module, what: str) -> nn.Linear:
    if not isinstance(linear, nn.Linear):
        raise LayersearchError(f"an {what} twin needs Linear layers, not {type(linear).__name__}")
    return linear
