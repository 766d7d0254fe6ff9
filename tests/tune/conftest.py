"""Fixtures of the tune tests: a prompt file with enough rows for every split, a tiny model folder."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def prompt_file(tmp_path):
    """40 distinct prompt rows with repeated text (so prompt lookup finds n-grams)."""
    path = tmp_path / "my prompts.jsonl"
    rows = [{"prompt": f"def add_{i}(a, b):\n    return a + b\n\ndef add_{i}(a, b):"} for i in range(40)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def tiny_model_dir(tiny_with_embedded_tokenizer):
    """A tiny random Llama with the embedded tokenizer, saved as a model folder."""
    return tiny_with_embedded_tokenizer(seed=3)[2]
