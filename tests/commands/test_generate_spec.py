"""``generate --save-spec`` / ``--spec``: a saved spec reruns what the options ran, token for token;
bad specs and conflicting options are one error line; generate.py stays a thin command."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from layersearch.cli import main
from layersearch.masks.mask import SkipMask

PROMPT = "w5 w9 w17 w33 w8 w64 w3 w5 w9"


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def generated(capsys, *argv):
    code, out, err = run_cli(capsys, "generate", *argv, "--json")
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def error_of(capsys, *argv):
    code, out, err = run_cli(capsys, "generate", *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("layersearch: error: "), err
    return err


@pytest.fixture(scope="module")
def mask_file(tiny_word_models, tmp_path_factory):
    from layersearch.models.loading import load_model

    info = load_model(str(tiny_word_models[0])).info
    return SkipMask(4, (1, 3), (2,), info).save(tmp_path_factory.mktemp("mask") / "mask.json")


OPTION_SETS = {
    "mask": lambda m: ("--mask", m, "--draft-threshold", 0),
    "skip-ratio": lambda m: ("--mask", "uniform:0.5", "--lookahead", "static", "--max-draft", 3),
    "default-mask adaptive": lambda m: ("--lookahead", "adaptive"),
    "prompt-lookup": lambda m: ("--drafter", "prompt-lookup", "--lookahead", "heuristic"),
    "hybrid tree": lambda m: ("--drafter", "hybrid", "--mask", "uniform:0.25", "--verifier", "tree", "--draft-threshold", 0),
    "knapsack": lambda m: ("--mask", "knapsack", "--reselect-every", 3, "--max-draft", 4),
    "sampling": lambda m: ("--mask", "uniform:0.5", "--temperature", 0.9, "--top-p", 0.95, "--seed", 4),
    "baseline": lambda m: ("--baseline",),
}


@pytest.mark.parametrize("name", sorted(OPTION_SETS))
def test_a_saved_spec_reruns_the_options_token_for_token(name, tiny_word_models, mask_file, tmp_path, capsys):
    verifier, _ = tiny_word_models
    common = ("--prompt", PROMPT, "--max-new-tokens", 16)
    spec = tmp_path / "spec.json"
    options = OPTION_SETS[name](mask_file)
    ran = generated(capsys, "--model", verifier, *common, *options, "--save-spec", spec)
    rerun = generated(capsys, "--spec", spec, *common)
    assert rerun[0]["token_ids"] == ran[0]["token_ids"]
    if "tree" not in name:  # (tree drafts of the hybrid drafter vary by a token from run to run, on main too)
        assert rerun[0]["stats"]["drafted"] == ran[0]["stats"]["drafted"]  # the same decoder, not just the same text
    if name != "sampling":
        plain = generated(capsys, "--model", verifier, *common, "--baseline")
        assert ran[0]["token_ids"] == plain[0]["token_ids"]
    saved = json.loads(spec.read_text())
    assert saved["model"]["info"]["num_layers"] == 4 and saved["model"]["path"] is True
    if name in ("mask", "skip-ratio", "default-mask adaptive"):
        assert saved["mask_source"]["kind"] == "mask"  # resolved: the mask it drafted with, inline


def test_draft_model_and_swift_through_a_spec(tiny_word_models, tmp_path, capsys):
    verifier, drafter = tiny_word_models
    common = ("--max-new-tokens", 12)
    spec = tmp_path / "draft.json"
    ran = generated(capsys, "--model", verifier, "--prompt", PROMPT, *common, "--draft-model", drafter,
                    "--lookahead", "static", "--save-spec", spec)
    assert ran[0]["stats"]["drafted"] > 0
    assert generated(capsys, "--spec", spec, "--prompt", PROMPT, *common)[0]["token_ids"] == ran[0]["token_ids"]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"w{i} w9 w17 w33 w8 w64 w3"}) + "\n" for i in (5, 6, 7)))
    swift = tmp_path / "swift.json"
    ran = generated(capsys, "--model", verifier, "--prompts", prompts, *common, "--mask", "swift",
                    "--swift-window", 4, "--save-spec", swift)
    rerun = generated(capsys, "--spec", swift, "--prompts", prompts, *common)
    assert [r["token_ids"] for r in rerun] == [r["token_ids"] for r in ran]
    assert [r["stats"]["swift"]["phase"] for r in rerun] == [r["stats"]["swift"]["phase"] for r in ran]
    assert json.loads(swift.read_text())["mask_source"]["swift"]["window"] == 4


def test_the_spec_moves_with_its_files(tiny_word_models, mask_file, tmp_path, capsys, monkeypatch):
    """Paths are relative to the spec's folder: the folder can move, and the spec runs from anywhere."""
    import shutil

    verifier, _ = tiny_word_models
    bundle = tmp_path / "bundle"
    shutil.copytree(verifier, bundle / "model")
    shutil.copy(mask_file, bundle / "mask.json")
    monkeypatch.chdir(bundle)
    ran = generated(capsys, "--model", "model", "--mask", "mask.json", "--prompt", PROMPT, "--save-spec", "spec.json")
    moved = tmp_path / "moved"
    shutil.move(bundle, moved)
    monkeypatch.chdir(tmp_path)
    assert generated(capsys, "--spec", moved / "spec.json", "--prompt", PROMPT)[0]["token_ids"] == ran[0]["token_ids"]


def test_bad_specs_are_one_line(tiny_word_models, mask_file, tmp_path, capsys):
    verifier, _ = tiny_word_models
    good = tmp_path / "good.json"
    generated(capsys, "--model", verifier, "--prompt", PROMPT, "--max-new-tokens", 2, "--save-spec", good)
    data = json.loads(good.read_text())
    cases = {
        "malformed.json": ("{not json", "malformed.json"),
        "truncated.json": (good.read_text()[:-30], "truncated.json"),
        "drafter.json": (json.dumps({**data, "drafter": {"name": "oracle", "model": None}}), "unknown drafter 'oracle'"),
        "kind.json": (Path(mask_file).read_text(), "this is a mask file, not a decoder spec"),
        "other.json": (json.dumps({**data, "model": {**data["model"], "info": {**data["model"]["info"], "fingerprint": "0" * 16}}}),
                       "spec was made for model"),
    }
    for name, (text, says) in cases.items():
        (tmp_path / name).write_text(text)
        assert says in error_of(capsys, "--spec", tmp_path / name, "--prompt", PROMPT), name
    assert "spec file not found" in error_of(capsys, "--spec", tmp_path / "missing.json", "--prompt", PROMPT)
    says = error_of(capsys, "--spec", good, "--prompt", PROMPT, "--mask", "uniform:0.5", "--drafter", "hybrid")
    assert "takes no --mask, --drafter" in says
    assert "--save-spec" in error_of(capsys, "--model", verifier, "--prompt", PROMPT, "--save-spec", tmp_path)  # a folder


def test_save_spec_is_checked_before_the_model_loads(monkeypatch, tmp_path, capsys):
    import layersearch.commands.generate as generate

    monkeypatch.setattr(generate, "load", lambda args: pytest.fail("the model loaded before --save-spec was checked"))
    assert "is a directory" in error_of(capsys, "--prompt", "x", "--save-spec", tmp_path)
    error_of(capsys, "--prompt", "x", "--spec", tmp_path / "missing.json")


def test_generate_imports_at_most_eight_layersearch_modules():
    """generate parses, builds a spec, hands it over and prints: the wiring lives below the CLI."""
    import layersearch.commands.generate as generate

    tree = ast.parse(Path(generate.__file__).read_text())
    ours = [node.lineno for node in ast.walk(tree)
            if (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("layersearch"))
            or (isinstance(node, ast.Import) and any(a.name.startswith("layersearch") for a in node.names))]
    assert 0 < len(ours) <= 8, ours


def test_cli_choices_come_from_the_registries(monkeypatch, capsys):
    from layersearch.runtime import VERIFIERS
    from layersearch.runtime.drafters import DRAFTERS

    monkeypatch.setitem(DRAFTERS, "echo", DRAFTERS["prompt-lookup"])
    monkeypatch.setitem(VERIFIERS, "tree2", VERIFIERS["tree"])
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    out = capsys.readouterr().out
    assert "{layer-skip,prompt-lookup,hybrid,echo}" in out and "{chain,tree,tree2}" in out


@pytest.mark.embedded
def test_embedded_model_save_spec_then_spec_gives_identical_text(tmp_path, capsys):
    spec = tmp_path / "spec.json"
    common = ("--prompt", "The capital of France is", "--max-new-tokens", 16, "--threads", 1)
    ran = generated(capsys, *common, "--mask", "uniform:0.2", "--save-spec", spec)
    plain = generated(capsys, *common, "--baseline")
    rerun = generated(capsys, "--spec", spec, *common)
    assert rerun[0]["text"] == ran[0]["text"] == plain[0]["text"] and rerun[0]["token_ids"] == ran[0]["token_ids"]
    assert json.loads(spec.read_text())["model"]["ref"] == "smollm2-135m"
