"""DecoderSpec: the JSON round trip, relative paths, strict validation, and the registries it checks names against."""

from __future__ import annotations

import json
import os
import re

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
    (lambda d: d.update(format=2), "written by a newer layersearch (format 2; this version reads up to 1): upgrade"),
    (lambda d: d.update(format=True), "unsupported format True (expected 1)"),
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


@pytest.mark.parametrize("fields, says", [
    (dict(model=None), "model must be a ModelSpec or a model name or path, got NoneType"),
    (dict(model=3), "model must be a ModelSpec"),
    (dict(model="m", drafter=3), "drafter must be a DrafterSpec or a drafter name"),
    (dict(model="m", drafter="magic"), "drafter: unknown drafter 'magic'"),
    (dict(model="m", mask_source="x.json"), "mask_source: 'x.json' is no mask source"),
    (dict(model="m", sampling={"do_sample": True}), "sampling must be a SamplingSpec, got dict"),
    (dict(model="m", lookahead="magic"), "lookahead: unknown lookahead 'magic'"),
    (dict(model="m", lookahead=8), "lookahead must be a LookaheadSpec or a rule name"),
    (lambda: ModelSpec(None), "model.ref must be a ModelRef or a model name or path"),
    (lambda: ModelSpec("m", info="x"), "model.info must be a ModelInfo or None"),
    (lambda: DrafterSpec(model=3), "drafter.model must be a ModelRef"),
])
def test_a_spec_built_in_python_checks_its_parts(fields, says):
    """A part of the wrong type is one LayersearchError naming the field, never an AttributeError later."""
    with pytest.raises(LayersearchError, match=re.escape(says)):
        fields() if callable(fields) else DecoderSpec(**fields)


def test_a_spec_takes_the_short_forms_of_its_parts():
    """The documented short forms: a model name, a drafter or lookahead rule name, a SkipMask."""
    spec = DecoderSpec("smollm2-135m", drafter="prompt-lookup", lookahead="static")
    assert spec.model == ModelSpec(ModelRef("smollm2-135m", False))
    assert spec.drafter == DrafterSpec("prompt-lookup") and spec.lookahead == LookaheadSpec("static")
    mask = SkipMask(4, (1,))
    assert DecoderSpec("m", mask_source=mask).mask_source == MaskSourceSpec("mask", mask=mask)
    assert DecoderSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize("do_sample, temperature, says", [
    (True, 0.0, "sampling.do_sample true needs sampling.temperature > 0"),
    (False, 0.7, "sampling.temperature 0.7 samples, but sampling.do_sample is false"),
])
def test_one_sampling_rule(do_sample, temperature, says):
    """A temperature > 0 samples and 0 is greedy, in specs as in the API and the CLI: a contradiction is refused."""
    with pytest.raises(LayersearchError, match=re.escape(says)):
        SamplingSpec(do_sample, temperature)
    assert SamplingSpec(True, 0.7).temperature_used == 0.7 and SamplingSpec(False, 0.0).temperature_used == 0.0


@pytest.mark.parametrize("path", [None, 3, "spec\0.json"])
def test_spec_files_take_paths(path, tmp_path):
    with pytest.raises(LayersearchError, match="spec file"):
        DecoderSpec.load(path)
    if not isinstance(path, str):
        with pytest.raises(LayersearchError, match="spec file must be a path"):
            DecoderSpec("m").save(path)


def test_compile_is_part_of_the_spec(tmp_path):
    """``compile`` round-trips; a file without it (older specs) means auto; auto is on for CUDA only."""
    from layersearch.decoder.spec import compile_wanted

    spec = DecoderSpec(model=ModelSpec(ModelRef("smollm2-135m")), compile="on")
    assert DecoderSpec.load(spec.save(tmp_path / "s.json")).compile == "on"
    data = spec.to_dict()
    del data["compile"]
    assert DecoderSpec.from_dict(data).compile == "auto"
    with pytest.raises(LayersearchError, match="unknown compile 'yes'"):
        DecoderSpec(model=ModelSpec(ModelRef("smollm2-135m")), compile="yes")
    assert [compile_wanted("auto", d) for d in ("cuda", "cpu")] == [True, False]
    assert compile_wanted("on", "cpu") and not compile_wanted("off", "cuda")


def test_file_fields_take_a_path_as_load_decoder_does():
    """``profile``, ``steering`` and the file of a mask source or lookahead rule take a ``Path``,
    held as its str: the spec file and its reloaded spec are the same."""
    from pathlib import Path

    from layersearch.decoder.spec import DecoderSpec, LookaheadSpec, MaskSourceSpec

    spec = DecoderSpec("m", profile=Path("p.json"), steering=Path("s.safetensors"),
                       mask_source=MaskSourceSpec("router", file=Path("r.json")),
                       lookahead=LookaheadSpec("disco", file=Path("d.json")))
    assert (spec.profile, spec.steering, spec.mask_source.file, spec.lookahead.file) == (
        "p.json", "s.safetensors", "r.json", "d.json")
    assert DecoderSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


@pytest.mark.parametrize("build, says", [
    (lambda: LookaheadSpec(max_draft=4.0), "lookahead.max_draft must be an integer in [1, 64], got 4.0"),
    (lambda: LookaheadSpec(max_draft=True), "lookahead.max_draft must be an integer in [1, 64], got True"),
    (lambda: LookaheadSpec(threshold=True), "draft threshold must be in [0, 1], got True"),
    (lambda: LookaheadSpec(threshold=float("nan")), "draft threshold must be in [0, 1], got nan"),
    (lambda: LookaheadSpec(threshold="0.5"), "draft threshold must be in [0, 1], got '0.5'"),
    (lambda: SamplingSpec(True, temperature=True), "sampling.temperature must be a finite number, got True"),
    (lambda: SamplingSpec(True, temperature=float("nan")), "sampling.temperature must be a finite number, got nan"),
    (lambda: SamplingSpec(top_p=True), "sampling.top_p must be a finite number, got True"),
    (lambda: SamplingSpec(top_p="1"), "sampling.top_p must be a finite number, got '1'"),
    (lambda: SamplingSpec(seed=1.0), "sampling.seed must be an integer in [0, 4294967295], got 1.0"),
    (lambda: SamplingSpec(seed=True), "sampling.seed must be an integer in [0, 4294967295], got True"),
    (lambda: DrafterSpec(vocab=10.0), "drafter.vocab must be an integer >= 0, got 10.0"),
    (lambda: DrafterSpec(vocab=True), "drafter.vocab must be an integer >= 0, got True"),
    (lambda: MaskSourceSpec("uniform", skip_ratio=True), "mask_source.skip_ratio must be in [0, 1], got True"),
    (lambda: MaskSourceSpec("knapsack", reselect_every=2.0), "mask_source.reselect_every must be an integer >= 1, got 2.0"),
    (lambda: MaskSourceSpec("swift", swift={"seed": 1.5}), "SWIFT seed must be an integer in [0, 4294967295], got 1.5"),
    (lambda: MaskSourceSpec("swift", swift={"seed": True}), "SWIFT seed must be an integer in [0, 4294967295], got True"),
    (lambda: MaskSourceSpec("swift", swift={"kappa": float("inf")}), "SWIFT kappa must be a number >= 0, got inf"),
    (lambda: MaskSourceSpec("swift", swift={"window": 8.0}), "SWIFT window must be an integer >= 1, got 8.0"),
    (lambda: MaskSourceSpec("mask", mask=SkipMask(4, int4_mlp=(1,), int4_group_size=64.0)),
     "int4 group_size must be one of 32, 64, 128, 256, got 64.0"),
    (lambda: DecoderSpec("m", max_new_tokens=4.0), "max new tokens must be an integer >= 1, got 4.0"),
    (lambda: DecoderSpec("m", max_new_tokens=True), "max new tokens must be an integer >= 1, got True"),
])
def test_every_number_of_a_spec_is_checked_by_type(build, says):
    """A number is checked for its type, not only its value: 4.0 == 4 and True == 1 to Python, yet
    neither is a count the runtime takes (64.0 passed a membership test and failed inside torch)."""
    with pytest.raises(LayersearchError, match=re.escape(says)):
        build()


@pytest.mark.parametrize("build, says", [
    (lambda: DecoderSpec("m", max_tokens=8), "DecoderSpec() got an unexpected argument 'max_tokens' (did you mean "
                                             "'max_new_tokens'?); it takes model, plain, drafter, mask_source"),
    (lambda: LookaheadSpec("static", max_drafts=3), "LookaheadSpec() got an unexpected argument 'max_drafts'"),
    (lambda: SamplingSpec(temp=0.5), "SamplingSpec() got an unexpected argument 'temp'"),
    (lambda: DecoderSpec(), "DecoderSpec(): missing a required argument: 'model'; it takes model, plain"),
    (lambda: DecoderSpec.load("s.json", "x"), "DecoderSpec.load(): too many positional arguments; it takes path"),
    (lambda: DecoderSpec("m").save(out="s.json"), "DecoderSpec.save() got an unexpected argument 'out'; it takes path"),
])
def test_an_unknown_argument_is_a_layersearch_error_naming_the_accepted_ones(build, says):
    with pytest.raises(LayersearchError, match=re.escape(says)):
        build()


def test_a_spec_naming_only_a_model_drafts_by_prompt_lookup():
    """The documented default: prompt lookup (no mask) on CPU and CUDA; naming anything that
    brings a mask keeps the layer-skip drafter, and the spec records the drafter it chose."""
    from layersearch.decoder.spec import DEFAULT_DRAFTERS

    assert DEFAULT_DRAFTERS == {"cpu": "prompt-lookup", "cuda": "prompt-lookup"}
    for device in ("cpu", "cuda", "cuda:1"):
        spec = DecoderSpec(ModelSpec(ModelRef("m"), device=device), lookahead="static")
        assert spec.drafter == DrafterSpec("prompt-lookup") and spec.mask_source == MaskSourceSpec("none")
        assert DecoderSpec.from_dict(spec.to_dict()) == spec
    mask = SkipMask(4, (1,))
    for named in (dict(mask_source=mask), dict(mask_source=MaskSourceSpec("uniform", skip_ratio=0.2)),
                  dict(steering="s.safetensors"), dict(profile="p.json"), dict(lookahead=LookaheadSpec("disco", file="d.json")),
                  dict(drafter=DrafterSpec())):  # an explicit layer-skip drafter is named
        assert DecoderSpec("m", **named).drafter == DrafterSpec(), named
    assert DecoderSpec("m", drafter=DrafterSpec()).mask_source == MaskSourceSpec("default")
    assert DecoderSpec("m", plain=True).drafter == DrafterSpec()  # plain decoding drafts nothing


@pytest.mark.parametrize("quant", ["int8", "int4"])
@pytest.mark.parametrize("plan, parts", [
    (SkipMask(4, (1,), int8_attention=(0, 2), int8_head=True), "int8 parts (attention 0,2, the LM head)"),
    (SkipMask(4, (), int4_mlp=(3,), int4_group_size=32), "int4 parts (mlp 3)"),
])
def test_drafter_quant_with_a_plan_of_its_own_precisions_is_refused(quant, plan, parts):
    """``drafter.quant`` runs every kept sub-layer in one precision: it would silently replace a
    plan's own int8 / int4 parts, so the two together are one error naming both."""
    with pytest.raises(LayersearchError) as error:
        DecoderSpec("m", drafter=DrafterSpec(quant=quant), mask_source=plan)
    message = str(error.value)
    assert f"drafter.quant {quant}" in message and parts in message and "\n" not in message
    assert set(error.value.fields) == {"drafter.quant", "mask_source"}
    skips = DecoderSpec("m", drafter=DrafterSpec(quant=quant), mask_source=plan.skips_only())  # a skip mask: fine
    assert skips.drafter.quant == quant
