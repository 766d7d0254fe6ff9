"""``layersearch generate --draft-vocab N``: the draft scores only the N most frequent tokens,
output stays the baseline's token for token; wrong uses are one error line."""

from __future__ import annotations

import json

import pytest

from layersearch.frspec import vocab
from layersearch.cli import main
from layersearch.models.tiny import build_tiny_model


@pytest.fixture
def models(tiny_with_embedded_tokenizer, tmp_path, monkeypatch):
    """(verifier folder, draft model folder) sharing the embedded tokenizer; tables cached in tmp."""
    monkeypatch.setattr(vocab, "table_dir", lambda: tmp_path / "vocab")
    _, tokenizer, folder = tiny_with_embedded_tokenizer(0)
    small = build_tiny_model("llama", num_layers=1, hidden_size=32, vocab_size=len(tokenizer), seed=9)
    small.save_pretrained(tmp_path / "small")
    tokenizer.save_pretrained(tmp_path / "small")
    return folder, tmp_path / "small"


def generated(capsys, *argv):
    code = main([str(a) for a in (*argv, "--json")])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_draft_vocab_keeps_greedy_output(models, capsys):
    verifier, small = models
    common = ("generate", "--model", verifier, "--prompt", "def add(a, b):", "--max-new-tokens", 12, "--threads", 1)
    baseline = generated(capsys, *common, "--baseline")["token_ids"]
    for n in (2, 512):
        for extra in (("--mask", "uniform:0.5"), ("--drafter", "hybrid", "--mask", "uniform:0.5"), ("--draft-model", small)):
            result = generated(capsys, *common, *extra, "--draft-vocab", n, "--lookahead", "static", "--max-draft", 3)
            assert result["token_ids"] == baseline, (n, extra)
            assert result["stats"]["drafted"] > 0, (n, extra)


@pytest.mark.parametrize("argv, message", [
    (("--draft-vocab", -1), "--draft-vocab must be an integer >= 0"),
    (("--draft-vocab", 8, "--drafter", "prompt-lookup"), "runs no model"),
    (("--draft-vocab", 8, "--baseline"), "takes no --draft-vocab"),
    (("--draft-vocab", 10**6), "below the model's vocabulary"),
])
def test_bad_draft_vocab_is_one_error_line(models, capsys, argv, message):
    verifier, _ = models
    code = main([str(a) for a in ("generate", "--model", verifier, "--prompt", "x", "--max-new-tokens", 2, *argv)])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and err.startswith("layersearch: error:") and message in err, err


def test_a_saved_spec_keeps_the_reduced_head(models, capsys, tmp_path):
    verifier, small = models
    common = ("generate", "--prompt", "def add(a, b):", "--max-new-tokens", 10, "--threads", 1)
    spec = tmp_path / "spec.json"
    first = generated(capsys, *common, "--model", verifier, "--draft-model", small, "--draft-vocab", 64,
                      "--lookahead", "static", "--max-draft", 3, "--save-spec", spec)
    assert json.loads(spec.read_text())["drafter"]["vocab"] == 64
    again = generated(capsys, *common, "--spec", spec)
    assert again["token_ids"] == first["token_ids"] and again["stats"]["drafted"] == first["stats"]["drafted"]
