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


def test_the_model_drafts_for_itself_in_int8(tiny_with_embedded_tokenizer, capsys, tmp_path):
    """``--draft-quant int8`` without ``--draft-model``: the whole model in int8 drafts, output exact;
    the spec keeps it, and a plan file written from it runs the same through ``--mask``."""
    _, _, folder = tiny_with_embedded_tokenizer(0)
    common = ("generate", "--model", folder, "--prompt", "def add(a, b):", "--max-new-tokens", 12, "--threads", 1)
    baseline = generated(capsys, *common, "--baseline")["token_ids"]
    spec = tmp_path / "spec.json"
    code = main([str(a) for a in (*common, "--draft-quant", "int8", "--lookahead", "static", "--max-draft", 3,
                                  "--save-spec", spec, "--json")])
    out, err = capsys.readouterr()
    assert code == 0 and "int8 twins:" in err and "MiB, built in" in err  # their memory and build time reported
    assert "drafts with the full model" not in err  # the plan skips nothing, but the draft is int8
    result = json.loads(out)
    assert result["token_ids"] == baseline
    stats = result["stats"]
    assert stats["drafted"] and stats["accepted"] > stats["drafted"] // 2
    saved = json.loads(spec.read_text())
    assert saved["drafter"]["quant"] == "int8" and saved["drafter"]["model"] is None
    assert saved["mask_source"]["mask"]["attention"] == [] and saved["mask_source"]["mask"]["mlp"] == []  # nothing skipped
    again = generated(capsys, "generate", "--spec", spec, "--prompt", "def add(a, b):", "--max-new-tokens", 12)
    assert again["token_ids"] == baseline and again["stats"]["accepted"] == stats["accepted"]
    from layersearch.masks.mask import SkipMask

    plan = SkipMask(4, (1,), (), None, {}, (0, 2, 3), (0, 1, 2, 3), True)
    plan_file = tmp_path / "plan.json"
    plan.save(plan_file)
    assert json.loads(plan_file.read_text())["schema_version"] == 2
    from_file = generated(capsys, *common, "--mask", plan_file, "--lookahead", "static", "--max-draft", 3)
    assert from_file["token_ids"] == baseline and from_file["stats"]["drafted"]


def test_the_model_drafts_for_itself_in_int4(tiny_with_embedded_tokenizer, capsys, tmp_path):
    """``--draft-quant int4``: every sub-layer and the head int4 (groups of 64: the tiny model is
    64 wide), output exact; the spec keeps it and runs the same."""
    _, _, folder = tiny_with_embedded_tokenizer(0)
    common = ("generate", "--model", folder, "--prompt", "def add(a, b):", "--max-new-tokens", 12, "--threads", 1)
    baseline = generated(capsys, *common, "--baseline")["token_ids"]
    spec = tmp_path / "spec.json"
    code = main([str(a) for a in (*common, "--draft-quant", "int4", "--lookahead", "static", "--max-draft", 3,
                                  "--save-spec", spec, "--json")])
    out, err = capsys.readouterr()
    assert code == 0 and "int4 twins (groups of 64):" in err and "MiB, built in" in err, err
    assert "drafts with the full model" not in err
    result = json.loads(out)
    assert result["token_ids"] == baseline
    stats = result["stats"]
    # random weights over a 49k vocabulary leave small top-1 margins, which int4 flips more often than int8
    assert stats["drafted"] and stats["accepted"] >= stats["drafted"] // 3
    assert json.loads(spec.read_text())["drafter"]["quant"] == "int4"
    again = generated(capsys, "generate", "--spec", spec, "--prompt", "def add(a, b):", "--max-new-tokens", 12)
    assert again["token_ids"] == baseline and again["stats"]["accepted"] == stats["accepted"]
    from layersearch.masks.mask import SkipMask

    plan = SkipMask(4, (1,), (), None, {}, (0,), (), False, (2, 3), (0, 1, 2, 3), True, 32)
    plan.save(tmp_path / "plan.json")
    assert json.loads((tmp_path / "plan.json").read_text())["schema_version"] == 3
    from_file = generated(capsys, *common, "--mask", tmp_path / "plan.json", "--lookahead", "static", "--max-draft", 3)
    assert from_file["token_ids"] == baseline and from_file["stats"]["drafted"]


@pytest.mark.parametrize("argv, message", [
    (("--draft-quant", "int4", "--dtype", "float16"), "emulates the GPU's bfloat16 kernel from float32 or bfloat16 weights, not float16"),
    (("--draft-model", "x", "--draft-quant", "int4"), "a draft model takes int8 only"),
    (("--draft-model", "x@int4"), "unknown precision 'int4'"),
    (("--draft-quant", "int8", "--baseline"), "--baseline runs none"),
    (("--draft-quant", "int8", "--drafter", "prompt-lookup"), "--drafter prompt-lookup runs none"),
    (("--draft-quant", "int8", "--dtype", "bfloat16"), "quantizes float32 weights"),
    (("--draft-model", "x", "--draft-quant", "int8", "--dtype", "bfloat16"), "quantizes float32 weights"),
])
def test_bad_draft_quant_is_one_error_line(capsys, tmp_path, argv, message):
    code = main([str(a) for a in ("generate", "--model", tmp_path / "nowhere", "--prompt", "x", *argv)])
    _, err = capsys.readouterr()
    assert code == 2 and err.strip().count("\n") == 0 and message in err, err


def test_the_int8_self_draft_runs_captured_with_the_numba_kernels(tiny_with_embedded_tokenizer, capsys, monkeypatch):
    """``--compile on --kernels numba``: the kernels and the int8 twins run inside the compiled
    forwards (as custom ops), the output is plain decoding's, and the spec keeps ``compile``
    (dynamo's cheap backend stands in for inductor)."""
    pytest.importorskip("numba")
    from layersearch.runtime import backend as runtime_backend

    real = runtime_backend.dynamo_compiler
    monkeypatch.setattr(runtime_backend, "dynamo_compiler", lambda backend="inductor": real("eager"))
    _, _, folder = tiny_with_embedded_tokenizer(0)
    common = ("generate", "--model", folder, "--prompt", "def add(a, b):", "--max-new-tokens", 12, "--threads", 1,
              "--kernels", "numba")
    baseline = generated(capsys, *common, "--baseline")["token_ids"]
    result = generated(capsys, *common, "--draft-quant", "int8", "--lookahead", "static", "--max-draft", 3, "--compile", "on")
    stats = result["stats"]
    assert result["token_ids"] == baseline
    assert stats["path"] == "captured" and not stats.get("path_reason"), stats
    assert stats["drafted"] and stats["compile_seconds"] > 0
