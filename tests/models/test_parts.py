"""A decoder layer's sub-layers are reached by name as Modules; anything else is one clear error."""

from __future__ import annotations

import pytest

from layersearch.common.errors import LayersearchError
from layersearch.models.parts import submodule
from layersearch.models.tiny import build_tiny_model


def test_submodule_returns_the_named_child() -> None:
    layer = build_tiny_model(num_layers=1).model.layers[0]
    assert submodule(layer, "self_attn") is layer.self_attn
    assert submodule(layer, "mlp") is layer.mlp


@pytest.mark.parametrize("name", ["missing", "o_proj"])
def test_submodule_refuses_a_name_that_is_not_a_child_module(name: str) -> None:
    layer = build_tiny_model(num_layers=1).model.layers[0]
    with pytest.raises(LayersearchError, match=f"no sub-module '{name}'"):
        submodule(layer, name)


def test_submodule_refuses_a_tensor_attribute() -> None:
    attention = build_tiny_model(num_layers=1).model.layers[0].self_attn
    with pytest.raises(LayersearchError, match="'weight'"):
        submodule(attention.o_proj, "weight")
