"""``layersearch tune --export-vllm DIR``: the chosen spec's vLLM folder written after the spec,
a search of only what vLLM serves, and a bad DIR refused before any work."""

from __future__ import annotations

import json

import optuna
import pytest

from layersearch.cli import main
from layersearch.decoder.spec import DecoderSpec
from layersearch.integrations.vllm_export import vllm_draft

TINY = ("--budget", "3", "--threads", "1", "--max-new-tokens", "6", "--train-prompts", "2", "--test-prompts", "2",
        "--repeats", "1", "--finalists", "2", "--quiet")


def _tune(prompt_file, model_dir, tmp_path, *extra):
    return main(["tune", "--prompts", str(prompt_file), "--model", str(model_dir), "--out", str(tmp_path / "spec.json"),
                 "--storage", str(tmp_path / "tune.db"), *TINY, *extra])


@pytest.fixture
def speculative_choice(monkeypatch):
    """The fastest identical finalist is chosen even when plain decoding beats it (a tiny random
    model rarely drafts well), so the run always has a draft to export."""
    from layersearch.tune import select

    original = select.choose

    def choose(rows, plain):
        chosen = original(rows, plain)
        drafts = [r for r in rows if r.spec is not None and r.identical]
        if chosen.plain_chosen and drafts:
            return select.Selection(tuple(rows), drafts[0].label, drafts[0].spec, False)
        return chosen

    monkeypatch.setattr(select, "choose", choose)


def test_tune_writes_the_vllm_folder_of_the_spec_it_chose(prompt_file, tiny_model_dir, tmp_path, capsys, speculative_choice):
    served = tmp_path / "served"
    assert _tune(prompt_file, tiny_model_dir, tmp_path, "--export-vllm", str(served)) == 0
    out = capsys.readouterr().out
    spec = DecoderSpec.load(tmp_path / "spec.json")
    assert not spec.plain
    config = json.loads((served / "vllm.json").read_text())
    layers = json.loads((tiny_model_dir / "config.json").read_text())["num_hidden_layers"]
    draft = vllm_draft(spec, layers)
    speculative = config["speculative_config"]
    assert speculative["method"] == draft.method and speculative["num_speculative_tokens"] == spec.lookahead.max_draft
    if draft.method == "ngram":
        assert (speculative["prompt_lookup_min"], speculative["prompt_lookup_max"]) == draft.ngram
    else:
        assert speculative["model"] == str(served / "draft") and (served / "draft" / "config.json").is_file()
    assert DecoderSpec.from_dict(json.loads((served / "layersearch-spec.json").read_text())) == spec
    assert f"vLLM {draft.method}" in out and f"serve it: see {served / 'README.md'}" in out
    # the study (the prompt file's name with -vllm) searched only what vLLM serves
    study = optuna.load_study(study_name="my-prompts-vllm", storage=f"sqlite:///{tmp_path / 'tune.db'}")
    specs = [DecoderSpec.from_dict(t.user_attrs["spec"]) for t in study.trials if "spec" in t.user_attrs]
    assert specs and all(vllm_draft(s, layers) for s in specs if not s.plain)


def test_plain_decoding_chosen_writes_no_folder_and_says_so(tmp_path, capsys):
    from types import SimpleNamespace

    from layersearch.commands.tune import export_chosen

    export_chosen(SimpleNamespace(selection=SimpleNamespace(plain_chosen=True)), str(tmp_path / "served"), print)
    assert "plain decoding was chosen" in capsys.readouterr().out and not (tmp_path / "served").exists()


def test_the_default_study_name_says_vllm():
    from types import SimpleNamespace

    from layersearch.commands.tune import output_paths

    given = dict(prompts="my prompts.jsonl", out="spec.json", report=None, storage=None, name=None)
    assert "studies/tune-my-prompts-vllm.db" in output_paths(SimpleNamespace(**given, export_vllm="served")).values()
    assert "studies/tune-my-prompts.db" in output_paths(SimpleNamespace(**given, export_vllm=None)).values()
    assert "studies/tune-mine.db" in output_paths(SimpleNamespace(**{**given, "name": "mine"}, export_vllm="served")).values()


def _refused(capsys, status, says):
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith("layersearch: error: ") and says in err[0], err


@pytest.mark.parametrize("made_for_vllm, argv, says", [
    (False, ("--export-vllm", "served"), "searches every configuration, not only what vLLM serves"),
    (None, ("--export-vllm", "served"), "searches every configuration, not only what vLLM serves"),
    (True, (), "searches only what vLLM serves, not every configuration"),
])
def test_a_study_of_the_other_space_is_refused_before_loading(made_for_vllm, argv, says, prompt_file, tmp_path, capsys):
    from layersearch.tune.space import space_choices
    from layersearch.tune.study import IDENTITY_ATTR, SPACE_ATTR

    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    study = optuna.create_study(study_name="mine", storage=storage)
    study.set_user_attr(IDENTITY_ATTR, {})
    if made_for_vllm is not None:  # None: made before the choices were recorded
        study.set_user_attr(SPACE_ATTR, {**space_choices(), "drafters": list(space_choices()["drafters"]),
                                         "lookaheads": list(space_choices()["lookaheads"]), "vllm": made_for_vllm})
    before = (tmp_path / "tune.db").read_bytes()
    status = main(["tune", "--prompts", str(prompt_file), "--budget", "5", "--out", str(tmp_path / "spec.json"),
                   "--storage", storage, "--name", "mine", "--model", "nope-model",
                   *(a if a != "served" else str(tmp_path / "served") for a in argv)])
    _refused(capsys, status, says)
    assert (tmp_path / "tune.db").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my prompts.jsonl", "tune.db"]


@pytest.mark.parametrize("case, says", [
    ("--out in DIR", "--out"),
    ("--report in DIR", "--report"),
    ("--storage in DIR", "--storage"),
    ("a model of the Hub", "the embedded model, a .gguf file or a local model folder"),
])
def test_what_the_export_could_not_write_is_refused_before_loading(case, says, prompt_file, tiny_model_dir, tmp_path,
                                                                   monkeypatch, capsys):
    """An empty DIR that tune's own files would fill, or a model whose files are not here."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "served").mkdir()
    given = {"--out": "spec.json", "--storage": "tune.db", "--model": str(tiny_model_dir)}
    extra: tuple[str, ...] = ()
    if case == "--out in DIR":
        given["--out"] = "served/spec.json"
    elif case == "--report in DIR":
        extra = ("--report", "served/report.md")
    elif case == "--storage in DIR":
        given["--storage"] = "served/tune.db"
    else:
        given["--model"] = "HuggingFaceTB/SmolLM2-135M"
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    status = main(["tune", "--prompts", str(prompt_file), "--budget", "5", "--export-vllm", "served",
                   *(x for pair in given.items() for x in pair), *extra])
    _refused(capsys, status, says)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
