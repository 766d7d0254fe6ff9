"""``layersearch generate --draft-model M --draft-quant int8``: an int8 drafter, output exact,
kept in the spec; wrong uses are one error line before any model loads."""

from __future__ import annotations

import json

import pytest

from layersearch.cli import main


def generated(capsys, *argv):
    code = main([str(a) for a in (*argv, "--json")])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_an_int8_draft_model_keeps_greedy_output_and_its_spec(tiny_with_embedded_tokenizer, capsys, tmp_path):
    _, _, folder = tiny_with_embedded_tokenizer(0)
    common = ("generate", "--model", folder, "--prompt", "def add(a, b):", "--max-new-tokens", 12, "--threads", 1)
    baseline = generated(capsys, *common, "--baseline")["token_ids"]
    spec = tmp_path / "spec.json"
    result = generated(capsys, *common, "--draft-model", folder, "--draft-quant", "int8", "--lookahead", "static",
                       "--max-draft", 3, "--save-spec", spec)
    assert result["token_ids"] == baseline
    assert result["stats"]["accepted"] > result["stats"]["drafted"] // 2  # the int8 copy of the target mostly agrees
    assert json.loads(spec.read_text())["drafter"]["quant"] == "int8"
    again = generated(capsys, "generate", "--spec", spec, "--prompt", "def add(a, b):", "--max-new-tokens", 12)
    assert again["token_ids"] == baseline and again["stats"]["accepted"] == result["stats"]["accepted"]


@pytest.mark.parametrize("argv, message", [
    (("--draft-quant", "int8"), "quantizes a --draft-model; give one"),
    (("--draft-model", "x", "--draft-quant", "int8", "--dtype", "bfloat16"), "quantizes float32 weights"),
])
def test_bad_draft_quant_is_one_error_line(capsys, tmp_path, argv, message):
    code = main([str(a) for a in ("generate", "--model", tmp_path / "nowhere", "--prompt", "x", *argv)])
    _, err = capsys.readouterr()
    assert code == 2 and err.strip().count("\n") == 0 and message in err, err
