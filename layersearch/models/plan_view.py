"""A draft plan as a model of its own: a shallow copy of the model that shares every weight.

:func:`~layersearch.models.skipping.skipping` applies a plan to the model itself for the
duration of a ``with`` block. A captured decode step needs the opposite: the draft and the
target must both exist at once, as two modules that never change, so each can be compiled
once and replayed every step. :func:`plan_view` builds that second module: the model's
objects are copied (not their tensors) along the path down to each replaced sub-layer, and
the replaced ones are small modules (:class:`SkippedAttention`, :class:`SkippedMLP`,
:class:`SkippedLayer`, :class:`BypassedNorm`) or the plan's int8 and int4 twins. The model itself is
never modified; a view costs a few hundred small Python objects and no tensor memory.
"""

from __future__ import annotations

import copy
from typing import Any, cast

import torch
from torch import nn
from transformers import PreTrainedModel

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.families import layout_for
from layersearch.models.skipping import decoder_layers


class SkippedAttention(nn.Module):
    """An attention sub-layer that adds nothing to the residual stream (and writes no KV)."""

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, None]:
        """Zeros shaped like ``hidden_states`` [1, n, hidden], and no attention weights."""
        return torch.zeros_like(hidden_states), None


class SkippedMLP(nn.Module):
    """An MLP sub-layer that adds nothing to the residual stream."""

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        """Zeros shaped like ``hidden_states``."""
        return torch.zeros_like(hidden_states)


class SkippedLayer(nn.Module):
    """A decoder layer whose attention and MLP are both skipped: the identity."""

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        """``hidden_states`` unchanged."""
        return hidden_states


class BypassedNorm(nn.Module):
    """A norm of a skipped branch: its output feeds only the skipped sub-layer (pre-norm), or
    its input is that sub-layer's zeros (post-norm)."""

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        """``hidden_states`` unchanged."""
        return hidden_states


def plan_view(model: PreTrainedModel, plan: SkipMask) -> PreTrainedModel:
    """``model`` with ``plan`` applied, as a separate module sharing all of ``model``'s tensors.

    Skipped sub-layers become the modules above, int8 and int4 ones their twins
    (:func:`~layersearch.models.precision.plan_twins`); the LM head is the model's own (a low-bit
    head is the drafter's to pass to the forward, as with ``skipping``). An empty plan gives
    the model itself."""
    layers = decoder_layers(model)
    if plan.num_layers != len(layers):
        raise LayersearchError(f"mask is for {plan.num_layers} layers but the model has {len(layers)}")
    if plan.num_skipped == 0 and not (plan.num_int8 or plan.num_int4):
        return model
    layout = layout_for(model.config)
    twins: dict[str, Any] = {}
    if plan.num_int8 or plan.num_int4:
        from layersearch.models.precision import plan_twins

        twins = plan_twins(model, plan)
    whole = set(plan.attention) & set(plan.mlp)
    new_layers: list[nn.Module] = []
    for i, layer in enumerate(layers):
        if i in whole:
            new_layers.append(SkippedLayer())
            continue
        children: dict[str, nn.Module] = {}
        if i in plan.attention:
            children["self_attn"] = SkippedAttention()
            children.update({name: BypassedNorm() for name in layout.attention_norms if isinstance(getattr(layer, name, None), nn.Module)})
        elif plan.precision("attention", i) in twins:
            children["self_attn"] = twins[plan.precision("attention", i)].attention[i]
        if i in plan.mlp:
            children["mlp"] = SkippedMLP()
            children.update({name: BypassedNorm() for name in layout.mlp_norms if isinstance(getattr(layer, name, None), nn.Module)})
        elif plan.precision("mlp", i) in twins:
            children["mlp"] = twins[plan.precision("mlp", i)].mlp[i]
        new_layers.append(_with_children(layer, children) if children else layer)
    base = getattr(model, "model", model)
    new_base = _with_children(base, {"layers": nn.ModuleList(new_layers)})
    view = new_base if base is model else _with_children(model, {"model": new_base})
    return cast(PreTrainedModel, view)  # a copy of the model's own class


def _with_children(module: nn.Module, children: dict[str, nn.Module]) -> nn.Module:
    """A shallow copy of ``module`` (same parameters and buffers) with some children replaced."""
    view = copy.copy(module)
    view.__dict__.pop("forward", None)  # never carry a kernel or skip override into the view
    # nor the decoders kept on the model (integrations/hf_generate.py): the compiled table holds its
    # views, so a view carrying them would keep them, and through them the model, alive
    view.__dict__.pop("_layersearch_decoders", None)
    view._modules = {**module._modules, **children}
    return view
