"""Adding the steering bias to a drafter's MLPs, only inside a context manager.

Paper Eq. 2: ``W_d((W_u a + W_s g) ⊙ σ(W_g a))``. A forward hook on every ``mlp.up_proj``
adds the bias to the up projection's output. Hooks are registered on entry and removed in
``finally``: no global state, the model is never left steered. An MLP that a skip mask
replaces (:mod:`layersearch.models.skipping`) never calls its ``up_proj``, so skipped MLPs get
nothing without any bookkeeping here.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, cast

import torch
from torch import nn

from layersearch.common.errors import LayersearchError
from layersearch.models.skipping import decoder_layers


def up_projections(model: nn.Module) -> list[nn.Module]:
    """Every decoder layer's ``mlp.up_proj``; refuses a model without a separate up projection."""
    from layersearch.models.quantize import is_quantized_linear

    found = [getattr(layer.mlp, "up_proj", None) for layer in decoder_layers(model)]
    projections: list[nn.Module] = [p for p in found if isinstance(p, nn.Linear) or (isinstance(p, nn.Module) and is_quantized_linear(p))]
    if len(projections) != len(found):  # int8 drafts: quantized
        raise LayersearchError(
            f"{type(model).__name__}: steering needs gated MLPs with a separate up_proj (Llama, Qwen, Mistral, Gemma)"
        )
    return projections


def intermediate_size(model: nn.Module) -> int:
    """The width the bias must have: the up projections' output size."""
    # An int on nn.Linear and the quantized Linear alike; torch types Module attributes as Tensor | Module.
    return cast(int, up_projections(model)[0].out_features)


@contextmanager
def steered(model: nn.Module, bias: torch.Tensor) -> Iterator[nn.Module]:
    """Run ``model`` with ``bias`` added to every executed MLP's up projection.

    ``bias`` is ``[intermediate]`` (one steering vector for the whole forward, as in drafting)
    or ``[n, intermediate]`` (one per input position, as in training over a sequence)."""
    projections = up_projections(model)
    if bias.shape[-1] != projections[0].out_features:
        raise LayersearchError(
            f"steering bias has width {bias.shape[-1]} but the drafter's MLPs are {projections[0].out_features} wide"
        )

    def add_bias(module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
        return output + bias.to(output.dtype)  # [1, n, intermediate] + [(n,) intermediate]

    handles = []
    try:
        for projection in projections:
            handles.append(projection.register_forward_hook(add_bias))
        yield model
    finally:
        for handle in handles:
            handle.remove()
