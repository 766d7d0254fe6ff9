"""The runtime's registries are the only lists of names: a drafter and a lookahead rule added
there (a module plus one registry entry) show up in generate's choices, in bench, in tune's
search space and in a spec's round trip, and decode exactly like plain generate.

The toy drafters are new kinds, not renamed ones: one drafts from the text alone (it runs no
model), one drafts only with a draft model of its own. Each says what it needs in its entry;
no other file names them."""

from __future__ import annotations

import ast
from pathlib import Path

import optuna
import pytest
import torch

from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.runtime.draft_policy import DraftPolicy
from layersearch.runtime.step import Drafter

TOY_TEXT = "toy-repeat"  # drafts the newest token again: runs no model
TOY_MODEL = "toy-greedy"  # drafts greedily with its own draft model, re-reading the sequence each token
TOY_RULE = "toy-static"
PROMPT = [[5, 9, 11, 5, 9, 11, 5]]


class RepeatDrafter(Drafter):
    """Proposes the newest token twice (greedy only): a drafter that reads the text alone."""

    name = TOY_TEXT

    def begin(self, prompt):
        """Nothing to reset."""

    def propose(self, request):
        """The newest token, twice (room allowing)."""
        from layersearch.runtime.drafters import Proposal

        if not request.sampling.greedy or request.limit <= 0:
            return Proposal.empty(self.name)
        return Proposal((request.last_token,) * min(2, request.limit), None, self.name)

    def observe(self, outcome):
        """Nothing to learn."""


class GreedyModelDrafter(RepeatDrafter):
    """Drafts with ``model`` greedily, one full forward of the sequence per token (no cache)."""

    name = TOY_MODEL

    def __init__(self, model):
        self.model = model

    def propose(self, request):
        """Up to three argmax tokens of the draft model."""
        from layersearch.runtime.drafters import Proposal

        if not request.sampling.greedy or request.limit <= 0:
            return Proposal.empty(self.name)
        ids = request.sequence.tolist()
        tokens = []
        with torch.inference_mode():
            for _ in range(min(3, request.limit)):
                tokens.append(int(self.model(torch.tensor([ids + tokens])).logits[0, -1].argmax()))
        return Proposal(tuple(tokens), None, self.name, forwards=len(tokens))


def _toy_rule(settings):
    """A fixed draft length under another name."""
    from layersearch.runtime.lookahead import StaticLookahead

    return StaticLookahead(settings.max_draft)


@pytest.fixture
def toys(monkeypatch):
    """Register the toy drafters and rule for one test (the registries are restored after it)."""
    from layersearch import runtime
    from layersearch.runtime import drafters

    monkeypatch.setitem(drafters.DRAFTERS, TOY_TEXT, drafters.DrafterEntry(lambda parts: RepeatDrafter(),
                                                                           words="the newest token again"))
    monkeypatch.setitem(drafters.DRAFTERS, TOY_MODEL, drafters.DrafterEntry(
        lambda parts: GreedyModelDrafter(parts.draft_model), takes_draft_model=True, needs_draft_model=True))
    monkeypatch.setitem(runtime.LOOKAHEADS, TOY_RULE, _toy_rule)
    return TOY_TEXT, TOY_MODEL, TOY_RULE


@pytest.fixture(scope="module")
def own_draft():
    """A 1-layer random Llama with the tiny models' vocabulary: the toy's own draft model."""
    from layersearch.models.tiny import build_tiny_model

    model = build_tiny_model("llama", num_layers=1, seed=5)
    model.generation_config.eos_token_id = None
    return model


def _command(parser, command: str):
    return next(a for a in parser._actions if isinstance(getattr(a, "choices", None), dict)).choices[command]


def test_generate_offers_registered_names(toys):
    from layersearch.cli import build_parser
    from layersearch.common.errors import LayersearchError
    from layersearch.commands.generate_options import spec_from_options

    generate = _command(build_parser(), "generate")
    drafter = next(a for a in generate._actions if "--drafter" in a.option_strings)
    lookahead = next(a for a in generate._actions if "--lookahead" in a.option_strings)
    assert {TOY_TEXT, TOY_MODEL} <= set(drafter.choices)
    assert TOY_RULE in lookahead.metavar.strip("{}").split(",")  # a rule or disco:FILE: checked by the spec

    def spec(*extra):
        return spec_from_options(build_parser().parse_args(["generate", "--prompt", "hi", *extra]), {})

    made = spec("--drafter", TOY_TEXT, "--lookahead", TOY_RULE)
    assert (made.drafter.name, made.lookahead.name) == (TOY_TEXT, TOY_RULE)
    made = spec("--drafter", TOY_MODEL, "--draft-model", "small")
    assert (made.drafter.name, made.drafter.model.ref) == (TOY_MODEL, "small")
    # what each declares it takes decides the refusals, worded as the options
    for extra, says in ((("--drafter", TOY_TEXT, "--draft-vocab", "8"), f"--drafter {TOY_TEXT} runs no model"),
                        (("--drafter", TOY_TEXT, "--draft-quant", "int8"), f"--drafter {TOY_TEXT} runs none"),
                        (("--drafter", TOY_TEXT, "--draft-model", "small"), f"no --drafter {TOY_TEXT}"),
                        (("--drafter", TOY_MODEL), f"--drafter {TOY_MODEL} drafts with a draft model")):
        with pytest.raises(LayersearchError, match=says):
            spec(*extra)


def test_bench_offers_and_runs_registered_drafters_like_plain_generate(toys, tiny_llama, own_draft):
    from layersearch.cli import build_parser
    from layersearch.evaluation.bench import PLAIN, BenchSettings, configs, run_domain, summarize

    bench_help = " ".join(_command(build_parser(), "bench").format_help().split())
    assert TOY_TEXT in bench_help and f"{TOY_MODEL}:MODEL" in bench_help and TOY_RULE in bench_help
    assert TOY_TEXT in BenchSettings("tiny", "out.json").drafters  # run by default: it needs no model
    items = (TOY_TEXT, f"{TOY_MODEL}:small")
    BenchSettings("tiny", "out.json", drafters=items, lookaheads=(TOY_RULE, "confidence"))  # the items check
    masks = [SkipMask.none(4), SkipMask.uniform(4, 0.5).with_provenance(label="uniform 0.5")]
    cfgs = configs(tiny_llama, masks, DraftPolicy(3, 0.0), peers=False, drafters=items, lookaheads=(TOY_RULE,),
                   draft_models={"small": own_draft})
    names = [c.name for c in cfgs]
    assert names == [PLAIN, "ours: nothing skipped", f"ours: uniform 0.5 [{TOY_RULE}]", f"ours: {TOY_TEXT} (<=4)",
                     f"ours: {TOY_MODEL} (small) [{TOY_RULE}]"]
    measured = run_domain(cfgs, [torch.tensor(PROMPT)], 12, 1, lambda message: None)
    for name in names:
        assert summarize(name, measured[name], None, 10, None)["identical_to_plain"] is True, name
    for name in names[2:]:
        assert measured[name].stats[0].drafted > 0, name  # the toys' rows really drafted


def test_bench_refuses_an_unregistered_name_in_one_line():
    from layersearch.evaluation.bench import BenchSettings
    from layersearch.common.errors import LayersearchError

    with pytest.raises(LayersearchError, match=f"^drafters: unknown item '{TOY_TEXT}'"):
        BenchSettings("tiny", "out.json", drafters=(TOY_TEXT,))
    with pytest.raises(LayersearchError, match=f"^lookaheads: unknown rule '{TOY_RULE}'"):
        BenchSettings("tiny", "out.json", lookaheads=(TOY_RULE,))


def _space(draft_model=None, **choices):
    from layersearch.decoder.spec import ModelRef, ModelSpec
    from layersearch.tune.pool import Candidate
    from layersearch.tune.space import Space

    info = ModelInfo("tiny", 4, 64, "x")
    pool = (Candidate("uniform 0.5", SkipMask.uniform(4, 0.5, info), 0.5, 1.5, 1.1),)
    return Space(ModelSpec(ModelRef("tiny"), info), pool, draft_model, 128, 10, **choices)


def test_tune_space_searches_registered_names(toys):
    from layersearch.decoder.spec import DecoderSpec, ModelRef
    from layersearch.tune.space import kind_of, space_choices, starting_points, suggest_spec

    assert TOY_MODEL not in _space().drafters  # no draft model: the toy that needs one is not offered
    space = _space(ModelRef("small"))
    assert {TOY_TEXT, TOY_MODEL} <= set(space.drafters) and TOY_RULE in space.rules
    assert {TOY_TEXT, TOY_MODEL} <= set(space_choices()["drafters"]) and TOY_RULE in space_choices()["lookaheads"]
    points = starting_points(space)
    # each toy is measured before the search; plain decoding is every trial's reference, never a candidate
    assert {p["drafter"] for p in points} == set(space.drafters) - {"plain"}
    for params in [*points, {"drafter": TOY_TEXT, "lookahead": TOY_RULE, "max_draft": 3, "threshold": 0.5}]:
        spec = suggest_spec(optuna.trial.FixedTrial(params), space)
        assert kind_of(spec) == params["drafter"] and DecoderSpec.from_dict(spec.to_dict()) == spec
    by_kind = {p["drafter"]: suggest_spec(optuna.trial.FixedTrial(p), space) for p in points}
    assert by_kind[TOY_TEXT].mask_source.kind == "none" and by_kind[TOY_TEXT].drafter.model is None
    assert by_kind[TOY_MODEL].drafter.model == ModelRef("small") and by_kind[TOY_MODEL].drafter.vocab == 0


def test_tune_report_words_come_from_the_entry(toys):
    from layersearch.decoder.spec import DecoderSpec, DrafterSpec, ModelRef, ModelSpec
    from layersearch.tune.report import describe

    model = ModelSpec(ModelRef("tiny"))
    assert describe(DecoderSpec(model, drafter=DrafterSpec(TOY_TEXT))).startswith("drafts from the newest token again;")
    assert describe(DecoderSpec(model, drafter=DrafterSpec(TOY_MODEL, ModelRef("small")))).startswith(
        "drafts from draft model small;")


def test_specs_with_registered_names_round_trip_and_decode_like_plain(toys, tiny_llama, own_draft, tmp_path):
    from layersearch.common.errors import LayersearchError
    from layersearch.decoder.build import assemble
    from layersearch.decoder.fragments import mask_source
    from layersearch.decoder.spec import DecoderSpec, DrafterSpec, LookaheadSpec, ModelRef, ModelSpec
    from layersearch.runtime.baseline import hf_generate

    model = ModelSpec(ModelRef("tiny"))
    ids = torch.tensor(PROMPT)
    plain = list(hf_generate(tiny_llama, ids, 12).token_ids)
    for name, drafter, draft in ((TOY_TEXT, DrafterSpec(TOY_TEXT), None),
                                 (TOY_MODEL, DrafterSpec(TOY_MODEL, ModelRef("small")), own_draft)):
        spec = DecoderSpec(model, drafter=drafter, mask_source=mask_source(None), lookahead=LookaheadSpec(TOY_RULE, 3))
        assert DecoderSpec.load(spec.save(tmp_path / f"{name}.json")) == spec
        result = assemble(tiny_llama, spec, draft=draft).generate(ids, 12)
        assert list(result.token_ids) == plain and result.stats.drafted > 0, name
    for drafter, says in ((dict(name=TOY_TEXT, vocab=8), "runs no model head"),
                          (dict(name=TOY_TEXT, quant="int8"), "nothing to quantize"),
                          (dict(name=TOY_TEXT, model=ModelRef("small")), "takes no draft model"),
                          (dict(name=TOY_MODEL), "drafter.model names none")):
        with pytest.raises(LayersearchError, match=says):
            DrafterSpec(**drafter)


def test_no_module_outside_the_registry_tests_a_drafter_name():
    """A condition on a drafter's name (``name == "prompt-lookup"``, ``kind in (...)``) outside the
    registry would make a new drafter touch that module too: they read the entries instead."""
    from layersearch.runtime.drafters import DRAFTERS

    package = Path(__file__).resolve().parents[1] / "layersearch"
    found = []
    for path in package.rglob("*.py"):
        if "runtime/drafters" in path.as_posix():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                words = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
                if words & set(DRAFTERS):
                    found.append(f"{path.relative_to(package)}:{node.lineno}")
    assert not found, found


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
    assert TOY_RULE in made["lookaheads"] and "roc" in made["lookaheads"] and TOY_TEXT in made["drafters"]
    assert study_choices(optuna.load_study(study_name="new", storage=storage), fresh=False) == made  # resumed: the same


def test_a_study_searching_a_name_no_longer_registered_is_one_error(tmp_path):
    from layersearch.common.errors import LayersearchError
    from layersearch.tune.study import SPACE_ATTR, study_choices

    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 'tune.db'}")
    study.set_user_attr(SPACE_ATTR, {"version": 2, "drafters": ["layer-skip", TOY_TEXT], "lookaheads": ["static"]})
    with pytest.raises(LayersearchError, match=f"drafter '{TOY_TEXT}', which is not registered"):
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
