"""``layersearch tune`` end to end on a tiny model: resumable study, a spec that runs, bad input."""

from __future__ import annotations

import json

import optuna
import pytest

from layersearch.cli import main

TINY = ("--budget", "2", "--threads", "1", "--max-new-tokens", "6", "--train-prompts", "2", "--test-prompts", "2",
        "--repeats", "1", "--finalists", "2", "--quiet")


def _tune(prompt_file, model_dir, tmp_path, *extra):
    return main(["tune", "--prompts", str(prompt_file), "--model", str(model_dir), "--out", str(tmp_path / "spec.json"),
                 "--storage", str(tmp_path / "tune.db"), "--name", "mine", *TINY, *extra])


def test_tune_resumes_and_writes_a_spec_that_runs_losslessly(prompt_file, tiny_model_dir, tmp_path, capsys):
    import torch

    import layersearch
    from layersearch.models.loading import load_model
    from layersearch.runtime.baseline import hf_generate

    assert _tune(prompt_file, tiny_model_dir, tmp_path) == 0
    study = optuna.load_study(study_name="mine", storage=f"sqlite:///{tmp_path / 'tune.db'}")
    first = len([t for t in study.trials if t.state.is_finished()])
    assert first >= 1 and all("spec" in t.user_attrs for t in study.trials if t.state.is_finished())
    assert study.trials[0].params["drafter"] == "prompt-lookup"  # enqueued first, so a short budget still measures it
    assert _tune(prompt_file, tiny_model_dir, tmp_path) == 0  # same --name: the study continues
    study = optuna.load_study(study_name="mine", storage=f"sqlite:///{tmp_path / 'tune.db'}")
    assert len([t for t in study.trials if t.state.is_finished()]) > first
    out = capsys.readouterr().out
    assert "plain generate" in out and "chosen:" in out
    report = (tmp_path / "spec.md").read_text()
    assert "## Held-out prompts" in report and "hf prompt-lookup" in report and (tmp_path / "spec.png").read_bytes()[:4] == b"\x89PNG"

    # The spec written runs through load_decoder and generate --spec with plain decoding's tokens.
    spec = json.loads((tmp_path / "spec.json").read_text())
    assert spec["kind"] == "layersearch-decoder-spec"
    loaded = load_model(str(tiny_model_dir))
    decoder = layersearch.load_decoder(tmp_path / "spec.json", model=loaded)
    text = "def add_99(a, b):\n    return a + b\n\ndef add_99(a, b):"
    ids = loaded.tokenizer(text, return_tensors="pt").input_ids
    assert list(decoder.generate(text, max_new_tokens=12).token_ids) == list(hf_generate(loaded.model, ids, 12).token_ids)
    prompts = tmp_path / "one.jsonl"
    prompts.write_text(json.dumps({"prompt": text}) + "\n")
    assert main(["generate", "--spec", str(tmp_path / "spec.json"), "--prompts", str(prompts), "--max-new-tokens", "12", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["token_ids"] == list(hf_generate(loaded.model, ids, 12).token_ids)
    del torch


def _rows(path, n):
    path.write_text("".join(json.dumps({"prompt": f"row {i}"}) + "\n" for i in range(n)))
    return path


@pytest.mark.parametrize("case, says", [
    ("missing prompts", "not found"),
    ("too few rows", "give at least about"),
    ("unknown storage", "unsupported storage"),
    ("budget 0", "--budget must be"),
    ("budget nan", "--budget must be"),
    ("budget inf", "--budget must be"),
])
def test_bad_input_is_one_line_and_writes_nothing(case, says, prompt_file, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = {"prompts": str(prompt_file), "storage": None, "budget": "5"}
    if case == "missing prompts":
        argv["prompts"] = str(tmp_path / "absent.jsonl")
    elif case == "too few rows":
        argv["prompts"] = str(_rows(tmp_path / "few.jsonl", 1))  # one row: no split can hold both train and test
    elif case == "unknown storage":
        argv["storage"] = "notes.txt"
    else:
        argv["budget"] = case.split()[1]
    before = sorted(p.name for p in tmp_path.iterdir())
    command = ["tune", "--prompts", argv["prompts"], "--budget", argv["budget"], "--out", "spec.json", "--model", "nope-model"]
    status = main(command + (["--storage", argv["storage"]] if argv["storage"] else []))
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith("layersearch: error: ") and says in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no spec, report, studies/ folder


@pytest.mark.parametrize("theirs, says", [
    (None, "not made by layersearch tune"),
    ({"prompts": "file:/elsewhere.jsonl"}, "was made with prompts 'file:/elsewhere.jsonl'"),
])
def test_a_study_of_that_name_made_otherwise_is_refused_before_loading(theirs, says, prompt_file, tmp_path, capsys):
    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    study = optuna.create_study(study_name="mine", storage=storage)
    if theirs is not None:
        study.set_user_attr("layersearch_tune", theirs)
    before = (tmp_path / "tune.db").read_bytes()
    status = main(["tune", "--prompts", str(prompt_file), "--budget", "5", "--out", str(tmp_path / "spec.json"),
                   "--storage", storage, "--name", "mine", "--model", "nope-model"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and says in err[0], err
    assert (tmp_path / "tune.db").read_bytes() == before and not (tmp_path / "spec.json").exists()


def test_a_first_file_of_a_dozen_rows_is_tuned_on_what_it_holds(tmp_path, capsys):
    """Issue 33: the train and test counts adapt to a small file and say so; counts given are kept."""
    from layersearch.tune.run import prompt_counts

    few = _rows(tmp_path / "twelve.jsonl", 12)
    train, test, note = prompt_counts(str(few), None, None)
    assert 1 <= test < 4 and train >= 1 and note is not None and f"using {train} train and {test} test prompts" in note
    assert prompt_counts(str(few), 2, 1) == (2, 1, None)
    # through the CLI: the note comes before the model loads (this model is missing: that is the error)
    status = main(["tune", "--prompts", str(few), "--budget", "5", "--out", str(tmp_path / "spec.json"), "--model", "nope-model",
                   "--storage", str(tmp_path / "t.db")])
    err = capsys.readouterr().err
    assert status == 2 and note in err and "too small" not in err
