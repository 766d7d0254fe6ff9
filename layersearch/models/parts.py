"""Typed access to a model's named parts: torch types a module's attributes as ``Tensor | Module``,
so a sub-layer reached by name (``layer.self_attn``, ``layer.mlp``) is checked to be a Module here."""

from __future__ import annotations

from torch import nn

from layersearch.common.errors import LayersearchError


def submodule(module: nn.Module, name: str) -> nn.Module:
    """``module``'s child module ``name``; a LayersearchError where it has no module by that name."""
    part = getattr(module, name, None)
    if not isinstance(part, nn.Module):
        raise LayersearchError(f"{type(module).__name__} has no sub-module {name!r}")
    return part
