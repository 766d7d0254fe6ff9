"""``generate --compile on``: each forward compiling is a progress line on stderr, and the compile
seconds stay out of the decode figures (tokens/s and "other") in the statistics it prints."""

from __future__ import annotations

import json
import re

import pytest

from layersearch.cli import main


@pytest.fixture
def eager_backend(monkeypatch):
    """Dynamo's cheap backend in place of inductor: the same capture, without code generation."""
    from layersearch.runtime import backend as runtime_backend

    real = runtime_backend.dynamo_compiler
    monkeypatch.setattr(runtime_backend, "dynamo_compiler", lambda backend="inductor": real("eager"))


def test_a_captured_generate_shows_each_compile_and_leaves_it_out_of_tokens_per_second(
        tiny_with_embedded_tokenizer, capsys, eager_backend):
    _, _, folder = tiny_with_embedded_tokenizer(0)
    code = main([str(a) for a in ("generate", "--model", folder, "--prompt", "def add(a, b): return a + b\ndef add(",
                                  "--max-new-tokens", 12, "--threads", 1, "--drafter", "prompt-lookup", "--lookahead",
                                  "static", "--max-draft", 3, "--compile", "on", "--json")])
    out, err = capsys.readouterr()
    assert code == 0, err
    stats = json.loads(out)["stats"]
    assert stats["path"] == "captured" and stats["compile_seconds"] > 0, stats
    notes = re.findall(r"^compiling forward (\d+)/(\d+) \((.+)\)\.\.\.$", err, flags=re.M)
    assert notes, err
    assert [int(n) for n, _, _ in notes] == list(range(1, len(notes) + 1))  # numbered in order
    assert all(m == "5" for _, m, _ in notes)  # verifications of 1..4 tokens and a draft forward: at most 5
    assert any(what.startswith("verify ") or what == "one token" for _, _, what in notes)
    run_seconds = stats["total_seconds"] - stats["compile_seconds"]
    assert stats["tokens_per_second"] == pytest.approx(stats["new_tokens"] / run_seconds)
    assert stats["other_seconds"] == pytest.approx(max(0.0, run_seconds - stats["prefill_seconds"] - stats["draft_seconds"]
                                                       - stats["verify_seconds"]))


def test_an_eager_generate_prints_no_compile_line(tiny_with_embedded_tokenizer, capsys):
    _, _, folder = tiny_with_embedded_tokenizer(0)
    assert main([str(a) for a in ("generate", "--model", folder, "--prompt", "def add(a, b):", "--max-new-tokens", 4,
                                  "--threads", 1, "--compile", "off", "--json")]) == 0
    assert "compiling" not in capsys.readouterr().err
