"""The runtime's registries are the only lists of names: a drafter and a lookahead rule added
there (a module plus one registry line) show up in generate's choices, in bench, in tune's
search space and in a spec's round trip, and decode exactly like plain generate."""

from __future__ import annotations

import optuna
import pytest
import torch

from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.runtime.drafting import DraftPolicy

TOY_DRAFTER = "toy-skip"
TOY_RULE = "toy-static"


def _toy_drafter(branching=None, head=None, quant=None):
    """The layer-skip drafter under another name: a registered drafter the code never named
    (``quant``: the registry's newer factory argument, unused here)."""
    from layersearch.runtime.drafters import LayerSkipDrafter

    return LayerSkipDrafter(branching, head=head)


def _toy_rule(max_tokens, threshold):
    """A fixed draft length under another name."""
    from layersearch.runtime.lookahead import StaticLookahead

    return StaticLookahead(max_tokens)


@pytest.fixture
def toys(monkeypatch):
    """Register the toy drafter and rule for one test (the registries are restored after it)."""
    from layersearch import runtime
    from layersearch.runtime import drafters

    monkeypatch.setitem(drafters.DRAFTERS, TOY_DRAFTER, _toy_drafter)
    monkeypatch.setitem(runtime.LOOKAHEADS, TOY_RULE, _toy_rule)
    return TOY_DRAFTER, TOY_RULE


def _command(parser, command: str):
    return next(a for a in parser._actions if isinstance(getattr(a, "choices", None), dict)).choices[command]


def test_generate_offers_registered_names(toys):
    from layersearch.cli import build_parser

    generate = _command(build_parser(), "generate")
    drafter = next(a for a in generate._actions if "--drafter" in a.option_strings)
    lookahead = next(a for a in generate._actions if "--lookahead" in a.option_strings)
    assert TOY_DRAFTER in drafter.choices
    assert TOY_RULE in lookahead.metavar.strip("{}").split(",")  # a rule or disco:FILE: checked by the spec
    from layersearch.commands.generate_options import spec_from_options

    args = build_parser().parse_args(["generate", "--drafter", TOY_DRAFTER, "--lookahead", TOY_RULE, "--prompt", "hi",
                                      "--mask", "uniform:0.5"])
    spec = spec_from_options(args, {})
    assert (spec.drafter.name, spec.lookahead.name) == (TOY_DRAFTER, TOY_RULE)
    bench_help = _command(build_parser(), "bench").format_help()
    assert TOY_DRAFTER in bench_help and TOY_RULE in bench_help


def test_bench_runs_registered_names_like_plain_generate(toys, tiny_llama):
    from layersearch.evaluation.bench import PLAIN, BenchSettings, configs, run_domain, summarize

    BenchSettings("tiny", "out.json", drafters=(TOY_DRAFTER,), lookaheads=(TOY_RULE, "confidence"))  # the items check
    masks = [SkipMask.none(4), SkipMask.uniform(4, 0.5).with_provenance(label="uniform 0.5")]
    cfgs = configs(tiny_llama, masks, DraftPolicy(3, 0.0), peers=False, drafters=(TOY_DRAFTER,), lookaheads=(TOY_RULE,))
    names = [c.name for c in cfgs]
    assert names == [PLAIN, "ours: nothing skipped", f"ours: uniform 0.5 [{TOY_RULE}]", f"ours: {TOY_DRAFTER} (uniform 0.5)"]
    measured = run_domain(cfgs, [torch.tensor([[5, 9, 11, 5, 9, 11, 5]])], 12, 1, lambda message: None)
    for name in names:
        assert summarize(name, measured[name], None, 10, None)["identical_to_plain"] is True, name
    assert measured[names[2]].stats[0].drafted > 0  # the toy rule's rows really drafted


def test_bench_refuses_an_unregistered_name_in_one_line():
    from layersearch.evaluation.bench import BenchSettings
    from layersearch.common.errors import LayersearchError

    with pytest.raises(LayersearchError, match=f"^drafters: unknown item '{TOY_DRAFTER}'"):
        BenchSettings("tiny", "out.json", drafters=(TOY_DRAFTER,))
    with pytest.raises(LayersearchError, match=f"^lookaheads: unknown rule '{TOY_RULE}'"):
        BenchSettings("tiny", "out.json", lookaheads=(TOY_RULE,))


def _space(**choices):
    from layersearch.decoder.spec import ModelRef, ModelSpec
    from layersearch.tune.pool import Candidate
    from layersearch.tune.space import Space

    info = ModelInfo("tiny", 4, 64, "x")
    pool = (Candidate("uniform 0.5", SkipMask.uniform(4, 0.5, info), 0.5, 1.5, 1.1),)
    return Space(ModelSpec(ModelRef("tiny"), info), pool, None, 128, 10, **choices)


def test_tune_space_searches_registered_names(toys):
    from layersearch.decoder.spec import DecoderSpec
    from layersearch.tune.space import space_choices, suggest_spec

    space = _space()
    assert TOY_DRAFTER in space.drafters and TOY_RULE in space.rules
    assert TOY_DRAFTER in space_choices()["drafters"] and TOY_RULE in space_choices()["lookaheads"]
    params = {"drafter": TOY_DRAFTER, "mask": "uniform 0.5", "lookahead": TOY_RULE, "max_draft": 3, "threshold": 0.5}
    spec = suggest_spec(optuna.trial.FixedTrial(params), space)
    assert (spec.drafter.name, spec.lookahead.name, spec.lookahead.max_draft) == (TOY_DRAFTER, TOY_RULE, 3)
    assert DecoderSpec.from_dict(spec.to_dict()) == spec


def test_spec_with_registered_names_round_trips_and_decodes_like_plain(toys, tiny_llama, tmp_path):
    from layersearch.decoder.build import assemble
    from layersearch.runtime.baseline import hf_generate
    from layersearch.decoder.spec import DecoderSpec, DrafterSpec, LookaheadSpec, ModelRef, ModelSpec
    from layersearch.decoder.fragments import mask_source

    mask = SkipMask.uniform(4, 0.5)
    spec = DecoderSpec(ModelSpec(ModelRef("tiny")), drafter=DrafterSpec(TOY_DRAFTER), mask_source=mask_source(mask),
                       lookahead=LookaheadSpec(TOY_RULE, 3))
    assert DecoderSpec.load(spec.save(tmp_path / "toy.json")) == spec
    ids = torch.tensor([[5, 9, 11, 5, 9, 11, 5]])
    result = assemble(tiny_llama, spec).generate(ids, 12)
    assert list(result.token_ids) == list(hf_generate(tiny_llama, ids, 12).token_ids)
    assert result.stats.drafted > 0


def test_a_resumed_study_keeps_its_recorded_choices(toys, tmp_path):
    """A study records the registries' names when made; one made before that (version 1) keeps
    version 1's, so its Optuna distributions do not change when it resumes."""
    from layersearch.tune.space import V1_CHOICES
    from layersearch.tune.study import IDENTITY_ATTR, study_choices

    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    old = optuna.create_study(study_name="old", storage=storage)
    old.set_user_attr(IDENTITY_ATTR, {"prompts": "p"})  # what a version-1 study holds: no recorded choices
    assert study_choices(old, fresh=False)["lookaheads"] == V1_CHOICES["lookaheads"]
    assert "roc" not in _space(self_drafters=V1_CHOICES["drafters"], rules=V1_CHOICES["lookaheads"]).rules
    new = optuna.create_study(study_name="new", storage=storage)
    made = study_choices(new, fresh=True)
    assert TOY_RULE in made["lookaheads"] and "roc" in made["lookaheads"] and TOY_DRAFTER in made["drafters"]
    assert study_choices(optuna.load_study(study_name="new", storage=storage), fresh=False) == made  # resumed: the same


def test_a_study_searching_a_name_no_longer_registered_is_one_error(tmp_path):
    from layersearch.common.errors import LayersearchError
    from layersearch.tune.study import SPACE_ATTR, study_choices

    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 'tune.db'}")
    study.set_user_attr(SPACE_ATTR, {"version": 2, "drafters": ["layer-skip", TOY_DRAFTER], "lookaheads": ["static"]})
    with pytest.raises(LayersearchError, match=f"drafter '{TOY_DRAFTER}', which is not registered"):
        study_choices(study, fresh=False)


def test_the_design_notes_table_lists_every_registered_name():
    """docs/design.md's "Where a new method goes" table names what each registry holds."""
    from pathlib import Path

    from layersearch.runtime import LOOKAHEADS, VERIFIERS
    from layersearch.runtime.drafters import DRAFTERS

    text = (Path(__file__).resolve().parents[1] / "docs" / "design.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| a ")}
    for row, names in (("a new source of draft tokens", DRAFTERS), ("a rule for when a draft stops", LOOKAHEADS),
                       ("a way to verify", VERIFIERS)):
        missing = [name for name in names if f"`{name}`" not in rows[row].split("|")[4]]
        assert not missing, (row, missing)
