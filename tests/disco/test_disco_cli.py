"""``layersearch disco train`` and ``generate --lookahead disco:FILE`` on a saved tiny model;
bad input is one error line."""

from __future__ import annotations

import json

import pytest

from layersearch.cli import main
from layersearch.disco import DiscoFile


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def trained(tiny_with_embedded_tokenizer, tmp_path, capsys):
    """A tiny model folder and a DISCO file trained for it on code prompts."""
    _, _, folder = tiny_with_embedded_tokenizer(0)
    out = tmp_path / "disco.json"
    code, stdout, err = run_cli(
        capsys, "disco", "train", "--model", folder, "--skip-ratio", "0.25", "--domain", "code", "--train-prompts", 2,
        "--val-prompts", 2, "--max-new-tokens", 12, "--max-draft", 3, "--out", out, "--json",
    )
    assert code == 0, err
    return folder, out, json.loads(stdout)


def test_train_writes_a_valid_file_and_reports_f1(trained):
    folder, out, summary = trained
    loaded = DiscoFile.load(out)
    assert 1 <= loaded.sl_max <= 3 and 0 < loaded.tau < 1 and loaded.mask.num_skipped == 2
    assert set(summary["f1"]) == {"classifier", "disco_decisions", "best_static"}
    assert loaded.training["domain"] == "code" and loaded.training["train_rows"] == 2 * 11


def test_generate_with_disco_equals_baseline(trained, capsys):
    folder, out, _ = trained
    common = ["generate", "--model", folder, "--prompt", "def add(a, b):", "--max-new-tokens", 16, "--json"]
    code, plain, _ = run_cli(capsys, *common, "--baseline")
    assert code == 0
    code, spec, err = run_cli(capsys, *common, "--lookahead", f"disco:{out}")
    assert code == 0, err
    assert json.loads(spec)["token_ids"] == json.loads(plain)["token_ids"]


def test_disco_file_for_another_model_is_one_line(trained, tiny_with_embedded_tokenizer, tmp_path, capsys):
    _, out, _ = trained
    data = json.loads(out.read_text())
    data["model"]["fingerprint"] = "0000"
    data["mask"]["model"]["fingerprint"] = "0000"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    folder = trained[0]
    code, _, err = run_cli(capsys, "generate", "--model", folder, "--prompt", "x", "--lookahead", f"disco:{other}")
    assert code == 2 and err.count("\n") == 1 and "trained for model" in err


@pytest.mark.parametrize("argv, message", [
    (["generate", "--prompt", "x", "--lookahead", "disco:/nonexistent.json"], "not found"),
    (["generate", "--prompt", "x", "--lookahead", "disco:"], "needs a file"),
    (["generate", "--prompt", "x", "--lookahead", "sometimes"], "unknown lookahead"),
    (["disco", "train", "--domain", "code", "--out", "x.json", "--rows", "/nonexistent.npz"], "rows file not found"),
    (["disco", "train", "--domain", "klingon", "--out", "x.json"], "unknown domain"),
    (["disco", "bench", "--domains", ",", "--max-draft", "2"], "--domains is empty"),
    (["disco", "train", "--domain", "code", "--out", "x.json", "--max-draft", "0"], "--max-draft must be an integer in [1, 64]"),
    (["disco", "train", "--domain", "code", "--out", "x.json", "--max-draft", "100000"], "--max-draft must be an integer in [1, 64]"),
    (["disco", "train", "--domain", "code", "--out", "/nonexistent/x.json"], "folder /nonexistent does not exist"),
    (["disco", "collect", "--domain", "code", "--out", "/"], "is a directory"),
])
def test_bad_input_is_one_line(capsys, argv, message):
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_malformed_disco_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "disco-classifier", "schema_version": 1}')
    code, _, err = run_cli(capsys, "generate", "--prompt", "x", "--lookahead", f"disco:{bad}")
    assert code == 2 and err.count("\n") == 1 and "missing" in err


def test_bench_runs_every_rule_with_transfer_and_the_oracle(tiny_with_embedded_tokenizer, tmp_path, capsys):
    _, _, folder = tiny_with_embedded_tokenizer(0)
    out = tmp_path / "bench.json"
    code, stdout, err = run_cli(
        capsys, "disco", "bench", "--model", folder, "--skip-ratio", "0.25", "--domains", "code,sql",
        "--train-prompts", 2, "--val-prompts", 1, "--test-prompts", 1, "--max-new-tokens", 10, "--max-draft", 2,
        "--out", out,
    )
    assert code == 0, err
    report = json.loads(out.read_text())
    for domain, other in (("code", "sql"), ("sql", "code")):
        rows = {r["config"]: r for r in report["domains"][domain]["rows"]}
        assert {"plain generate", "static 1", "static 2", "hf heuristic", "hf confidence (roc)",
                f"DISCO trained on {other}", "oracle (replayed)"} <= set(rows)
        assert all(r["identical_to_plain"] for r in rows.values())
        assert sum(r.get("best_static", False) for r in rows.values()) == 1
        assert rows["oracle (replayed)"]["alpha"] == 1.0 and rows["oracle (replayed)"]["modelled_ms_per_token"] > 0
        assert f"== {domain}" in stdout
