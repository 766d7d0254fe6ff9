"""Fixtures of the study tests: a tiny model saved as an ordinary local model directory.

The CLI loads models by name, so the tiny random Llama is written with save_pretrained next
to a character-level tokenizer (printable ASCII), and the directory is passed as ``--model``.
Its position limit is raised so that the domain prompts (about a thousand characters) fit.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest

from layersearch.models.tiny import build_tiny_model, char_tokenizer

@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 4-layer random Llama and its tokenizer, saved as a local model directory."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    model = build_tiny_model("llama", num_layers=4, seed=0)
    model.config.max_position_embeddings = 4096
    model.save_pretrained(str(folder))
    char_tokenizer().save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session")
def tiny_info(tiny_model_dir):
    """The ModelInfo the loader reports for the tiny directory."""
    from layersearch.models.loading import load_model

    return load_model(str(tiny_model_dir)).info


@pytest.fixture(scope="session")
def tiny_profile(tmp_path_factory, tiny_info) -> Path:
    """A latency profile file for the tiny model (made up, so create need not measure one)."""
    from layersearch.profiling.profile import LatencyProfile

    profile = LatencyProfile(
        model=tiny_info, device="cpu", dtype="float32", torch_version="test",
        attention_slope=1e-7, attention_intercept=2e-4, mlp_seconds=2e-4, base_seconds=3e-4,
        verify_ratios=(1.0, 1.1, 1.2, 1.3),
    )
    return profile.save(tmp_path_factory.mktemp("profile") / "tiny-profile.json")


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """An empty current directory, so the default storage studies/<name>.db lands in tmp_path."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def cli(capsys) -> Callable[..., tuple[int, str, str]]:
    """Run ``layersearch.cli.main(argv)``; returns (exit status, stdout, stderr)."""
    from layersearch.cli import main

    def call(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return status, out, err

    return call


@pytest.fixture
def create_args(tiny_model_dir, tiny_profile) -> Callable[..., list[str]]:
    """``study create`` arguments for a quick study of the tiny model."""

    def make(name: str, strategy: str = "random", objective: str = "time-per-token", *extra: str) -> list[str]:
        return [
            "study", "create", "--name", name, "--model", str(tiny_model_dir), "--domain", "translation",
            "--strategy", strategy, "--objective", objective, "--samples", "2", "--max-new-tokens", "6",
            "--gamma", "8", "--draft-threshold", "0", "--profile", str(tiny_profile), *extra,
        ]

    return make


@pytest.fixture
def listing() -> Callable[[Path], set[str]]:
    """Every path under a folder (relative), to check that a command wrote nothing."""

    def walk(folder: Path) -> set[str]:
        return {os.path.relpath(os.path.join(root, name), folder)
                for root, dirs, files in os.walk(folder) for name in dirs + files}

    return walk
