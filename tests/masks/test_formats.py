"""Tests for layersearch.masks.formats: the papers' published mask files, imported exactly.

Reads the papers' mask files as their repositories publish them, from ``$LAYERSEARCH_PUBLISHED_MASKS``
(a folder; they are not part of this repository); those tests are skipped with a reason when it is absent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from layersearch.cli import main
from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.masks.formats import export_mask, file_keys, import_mask, split_key

# Without the variable: a reference-data folder beside the checkout, where the maintainers' machines have one.
PUBLISHED = Path(os.environ.get("LAYERSEARCH_PUBLISHED_MASKS",
                                Path(__file__).resolve().parents[3] / "shared" / "data" / "published-masks"))
needs_published = pytest.mark.skipif(not PUBLISHED.is_dir(), reason=(
    ("the papers' mask files are not part of the repository: set LAYERSEARCH_PUBLISHED_MASKS to a folder holding them"
     if "LAYERSEARCH_PUBLISHED_MASKS" not in os.environ else
     f"LAYERSEARCH_PUBLISHED_MASKS={PUBLISHED} is no folder: set it to a folder holding the papers' mask files")
    + " (Self-SD's and SWIFT's skip_layers.json as selfsd_skip_layers.json and swift_skip_layers.json, KNN-SSD's "
    "<model>_skip.json as knnssd_<model>_skip.json)"))

# Depths from the papers' models (their model cards).
DEPTH = {
    "llama-2-13b": 40, "llama-2-13b-chat": 40, "llama-2-13b_chat": 40, "codellama-13b": 40,
    "llama-2-70b": 80, "codellama-34b": 48, "qwen-2.5-14b": 48, "qwen-2.5-14b-instruct": 48,
}


def _published() -> list[tuple[str, str, str]]:
    """(file name, format, key) of every key of every published file."""
    if not PUBLISHED.is_dir():
        return []
    out = []
    for path in sorted(PUBLISHED.glob("*.json")):
        fmt = path.name.split("_", 1)[0]
        out += [(path.name, fmt, key) for key in json.loads(path.read_text())]
    return out


@needs_published
def test_every_published_file_is_covered():
    names = {name for name, _, _ in _published()}
    assert len(names) == 6 and len(_published()) == 4 + 5 + 11 + 13 + 5 + 6


@needs_published
@pytest.mark.parametrize("name,fmt,key", _published())
def test_every_key_imports_exactly_and_round_trips(name, fmt, key, tmp_path):
    path = PUBLISHED / name
    raw = json.loads(path.read_text())[key]
    model, task = split_key(fmt, key, path)
    depth = DEPTH[model]  # the key's model name is parsed right (KeyError otherwise)
    mask = import_mask(path, fmt, key, num_layers=depth)
    assert (mask.num_layers, list(mask.attention), list(mask.mlp)) == (depth, sorted(raw["attention"]), sorted(raw["mlp"]))
    assert mask.provenance["model_name"] == model and mask.provenance.get("task") == task
    for out_fmt in ("selfsd", "swift", "knnssd", "knapspec"):
        out = export_mask(mask, out_fmt, tmp_path / f"{out_fmt}.json", key=None if out_fmt == "knapspec" else key)
        again = import_mask(out, out_fmt, None if out_fmt == "knapspec" else key, num_layers=depth)
        assert again == mask
    # The export in the file's own format holds the file's entry unchanged.
    assert json.loads((tmp_path / f"{fmt}.json").read_text()) == {key: raw}


@needs_published
def test_keys_whose_model_or_task_holds_an_underscore():
    assert split_key("swift", "llama-2-13b_chat_cnndm") == ("llama-2-13b_chat", "cnndm")
    knn = PUBLISHED / "knnssd_llama-2-13b_skip.json"
    assert split_key("knnssd", "math_counting_and_probability_llama-2-13b", knn) == (
        "llama-2-13b", "math_counting_and_probability")
    assert "math_algebra_llama-2-13b" in file_keys(knn, "knnssd")


def test_knapspec_flat_list_is_interleaved_attention_then_mlp(tmp_path):
    path = tmp_path / "knapspec.json"
    path.write_text(json.dumps([1, 0, 0, 1, 1, 1, 0, 0]))  # attn 0, mlp 1, attn 2, mlp 2
    mask = import_mask(path, "knapspec", num_layers=4)
    assert (mask.attention, mask.mlp) == ((0, 2), (1, 2))
    export_mask(mask, "knapspec", tmp_path / "out.json")
    assert json.loads((tmp_path / "out.json").read_text()) == [1, 0, 0, 1, 1, 1, 0, 0]


def test_import_bound_to_a_model_checks_its_depth(tmp_path):
    info = ModelInfo("tiny", 4, 64, "abc")
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"m": {"attention": [1, 3], "mlp": [0]}}))
    mask = import_mask(path, "selfsd", "m", model=info)
    assert mask.model == info and mask == SkipMask(4, (1, 3), (0,), info)
    with pytest.raises(LayersearchError, match="disagrees"):
        import_mask(path, "selfsd", "m", model=info, num_layers=5)
    with pytest.raises(LayersearchError, match=r"attention index 3 is past the last layer \(2\) of a 3-layer model"):
        import_mask(path, "selfsd", "m", model=ModelInfo("small", 3, 64, "x"))


@pytest.mark.parametrize(
    "content,args,message",
    [
        ({"a": {"attention": [], "mlp": []}, "b": {"attention": [], "mlp": []}}, ["--key", "c"], "no key 'c'; available keys: a, b"),
        ({"a": {"attention": [], "mlp": []}}, [], "no --key given; available keys: a"),
        ({"a": {"attention": [1]}}, ["--key", "a"], 'expected {"attention": [...], "mlp": [...]}'),
        ({"a": {"attention": ["1"], "mlp": []}}, ["--key", "a"], "attention must be a list of integer layer indices"),
        ({"a": {"attention": [2, 2], "mlp": []}}, ["--key", "a"], "duplicate layer index 2"),
        ({"a": {"attention": [9], "mlp": []}}, ["--key", "a"], "attention index 9 is past the last layer (3)"),
        ([1, 0], [], "holds an object of keys, not list"),
    ],
)
def test_bad_files_are_one_error_line_and_write_nothing(content, args, message, tmp_path, capsys):
    path = tmp_path / "in.json"
    path.write_text(json.dumps(content))
    out = tmp_path / "out.json"
    code = main(["mask", "import", "--format", "selfsd", str(path), "--num-layers", "4", "--out", str(out), *args])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("layersearch: error: ") and message in err
    assert not out.exists()


@pytest.mark.parametrize(
    "content,message",
    [([1, 0, 1], "has 8 entries, not 3"), ([1, 0, 2, 0, 0, 0, 0, 0], "flat list of 0/1"), ("x", "not str")],
)
def test_bad_knapspec_lists(content, message, tmp_path):
    path = tmp_path / "k.json"
    path.write_text(json.dumps(content))
    with pytest.raises(LayersearchError, match=message):
        import_mask(path, "knapspec", num_layers=4)


def test_depth_is_required_and_malformed_json_is_named(tmp_path, capsys):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"m": {"attention": [], "mlp": []}}))
    with pytest.raises(LayersearchError, match="give model or num_layers"):
        import_mask(path, "swift", "m")
    path.write_text("{not json")
    assert main(["mask", "import", "--format", "swift", str(path), "--key", "m", "--num-layers", "4", "--out", str(tmp_path / "o.json")]) == 2
    assert "malformed JSON" in capsys.readouterr().err


def test_cli_import_then_export_round_trip(tmp_path, capsys):
    src = tmp_path / "swift.json"
    src.write_text(json.dumps({"llama-2-13b_chat_cnndm": {"attention": [7, 10], "mlp": [3]}}))
    ours, back = tmp_path / "mask.json", tmp_path / "back.json"
    assert main(["mask", "import", "--format", "swift", str(src), "--key", "llama-2-13b_chat_cnndm",
                 "--num-layers", "40", "--out", str(ours)]) == 0
    assert SkipMask.load(ours).provenance["model_name"] == "llama-2-13b_chat"
    assert main(["mask", "export", "--format", "swift", str(ours), "--key", "llama-2-13b_chat_cnndm", "--out", str(back)]) == 0
    assert json.loads(back.read_text()) == json.loads(src.read_text())
    assert main(["mask", "export", "--format", "selfsd", str(ours), "--out", str(tmp_path / "x.json")]) == 2
    assert "give --key" in capsys.readouterr().err


# ----- an export onto a file of the format merges into it ---------------------------------------
def test_export_merges_into_an_existing_file_and_refuses_another(tmp_path):
    mask = SkipMask(4, (1,), (2,))
    out = tmp_path / "selfsd.json"
    out.write_text(json.dumps({"llama-2-13b": {"attention": [3], "mlp": []}, "mine": {"attention": [], "mlp": [0]}}))
    export_mask(mask, "selfsd", out, "mine")
    assert json.loads(out.read_text()) == {"llama-2-13b": {"attention": [3], "mlp": []}, "mine": {"attention": [1], "mlp": [2]}}
    knapspec = tmp_path / "knapspec.json"
    export_mask(mask, "knapspec", knapspec, "a")
    export_mask(mask, "knapspec", knapspec, "b")
    assert set(json.loads(knapspec.read_text())) == {"a", "b"}
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hi"}\n')
    for fmt, path, key, needle in (("selfsd", prompts, "m", "not a selfsd mask file"),
                                   ("knapspec", out, None, "not a knapspec mask file"),
                                   ("knapspec", knapspec, None, "give key"),
                                   ("swift", tmp_path / "notes.txt", "m_t", "not a swift mask file")):
        if not path.exists():
            path.write_text("mine\n")
        before = path.read_bytes()
        with pytest.raises(LayersearchError, match=needle):
            export_mask(mask, fmt, path, key)
        assert path.read_bytes() == before


@pytest.mark.parametrize("fmt, key", [("selfsd", "m"), ("swift", "m_chat"), ("knnssd", "qa_m"), ("knapspec", None)])
def test_a_plan_is_not_exported_to_a_format_that_drops_its_int8_parts(fmt, key, tmp_path):
    """Every paper's format holds skips only: a plan's int8 parts are named, and nothing is written."""
    from layersearch.common.errors import LayersearchError
    from layersearch.masks.formats import export_mask
    from layersearch.masks.mask import SkipMask

    plan = SkipMask(4, (1,), (2,)).with_int8([0, 3], [], True)
    with pytest.raises(LayersearchError, match=r"int8 parts \(attention 0,3, the LM head\) would be lost"):
        export_mask(plan, fmt, tmp_path / "out.json", key)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt, key", [("selfsd", "m"), ("knapspec", None)])
def test_a_plan_is_not_exported_to_a_format_that_drops_its_int4_parts(fmt, key, tmp_path):
    from layersearch.common.errors import LayersearchError
    from layersearch.masks.formats import export_mask
    from layersearch.masks.mask import SkipMask

    plan = SkipMask(4, (1,), (2,)).with_int8([0], [], False).with_int4([3], [0, 1], True)
    with pytest.raises(LayersearchError, match=r"int8 parts \(attention 0\) and int4 parts \(attention 3, mlp 0,1, "
                                               r"the LM head\) would be lost"):
        export_mask(plan, fmt, tmp_path / "out.json", key)
    assert list(tmp_path.iterdir()) == []
