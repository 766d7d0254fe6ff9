"""The item grammar below the CLI (``NAME``, ``KIND:MODEL``, ``KIND:MODEL@int8``) that bench,
generate and tune share, and the spec fragments bench rows are built from."""

from __future__ import annotations

import pytest

from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DrafterSpec, ModelRef
from layersearch.decoder.fragments import draft_model_item, drafter_spec, model_names, parse_drafters


def test_drafter_items_become_drafter_specs():
    assert parse_drafters("prompt-lookup, model:small@int8,hybrid:small") == ("prompt-lookup", "model:small@int8", "hybrid:small")
    assert drafter_spec("prompt-lookup") == DrafterSpec("prompt-lookup")
    assert drafter_spec("model:small@int8") == DrafterSpec("layer-skip", ModelRef("small"), 0, "int8")
    assert drafter_spec("hybrid:small", vocab=64) == DrafterSpec("hybrid", ModelRef("small"), 64)
    assert model_names(("model:small@int8", "hybrid:small", "prompt-lookup", "model:small")) == ["small@int8", "small"]


@pytest.mark.parametrize("item", ["layer-skip", "model", "prompt-lookup:small", "model:", "nope"])
def test_an_unknown_drafter_item_is_one_error_naming_the_choices(item):
    with pytest.raises(LayersearchError, match=r"^drafters: unknown item .* \(choose from prompt-lookup, hybrid, model:MODEL, hybrid:MODEL\)"):
        parse_drafters(item)


def test_a_draft_model_option_takes_the_same_quantization_suffix(tmp_path):
    assert draft_model_item("small@int8") == (ModelRef("small"), "int8")
    with pytest.raises(LayersearchError, match="unknown precision 'int4' in 'small@int4'"):  # a precision we lack
        draft_model_item("small@int4")
    assert draft_model_item("small@v2") == (ModelRef("small@v2"), None)  # no precision: part of the name
    folder = tmp_path / "draft@int8"
    folder.mkdir()
    assert draft_model_item(str(folder)) == (ModelRef(str(folder), True), None)  # an existing path is taken whole


