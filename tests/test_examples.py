"""examples/: the files the README's results table names load as what they are, and the prompt
file is the package's own code prompts (a fresh clone reproduces the table's commands)."""

from __future__ import annotations

from pathlib import Path

import pytest

from layersearch.decoder.spec import DecoderSpec

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.parametrize("path", sorted((EXAMPLES / "specs").glob("*.json")), ids=lambda p: p.name)
def test_each_spec_file_loads(path):
    spec = DecoderSpec.load(path)
    assert spec.model.ref.path and spec.model.ref.ref.endswith("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    assert spec.drafter.quant == "int8" and spec.max_new_tokens == 48


def test_the_int8_plan_is_every_sub_layer_and_the_head_in_int8():
    from layersearch.masks.mask import SkipMask

    plan = SkipMask.load(EXAMPLES / "q15_int8_all.json")
    assert plan == SkipMask.none(28).kept_in_int8()


def test_code40_is_the_packages_code_prompts(tmp_path):
    from layersearch.data import write_prompt_file

    write_prompt_file(tmp_path / "code40.jsonl", "code", 40)
    assert (EXAMPLES / "code40.jsonl").read_text() == (tmp_path / "code40.jsonl").read_text()


def test_the_readme_names_only_shipped_example_files():
    import re

    named = set(re.findall(r"examples/[\w./-]+\.jsonl?\b", README.read_text()))
    assert named, "the README names its example files"
    for name in named:
        assert (EXAMPLES.parent / name).is_file(), name
