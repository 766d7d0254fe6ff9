"""A tune space restricted to what vLLM serves: every spec it suggests, every starting point,
exports (``vllm_draft`` accepts it), and a study is never resumed with the other space."""

from __future__ import annotations

import optuna
import pytest

from layersearch.common.errors import LayersearchError
from layersearch.common.modelfile import ModelInfo
from layersearch.decoder.spec import ModelRef, ModelSpec
from layersearch.integrations.vllm_export import vllm_draft
from layersearch.masks.mask import SkipMask
from layersearch.tune.pool import Candidate
from layersearch.tune.space import PLAIN, Space, kind_of, starting_points, suggest_spec

LAYERS = 4
INFO = ModelInfo("tiny", LAYERS, 64, "x")


def _pool() -> tuple[Candidate, ...]:
    """Plans of every kind a pool holds: single sub-layers skipped, whole layers, int8 and int4 parts."""
    plans = {
        "partial": SkipMask(LAYERS, attention=(1,), mlp=(2,), model=INFO),
        "whole layers": SkipMask(LAYERS, attention=(1, 2), mlp=(1, 2), model=INFO),
        "int8": SkipMask(LAYERS, attention=(1,), mlp=(1,), model=INFO).kept_in_int8(),
        "int4": SkipMask(LAYERS, attention=(1,), mlp=(1,), model=INFO).kept_in_int4(),
    }
    return tuple(Candidate(label, mask.with_provenance(label=label), 0.5, 1.5, 1.2) for label, mask in plans.items())


def _space(for_vllm: bool, architecture: str | None = "LlamaForCausalLM") -> Space:
    # a vocabulary of 100k: the reduced heads (8192, 32768) are in the whole space
    return Space(ModelSpec(ModelRef("tiny"), INFO), _pool(), ModelRef("small"), 100_000, 10, ("none", "int8"),
                 for_vllm=for_vllm, architecture=architecture)


def _sampled(space: Space, trials: int = 400) -> list:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    specs = []
    for _ in range(trials):
        trial = study.ask()
        specs.append(suggest_spec(trial, space))
        study.tell(trial, 1.0)
    return specs


def test_the_vllm_space_suggests_only_what_vllm_serves():
    specs = _sampled(_space(True))
    for spec in specs:
        if not spec.plain:
            vllm_draft(spec, LAYERS)  # raises for anything vLLM cannot serve
    kinds = {kind_of(spec) for spec in specs}
    assert kinds == {PLAIN, "layer-skip", "prompt-lookup", "model"}  # the draft model as layer skip's (vLLM draft_model)
    assert {s.drafter.quant for s in specs if s.drafter.model is not None} == {None, "int8"}
    plans = {s.mask_source.mask.provenance["label"] for s in specs if s.mask_source.kind == "mask"}
    assert plans == {"partial", "whole layers", "int8"}  # int4 parts: no vLLM draft folder holds them
    # the whole space suggests what vLLM refuses (hybrid, trees, reduced heads, adaptive rules, int4)
    refused = 0
    for spec in _sampled(_space(False), 100):
        try:
            vllm_draft(spec, LAYERS) if not spec.plain else None
        except LayersearchError:
            refused += 1
    assert refused > 50


@pytest.mark.parametrize("architecture", ["GPT2LMHeadModel", None])
def test_single_sub_layers_are_skipped_only_where_the_vllm_plugin_runs_them(architecture):
    space = _space(True, architecture)
    assert [c.label for c in space.plans] == ["whole layers", "int8"]  # both skip whole layers
    assert [c.label for c in _space(True, "Qwen2ForCausalLM").plans] == ["partial", "whole layers", "int8"]


def test_every_starting_point_of_the_vllm_space_is_in_it_and_exports():
    """Each point is enqueued as it is (every parameter one the space asks, in its choices) and exports."""
    space = _space(True)
    points = starting_points(space)
    assert {p["drafter"] for p in points} == {"layer-skip", "prompt-lookup", "model"}
    assert {p["mask"] for p in points if "mask" in p} == {"partial", "whole layers", "int8"}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for params in points:
        study.enqueue_trial(params)
    for params in points:
        trial = study.ask()
        spec = suggest_spec(trial, space)
        assert trial.params == params  # no parameter left unasked, none outside its choices
        vllm_draft(spec, LAYERS)
        study.tell(trial, 1.0)


def _study(recorded):
    from layersearch.tune.study import IDENTITY_ATTR, SPACE_ATTR

    study = optuna.create_study()
    study.set_user_attr(IDENTITY_ATTR, {})
    if recorded is not None:
        study.set_user_attr(SPACE_ATTR, recorded)
    return study


@pytest.mark.parametrize("made_for_vllm, resumed_for_vllm", [(False, True), (True, False), (None, True)])
def test_a_study_is_never_resumed_with_the_other_space(made_for_vllm, resumed_for_vllm):
    """Their Optuna distributions differ: refused (None: a study made before the choices were recorded)."""
    from layersearch.tune.space import space_choices
    from layersearch.tune.study import study_choices

    recorded = None if made_for_vllm is None else {**space_choices(), "vllm": made_for_vllm}
    with pytest.raises(LayersearchError, match="searches (every configuration, not only what vLLM serves|"
                                               "only what vLLM serves, not every configuration)"):
        study_choices(_study(recorded), False, resumed_for_vllm)
    assert study_choices(_study(recorded), False, not resumed_for_vllm)["vllm"] is (not resumed_for_vllm)


def test_a_new_study_records_its_restriction():
    from layersearch.tune.study import SPACE_ATTR, study_choices

    study = optuna.create_study()
    assert study_choices(study, True, True)["vllm"] is True
    assert study.user_attrs[SPACE_ATTR]["vllm"] is True
    assert study_choices(study, False, True)["vllm"] is True  # resumed as it was made
