"""The tune space's specs (every drafter kind, with a draft model) decode exactly as plain
generate, and the choice falls back to plain decoding when nothing beats it."""

from __future__ import annotations

import optuna
import pytest

from layersearch.masks.mask import SkipMask
from layersearch.decoder.spec import DecoderSpec, ModelRef, ModelSpec
from layersearch.tune.pool import Candidate
from layersearch.tune.select import HeldOutRow, choose
from layersearch.tune.space import Space, kind_of, starting_points, suggest_spec


def _space(loaded, draft_ref=None, quants=("none",)):
    info = loaded.info
    mask = SkipMask.uniform(info.num_layers, 0.25, info).with_provenance(label="uniform 0.25")
    pool = (Candidate("uniform 0.25", mask, 0.5, 1.5, 1.1),)
    return Space(ModelSpec(ModelRef("verifier"), info), pool, draft_ref, 128, 10, quants)


@pytest.fixture(scope="module")
def word_models(tiny_word_models):
    from layersearch.models.loading import load_model

    verifier, drafter = tiny_word_models
    return load_model(str(verifier)), load_model(str(drafter)), str(drafter)


def test_every_starting_point_and_kind_decodes_like_plain_generate(word_models):
    """Each kind the space offers (plain, layer-skip with tree, prompt lookup, hybrid, the draft
    model and the hybrid with the draft model) builds from a FixedTrial and is lossless."""
    from layersearch.decoder.build import build_decoder
    from layersearch.runtime.baseline import hf_generate

    import copy
    from dataclasses import replace

    from layersearch.models.quantize import quantize_draft
    from layersearch.tune.objective import draft_for

    loaded, draft, draft_path = word_models
    drafts = {None: draft, "int8": replace(draft, model=quantize_draft(copy.deepcopy(draft.model)))}
    space = _space(loaded, ModelRef(draft_path, True), ("none", "int8"))
    starts = starting_points(space)
    assert all(p["drafter"] != "plain" for p in starts)  # every trial measures plain beside its candidate already
    points = starts + [{"drafter": "layer-skip", "mask": "uniform 0.25", "lookahead": "static", "max_draft": 3,
                        "verifier": "tree"}, {"drafter": "plain"}]
    assert {p["drafter"] for p in points} == set(space.drafters)
    assert any(p.get("draft_quant") == "int8" for p in points)  # the cheap int8 drafts are measured first
    prompt = [[5, 9, 5, 9, 5, 9, 5, 7, 3]]
    import torch

    ids = torch.tensor(prompt)
    plain = list(hf_generate(loaded.model, ids, 10).token_ids)
    for params in points:
        spec = suggest_spec(optuna.trial.FixedTrial(params), space)
        assert kind_of(spec) == params["drafter"]
        assert DecoderSpec.from_dict(spec.to_dict()) == spec  # what the trial records parses back
        built = build_decoder(loaded, spec, draft=draft_for(drafts, spec))
        assert list(built.run(ids, 10).token_ids) == plain, params


def test_a_preloaded_draft_must_match_the_specs_quantization(word_models):
    from layersearch.decoder.build import build_decoder
    from layersearch.common.errors import LayersearchError

    loaded, draft, draft_path = word_models
    spec = suggest_spec(optuna.trial.FixedTrial({"drafter": "model", "lookahead": "static", "max_draft": 3, "draft_quant": "int8"}),
                        _space(loaded, ModelRef(draft_path, True), ("none", "int8")))
    assert spec.drafter.quant == "int8"
    with pytest.raises(LayersearchError, match="not quantized"):
        build_decoder(loaded, spec, draft=draft)


def test_space_without_masks_or_draft_model_offers_only_what_can_run(word_models):
    loaded, _, _ = word_models
    space = Space(_space(loaded).model, (), None, 128, 10)
    assert space.drafters == ("plain", "prompt-lookup")
    assert space.vocabs == (0,)  # 8192 and 32768 are not below a vocabulary of 128


def _row(label, speedup, identical=True, spec=None):
    return HeldOutRow(label, speedup, speedup, 2.0, 0.5, identical, {}, spec, 1.2)


def test_nothing_faster_than_plain_chooses_plain():
    plain = DecoderSpec(model=ModelSpec(ModelRef("m")), plain=True)
    other = DecoderSpec(model=ModelSpec(ModelRef("m")))
    rows = [_row("plain generate", 1.0), _row("hf prompt-lookup (10)", 1.3), _row("trial 3", 0.97, spec=other)]
    chosen = choose(rows, plain)
    assert chosen.plain_chosen and chosen.spec == plain and chosen.winner == "plain generate"


def test_the_fastest_identical_finalist_wins():
    plain = DecoderSpec(model=ModelSpec(ModelRef("m")), plain=True)
    a, b = DecoderSpec(model=ModelSpec(ModelRef("a"))), DecoderSpec(model=ModelSpec(ModelRef("b")))
    rows = [_row("plain generate", 1.0), _row("trial 1", 1.4, spec=a), _row("trial 2", 2.0, identical=False, spec=b)]
    chosen = choose(rows, plain)
    assert not chosen.plain_chosen and chosen.winner == "trial 1" and chosen.spec == a


def test_plain_label_is_the_benchmarks():
    from layersearch.evaluation.bench import PLAIN
    from layersearch.tune.select import PLAIN_LABEL

    assert PLAIN_LABEL == PLAIN


def test_the_cheap_draft_length_follows_the_verification_curve():
    from types import SimpleNamespace

    from layersearch.tune.run import cheap_draft

    steps = [1.0, 0.99, 1.0, 1.02, 1.48, 1.48, 1.49, 1.48, 1.95]  # numba on the 1.5B: a step every 4 tokens
    profile = SimpleNamespace(verify_ratio=lambda k: steps[min(k, len(steps)) - 1])
    assert cheap_draft(profile) == 3  # 3 drafted + 1 verified = 4 tokens, before the step
    assert cheap_draft(SimpleNamespace(verify_ratio=lambda k: 1.0)) == 16  # a GPU-like flat curve
    assert cheap_draft(None) == 4


def test_starting_points_take_the_pools_masks_in_the_profiles_order(word_models):
    """Every mask of the pool is a starting point, best predicted first, the mixing drafter
    (prompt lookup, else the mask) before the plain layer-skip draft; prompt lookup first of all,
    at transformers' length."""
    from layersearch.tune.space import LOOKUP_DRAFT

    from dataclasses import replace

    loaded, _, _ = word_models
    space = _space(loaded, None, ("none",))
    info = loaded.info
    second = Candidate("uniform 0.5", SkipMask.uniform(info.num_layers, 0.5, info).with_provenance(label="uniform 0.5"),
                       0.3, 1.8, 1.05)
    space = replace(space, masks=(*space.masks, second))  # the pool's order: best predicted first
    starts = starting_points(space)
    assert starts[0] == {"drafter": "prompt-lookup", "lookahead": "static", "max_draft": LOOKUP_DRAFT}
    planned = [(p["mask"], p["drafter"]) for p in starts if "mask" in p]
    assert planned == [(c.label, kind) for c in space.masks for kind in ("hybrid", "layer-skip")]
