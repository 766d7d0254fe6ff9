"""DecoderSpec: the JSON round trip, relative paths, strict validation, and the registries it checks names against."""

from __future__ import annotations

import json
import os

import pytest

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.decoder.spec import (DecoderSpec, DrafterSpec, LookaheadSpec, MaskSourceSpec, ModelRef, ModelSpec,
                              SamplingSpec, registry_names)

INFO = ModelInfo("tiny", 4, 64, "abcd")


def full_spec(folder) -> DecoderSpec:
    """A spec with every section away from its default and files under ``folder``."""
    return DecoderSpec(
        model=ModelSpec(ModelRef(str(folder / "model"), True), INFO, "cpu", "float32"),
        drafter=DrafterSpec("hybrid"),
        mask_source=MaskSourceSpec("mask", mask=SkipMask(4, (1,), (2, 3), INFO), file=str(folder / "m.json")),
        steering=str(folder / "sub" / "steer.safetensors"),
        lookahead=LookaheadSpec("disco", 5, 0.5, str(folder / "disco.json")),
        verifier="tree",
        sampling=SamplingSpec(True, 0.7, 0.9, 3),
        profile=str(folder / "profile.json"),
        max_new_tokens=12,
    )


def test_json_round_trip_and_relative_paths(tmp_path):
    spec = full_spec(tmp_path)
    assert DecoderSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    path = tmp_path / "deploy" / "spec.json"
    path.parent.mkdir()
    spec.save(path)
    data = json.loads(path.read_text())
    assert data["kind"] == "layersearch-decoder-spec" and data["format"] == 1
    assert data["steering"] == str(tmp_path / "sub" / "steer.safetensors")  # outside the spec's folder: absolute
    assert data["model"]["ref"] == str(tmp_path / "model") and data["mask_source"]["mask"]["mlp"] == [2, 3]
    assert DecoderSpec.load(path) == spec
    inside = tmp_path / "spec.json"  # beside the files: relative, so the folder moves as a whole
    spec.save(inside)
    data = json.loads(inside.read_text())
    assert data["steering"] == os.path.join("sub", "steer.safetensors") and data["model"]["ref"] == "model"
    assert DecoderSpec.load(inside) == spec  # resolved from the spec's folder, wherever we run


def test_a_hub_id_is_not_a_path(tmp_path):
    spec = DecoderSpec(ModelSpec(ModelRef("org/model")), drafter=DrafterSpec(model=ModelRef("smollm2-135m")))
    spec.save(tmp_path / "s.json")
    loaded = DecoderSpec.load(tmp_path / "s.json")
    assert loaded.model.ref == ModelRef("org/model") and loaded.drafter.model == ModelRef("smollm2-135m")


def test_registries_give_the_names():
    names = registry_names()
    assert names["drafter"] == ("layer-skip", "prompt-lookup", "hybrid")
    assert names["lookahead"] == ("static", "confidence", "adaptive", "heuristic", "roc")
    assert names["verifier"] == ("chain", "tree")
    assert names["dynamic"] == ("knapsack",) and names["on_the_fly"] == ("swift",)


def test_check_model_words_it_like_a_mask():
    spec = DecoderSpec(ModelSpec(ModelRef("tiny"), INFO))
    spec.check_model(INFO)
    spec.check_model(ModelInfo("renamed", 4, 64, "abcd"))  # the name is informational
    with pytest.raises(LayersearchError, match=r"spec was made for model 'tiny' \(fingerprint abcd\), not 'other'"):
        spec.check_model(ModelInfo("other", 4, 64, "ffff"))


def _edited(tmp_path, edit):
    data = full_spec(tmp_path).to_dict()
    edit(data)
    return data


@pytest.mark.parametrize("edit, says", [
    (lambda d: d["drafter"].update(name="oracle"), "unknown drafter 'oracle'"),
    (lambda d: d["lookahead"].update(name="sometimes"), "unknown lookahead 'sometimes'"),
    (lambda d: d.update(verifier="forest"), "unknown verification 'forest'"),
    (lambda d: d["mask_source"].update(kind="astrology"), "unknown mask source 'astrology'"),
    (lambda d: d["mask_source"].update(skip_ratio=0.5), "mask source 'mask' takes no skip_ratio"),
    (lambda d: d["mask_source"].pop("mask"), "mask source 'mask' needs mask"),
    (lambda d: d["mask_source"]["mask"].update(mlp=[9]), "mask_source.mask"),
    (lambda d: d.update(format=2), "unsupported spec format 2"),
    (lambda d: d.update(extra=1), "unknown field 'extra'"),
    (lambda d: d.pop("sampling"), "missing sampling"),
    (lambda d: d["sampling"].update(temperature=0), "temperature > 0"),
    (lambda d: d["sampling"].update(top_p=0), "top-p"),
    (lambda d: d["sampling"].update(seed=-1), "sampling.seed"),
    (lambda d: d["lookahead"].update(max_draft=0), "lookahead.max_draft"),
    (lambda d: d["lookahead"].update(file=None), "lookahead 'disco' needs a file"),
    (lambda d: d.update(max_new_tokens="64"), "max new tokens"),
    (lambda d: d.update(plain="no"), "plain must be true or false"),
    (lambda d: d["model"].update(info={"name": "x"}), "model.info: missing"),
    (lambda d: d["drafter"].update(name="prompt-lookup", vocab=0, model={"ref": "small", "path": False}), "takes no draft model"),
    (lambda d: d["drafter"].update(model={"ref": "small", "path": False}), "takes no mask source"),
])
def test_bad_fields_are_named(tmp_path, edit, says):
    with pytest.raises(LayersearchError, match=says.replace("(", r"\(").replace(")", r"\)")):
        DecoderSpec.from_dict(_edited(tmp_path, edit))


def test_other_files_are_named_for_what_they_are(tmp_path):
    with pytest.raises(LayersearchError, match="this is a mask file, not a decoder spec"):
        DecoderSpec.from_dict(SkipMask(4, (1,)).to_dict())
    with pytest.raises(LayersearchError, match="not a decoder spec"):
        DecoderSpec.from_dict([1, 2])
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(full_spec(tmp_path).to_dict())[:-40])
    with pytest.raises(LayersearchError, match=str(path)):
        DecoderSpec.load(path)


def test_the_spec_is_immutable(tmp_path):
    spec = full_spec(tmp_path)
    with pytest.raises(AttributeError):
        spec.verifier = "chain"
    swift = MaskSourceSpec("swift", swift={"window": 8})
    with pytest.raises(TypeError):
        swift.swift["window"] = 9
