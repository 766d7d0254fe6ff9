"""``layersearch generate --draft-model``: an independent drafter from the CLI, alone or steered
by a file trained for it, stays lossless; wrong combinations are one error line."""

from __future__ import annotations

import json

import pytest

from layersearch.cli import main
from layersearch.models.tiny import build_tiny_model


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def models(tiny_with_embedded_tokenizer, tmp_path):
    """(verifier folder, draft model folder, another draft model folder), one tokenizer."""
    _, tokenizer, folder = tiny_with_embedded_tokenizer(0)
    found = []
    for name, layers, seed in (("small", 1, 9), ("other", 2, 10)):
        small = build_tiny_model("llama", num_layers=layers, hidden_size=32, vocab_size=len(tokenizer), seed=seed)
        small.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
        found.append(tmp_path / name)
    return folder, *found


def generated(capsys, *argv):
    code, stdout, err = run_cli(capsys, "generate", *argv, "--json")
    assert code == 0, err
    return json.loads(stdout)


def test_draft_model_greedy_equals_baseline(models, capsys):
    verifier, small, _ = models
    common = ("--model", verifier, "--prompt", "def add(a, b):", "--max-new-tokens", 16)
    baseline = generated(capsys, *common, "--baseline")["token_ids"]
    for extra in (("--draft-threshold", 0), ("--lookahead", "static", "--max-draft", 4), ("--verifier", "tree", "--draft-threshold", 0)):
        result = generated(capsys, *common, "--draft-model", small, *extra)
        assert result["token_ids"] == baseline, extra
        assert result["stats"]["drafted"] > 0, extra
    sampled = generated(capsys, *common, "--draft-model", small, "--temperature", 1, "--seed", 3, "--lookahead", "static")
    assert len(sampled["token_ids"]) == 16 and sampled["stats"]["drafted"] > 0
    again = generated(capsys, *common, "--draft-model", small, "--temperature", 1, "--seed", 3, "--lookahead", "static")
    assert again["token_ids"] == sampled["token_ids"]  # seeded: reproducible


def test_steering_trained_for_a_draft_model(models, tmp_path, capsys):
    verifier, small, other = models
    out = tmp_path / "steer.safetensors"
    code, _, err = run_cli(
        capsys, "steer", "train", "--model", verifier, "--drafter", small, "--domain", "code", "--prompts", 1,
        "--new-tokens", 4, "--max-prompt-tokens", 16, "--steps", 2, "--val-prompts", 0, "--out", out,
    )
    assert code == 0, err
    common = ("--model", verifier, "--prompt", "def add(a, b):", "--max-new-tokens", 16)
    baseline = generated(capsys, *common, "--baseline")["token_ids"]
    for extra in ((), ("--draft-model", small)):  # the file's drafter by default, or named
        result = generated(capsys, *common, "--steering", out, "--draft-threshold", 0, *extra)
        assert result["token_ids"] == baseline and result["stats"]["drafted"] > 0
    self_file = tmp_path / "self.safetensors"
    code, _, err = run_cli(
        capsys, "steer", "train", "--model", verifier, "--skip-ratio", "0.5", "--domain", "code", "--prompts", 1,
        "--new-tokens", 4, "--max-prompt-tokens", 16, "--steps", 1, "--val-prompts", 0, "--out", self_file,
    )
    assert code == 0, err
    for bad, says in (
        (("--steering", out, "--draft-model", other), "trained for draft model"),  # another drafter
        (("--steering", self_file, "--draft-model", small), "self-drafter"),
        (("--steering", out, "--mask", "uniform:0.5"), "draft model"),
        (("--steering", out, "--drafter", "hybrid"), "draft model"),
        (("--steering", out, "--profile", tmp_path / "missing-profile.json"), "--profile predicts layer-skip drafts only"),
    ):
        code, _, err = run_cli(capsys, "generate", *common, *bad)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert err.startswith("layersearch: error: ") and says in err, err
