"""``layersearch bench --specs``: decoder spec files as rows beside plain ``generate``."""

from __future__ import annotations

import json

from layersearch.cli import main


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def save_spec(capsys, model, path, *options):
    code, _, err = run_cli(capsys, "generate", "--model", model, "--prompt", "def add(a, b):", "--max-new-tokens", 2,
                           *options, "--save-spec", path)
    assert code == 0, err
    return path


def test_spec_rows_run_beside_plain_generate(capsys, tiny_with_embedded_tokenizer, tmp_path):
    """A layer-skip spec with a static rule and a draft-model spec: each one row, output identical."""
    from layersearch.models.tiny import build_tiny_model

    _, tokenizer, verifier = tiny_with_embedded_tokenizer(0)
    small = build_tiny_model("llama", num_layers=1, hidden_size=32, vocab_size=len(tokenizer), seed=9)
    small.save_pretrained(tmp_path / "small")
    tokenizer.save_pretrained(tmp_path / "small")
    skip = save_spec(capsys, verifier, tmp_path / "skip-static.json", "--mask", "uniform:0.5", "--lookahead", "static",
                     "--max-draft", 3)
    draft = save_spec(capsys, verifier, tmp_path / "draft.json", "--draft-model", tmp_path / "small",
                      "--draft-threshold", "0.3")
    out = tmp_path / "bench.json"
    code, stdout, err = run_cli(
        capsys, "bench", "--model", verifier, "--domains", "code", "--prompts-per-domain", 1, "--max-new-tokens", 6,
        "--repeats", 1, "--skip-ratios", "", "--peers", "", "--drafters", "", "--specs", f"{skip},{draft}", "--out", out,
    )
    assert code == 0, err
    rows = {r["config"]: r for r in json.loads(out.read_text())["domains"]["code"]["rows"]}
    assert set(rows) == {"plain generate", "ours: nothing skipped", "spec: skip-static", "spec: draft"}
    for label in ("spec: skip-static", "spec: draft"):
        assert rows[label]["identical_to_plain"] is True, label
        assert rows[label]["M"] >= 1.0
    assert "spec: skip-static" in stdout


def test_a_spec_for_another_model_is_one_line(capsys, tiny_with_embedded_tokenizer, tmp_path):
    from layersearch.models.tiny import build_tiny_model

    _, tokenizer, verifier = tiny_with_embedded_tokenizer(0)
    spec = save_spec(capsys, verifier, tmp_path / "s.json", "--mask", "uniform:0.5")
    other = tmp_path / "other"
    build_tiny_model("llama", num_layers=2, vocab_size=len(tokenizer), seed=1).save_pretrained(other)
    tokenizer.save_pretrained(other)
    code, _, err = run_cli(capsys, "bench", "--model", other, "--domains", "code", "--prompts-per-domain", 1,
                           "--max-new-tokens", 2, "--repeats", 1, "--skip-ratios", "", "--peers", "", "--drafters", "",
                           "--specs", spec, "--out", tmp_path / "b.json")
    assert code == 2 and err.strip().count("\n") == 0 and "spec was made for model" in err, err
    assert not (tmp_path / "b.json").exists()


def test_a_bad_spec_file_fails_before_the_model_loads(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "layersearch-decoder-spec", "format": 1, "model": ')
    code, _, err = run_cli(capsys, "bench", "--model", tmp_path / "nowhere", "--specs", bad, "--out", tmp_path / "b.json")
    assert code == 2 and err.strip().count("\n") == 0 and "bad.json" in err, err
    assert not (tmp_path / "b.json").exists()


def test_an_unbound_spec_must_name_the_benched_model(capsys, tmp_path):
    from layersearch.decoder.spec import DecoderSpec, ModelRef, ModelSpec

    spec = DecoderSpec(ModelSpec(ModelRef("smollm2-135m"))).save(tmp_path / "s.json")
    code, _, err = run_cli(capsys, "bench", "--model", tmp_path / "nowhere", "--specs", spec, "--out", tmp_path / "b.json")
    assert code == 2 and err.strip().count("\n") == 0 and "the spec is for model 'smollm2-135m'" in err, err
