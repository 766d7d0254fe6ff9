"""End to end on the embedded SmolLM2-135M: a briefly trained steering keeps `generate` lossless."""

from __future__ import annotations

import json

import pytest

from layersearch.cli import main
from layersearch.steer import SteeringFile

pytestmark = pytest.mark.embedded


def test_trained_steering_generates_the_plain_output(tmp_path, capsys):
    out = tmp_path / "steer.safetensors"
    assert main(["steer", "train", "--skip-ratio", "0.25", "--domain", "code", "--prompts", "1", "--val-prompts", "0",
                 "--new-tokens", "8", "--max-prompt-tokens", "64", "--steps", "5", "--out", str(out)]) == 0
    steering = SteeringFile.load(out)
    assert steering.params.layers == (3, 15, 28) and steering.verifier.num_layers == 30
    capsys.readouterr()
    common = ["generate", "--prompt", "def fib(n):", "--max-new-tokens", "24", "--json"]
    assert main([*common, "--steering", str(out), "--draft-threshold", "0"]) == 0
    steered = json.loads(capsys.readouterr().out)
    assert main([*common, "--baseline"]) == 0
    assert steered["token_ids"] == json.loads(capsys.readouterr().out)["token_ids"]
    assert steered["stats"]["drafted"] > 0
