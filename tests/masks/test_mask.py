"""SkipMask: the value type and its validated JSON file."""

from __future__ import annotations

import json
import re

import pytest

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import ModelInfo, SkipMask

INFO = ModelInfo("m", 4, 64, "abc123")


def test_round_trip_keeps_everything(tmp_path):
    mask = SkipMask(4, (3, 1), (2,), INFO, {"strategy": "swift", "score": 0.9})
    path = mask.save(tmp_path / "m.json")
    loaded = SkipMask.load(path, model=INFO)
    assert loaded == mask and loaded.attention == (1, 3)
    assert loaded.provenance["strategy"] == "swift" and loaded.provenance["score"] == 0.9
    data = json.loads(path.read_text())
    assert data["schema_version"] == 1 and data["model"]["fingerprint"] == "abc123"
    assert set(data["provenance"]) >= {"strategy", "objective", "score", "study", "trial", "created"}


def test_value_is_immutable():
    mask = SkipMask(4, (1,), ())
    with pytest.raises(Exception):
        mask.attention = (2,)  # type: ignore[misc]
    with pytest.raises(TypeError):
        mask.provenance["x"] = 1  # type: ignore[index]


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "malformed JSON"),
        ('{"schema_version": 1, "num_layers": 4, "attention": [4], "mlp": []}', "out of range"),
        ('{"schema_version": 1, "num_layers": 4, "attention": [1, 1], "mlp": []}', "duplicate layer index 1"),
        ('{"schema_version": 1, "num_layers": 4, "attention": [-1], "mlp": []}', "out of range"),
        ('{"schema_version": 1, "num_layers": 4, "attention": ["2"], "mlp": []}', "not an integer"),
        ('{"schema_version": 4, "num_layers": 4, "attention": [], "mlp": []}', r"written by a newer layersearch \(schema_version 4; this version reads up to 3\)"),
        ('{"schema_version": 1, "num_layers": 4, "attention": []}', "missing 'mlp'"),
        ('[1, 2]', "JSON object"),
    ],
)
def test_bad_files_name_the_problem(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(LayersearchError, match=message) as info:
        SkipMask.load(path)
    assert "\n" not in str(info.value)


def test_mask_for_another_model_is_refused(tmp_path):
    path = SkipMask(4, (1,), (), INFO).save(tmp_path / "m.json")
    with pytest.raises(LayersearchError, match="made for model"):
        SkipMask.load(path, model=ModelInfo("other", 4, 64, "fff000"))
    with pytest.raises(LayersearchError, match="4 layers but model"):
        SkipMask.load(path, model=ModelInfo("big", 6, 64, "abc123"))


def test_wrong_layer_count_inside_file(tmp_path):
    data = SkipMask(4, (1,), (), INFO).to_dict()
    data["num_layers"] = 6
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    with pytest.raises(LayersearchError, match="num_layers is 6"):
        SkipMask.load(path)


def test_missing_file():
    with pytest.raises(LayersearchError, match="not found"):
        SkipMask.load("/nonexistent/mask.json")


def test_save_is_atomic(tmp_path, monkeypatch):
    target = tmp_path / "m.json"
    target.write_text("old")
    monkeypatch.setattr("os.replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(LayersearchError, match="disk full; nothing was written"):
        SkipMask(4, (1,), ()).save(target)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_uniform_spreads_and_counts():
    mask = SkipMask.uniform(30, 0.2)
    assert mask.num_skipped == 12 and len(mask.attention) == len(mask.mlp) == 6
    gaps = [b - a for a, b in zip(mask.attention, mask.attention[1:])]
    assert max(gaps) - min(gaps) <= 1
    assert SkipMask.uniform(30, 0).is_empty and SkipMask.uniform(30, 1) == SkipMask.everything(30)
    with pytest.raises(LayersearchError):
        SkipMask.uniform(30, 1.5)


def test_flat_conversion_is_interleaved():
    mask = SkipMask(3, (0, 2), (1,))
    assert mask.to_flat() == (True, False, False, True, True, False)
    assert SkipMask.from_flat(mask.to_flat()) == mask
    assert mask.short_string() == "A:0,2 M:1"


def test_a_plan_round_trips_as_schema_2_and_a_skip_mask_stays_schema_1(tmp_path):
    plan = SkipMask(6, (1,), (4,), None, {}, (0, 2), (0, 1, 2), True)
    path = tmp_path / "plan.json"
    plan.save(path)
    data = json.loads(path.read_text())
    assert data["schema_version"] == 2 and data["int8"] == {"attention": [0, 2], "mlp": [0, 1, 2], "head": True}
    assert SkipMask.load(path) == plan and plan.precision("attention", 2) == "int8" and plan.precision("mlp", 4) == "skip"
    assert plan.skips_only() == SkipMask(6, (1,), (4,)) and not plan.is_empty and plan.skips_only().is_skip_only
    assert SkipMask(6, (1,), (4,)).to_dict()["schema_version"] == 1 and "int8" not in SkipMask(6, (1,), (4,)).to_dict()
    assert plan.short_string() == "A:1 M:4 int8 A:0,2 M:0-2 H"
    assert SkipMask.none(6).kept_in_int8(head=False).short_string() == "A:- M:- int8 A:0-5 M:0-5"


@pytest.mark.parametrize("text, message", [
    ('{"schema_version": 1, "num_layers": 4, "attention": [], "mlp": [], "int8": {"attention": [1]}}', "need schema_version 2"),
    ('{"schema_version": 2, "num_layers": 4, "attention": [1], "mlp": [], "int8": {"attention": [1]}}', "both skipped and int8"),
    ('{"schema_version": 2, "num_layers": 4, "attention": [], "mlp": [], "int8": {"mlp": [9]}}', "out of range"),
    ('{"schema_version": 2, "num_layers": 4, "attention": [], "mlp": [], "int8": {"head": "yes"}}', "int8 head must be true or false"),
    ('{"schema_version": 2, "num_layers": 4, "attention": [], "mlp": [], "int8": {"heads": true}}', "unknown key 'heads'"),
    ('{"schema_version": 2, "num_layers": 4, "attention": [], "mlp": [], "int8": [1]}', "int8 must be an object"),
    ('{"schema_version": 2, "num_layers": 4, "attention": [], "mlp": [], "int4": {"mlp": [1]}}', "int4 sub-layers need schema_version 3"),
    ('{"schema_version": 3, "num_layers": 4, "attention": [], "mlp": [], "int8": {"mlp": [1]}, "int4": {"mlp": [1]}}',
     "mlp sub-layer 1 is both int8 and int4"),
    ('{"schema_version": 3, "num_layers": 4, "attention": [2], "mlp": [], "int4": {"attention": [2]}}', "both skipped and int4"),
    ('{"schema_version": 3, "num_layers": 4, "attention": [], "mlp": [], "int4": {"mlp": [1], "group_size": 100}}',
     "int4 group_size must be one of 32, 64, 128, 256, got 100"),
    ('{"schema_version": 3, "num_layers": 4, "attention": [], "mlp": [], "int4": {"bits": 4}}', "int4 has an unknown key 'bits'"),
    ('{"schema_version": 3, "num_layers": 4, "attention": [], "mlp": [], "int8": {"head": true}, "int4": {"head": true}}',
     "the LM head is both int8 and int4"),
    ('{"schema_version": 9, "num_layers": 4, "attention": [], "mlp": []}', r"written by a newer layersearch \(schema_version 9; this version reads up to 3\): upgrade layersearch"),
    ('{"schema_version": 3, "num_layers": 4, "attention": [], "mlp": [], "int4": {"mlp": [1], "group_size": 64.0}}',
     "int4 group_size must be one of 32, 64, 128, 256, got 64.0"),  # 64.0 == 64, yet no kernel takes a float
    ('{"schema_version": 3, "num_layers": 4, "attention": [], "mlp": [], "int4": {"mlp": [1], "group_size": true}}',
     "int4 group_size must be one of 32, 64, 128, 256, got True"),
    ('{"schema_version": 1, "num_layers": 4, "attention": [], "mlp": [], "provenance": {"score": "1.5"}}',
     "provenance.score must be a finite number, got '1.5'"),
    ('{"schema_version": 1, "num_layers": 4, "attention": [], "mlp": [], "provenance": {"trial": 3.0}}',
     r"provenance.trial must be an integer >= 0, got 3.0"),
])
def test_bad_plan_files_are_refused_in_one_line(tmp_path, text, message):
    path = tmp_path / "plan.json"
    path.write_text(text)
    with pytest.raises(LayersearchError, match=message):
        SkipMask.load(path)


def test_an_int4_plan_round_trips_as_schema_3_and_older_plans_keep_their_versions(tmp_path):
    plan = SkipMask(6, (1,), (4,), None, {}, (0,), (), False, (2, 3), (0, 1, 2), True, 64)
    path = tmp_path / "plan.json"
    plan.save(path)
    data = json.loads(path.read_text())
    assert data["schema_version"] == 3
    assert data["int4"] == {"attention": [2, 3], "mlp": [0, 1, 2], "head": True, "group_size": 64}
    assert data["int8"] == {"attention": [0], "mlp": [], "head": False}
    again = SkipMask.load(path)
    assert again == plan and again.int4_group_size == 64 and again.head_precision == "int4"
    assert [plan.precision("attention", i) for i in range(4)] == ["int8", "skip", "int4", "int4"]
    assert plan.num_int4 == 5 and plan.has_int4 and not plan.is_skip_only
    assert plan.skips_only() == SkipMask(6, (1,), (4,))
    assert plan.short_string() == "A:1 M:4 int8 A:0 M:- int4 A:2,3 M:0-2 H g64"
    int8_plan = SkipMask(6, (1,), (), None, {}, (0,), (), True)
    assert int8_plan.to_dict()["schema_version"] == 2 and "int4" not in int8_plan.to_dict()
    for older in (SkipMask(6, (1,), (4,)), int8_plan):  # files of versions 1 and 2 still read as they were
        older.save(tmp_path / "older.json")
        assert SkipMask.load(tmp_path / "older.json") == older


def test_kept_in_int4_mirrors_kept_in_int8():
    plan = SkipMask(4, (1,), (2,), None, {}, (0,), (0,), True).kept_in_int4(head=False)
    assert plan.int4_attention == (0, 2, 3) and plan.int4_mlp == (0, 1, 3) and not plan.has_int8
    assert plan.int4_head is False and plan.attention == (1,) and plan.mlp == (2,)
    assert SkipMask.none(2).with_int4((0,), (1,), True).precision("mlp", 1) == "int4"
    with pytest.raises(LayersearchError, match="attention sub-layer 0 is both int8 and int4"):
        SkipMask(2, (), (), None, {}, (0,), (), False, (0,), ())


def test_mask_show_marks_int4_sub_layers():
    from layersearch.masks.mask import render_mask

    text = render_mask(SkipMask(4, (1,), (), None, {}, (0,), (), False, (2,), (0, 1, 2, 3), True))
    assert "attn  8 x 4 ." in text and "mlp   4 4 4 4" in text and "LM head int4" in text and "4 = int4" in text


def test_mask_show_draws_each_sub_layers_precision():
    from layersearch.masks.mask import render_mask

    text = render_mask(SkipMask(4, (1,), (), None, {}, (0, 2), (0, 1, 2, 3), True))
    assert "attn  8 x 8 ." in text and "mlp   8 8 8 8" in text and "LM head int8" in text and "8 = int8" in text


@pytest.mark.parametrize("call, says", [
    (lambda: SkipMask.load(None), "mask file must be a path (str or Path), got NoneType"),
    (lambda: SkipMask.load("mask\0.json"), "contains a NUL character"),
    (lambda: SkipMask(4).save(None), "mask file must be a path"),
    (lambda: SkipMask.none(4).with_int8(None, [], True), "int8 attention must be a list of layer indices, got NoneType"),
    (lambda: SkipMask.none(4).with_int8([1], 5, False), "int8 mlp must be a list of layer indices, got int"),
    (lambda: SkipMask(4, "1"), "attention must be a list of layer indices, got str"),
    (lambda: SkipMask(4, model="m"), "model must be a ModelInfo or None, got str"),
    (lambda: SkipMask(4, provenance=3), "provenance must be a mapping, got int"),
    (lambda: SkipMask.none(None), "num_layers must be an integer"),
    (lambda: SkipMask.everything("4"), "num_layers must be an integer"),
    (lambda: SkipMask.uniform("4", 0.5), "num_layers must be an integer"),
    (lambda: SkipMask.from_flat(None), "a flat mask must be a list"),
    (lambda: SkipMask.none(4).with_model("m"), "model must be a ModelInfo or None"),
])
def test_the_api_raises_only_layersearch_errors(call, says):
    """SkipMask's constructors, load and save: a bad argument is one LayersearchError, never a TypeError."""
    with pytest.raises(LayersearchError, match=re.escape(says)):
        call()


@pytest.mark.parametrize("change, says", [
    (lambda d: d.__setitem__("INT8", d.pop("int8")), "unknown key 'INT8'"),
    (lambda d: d.__setitem__("precision", {"attention.0": "fp4"}), "unknown key 'precision'"),
    (lambda d: d["int8"].__setitem__("int4", [1]), "int8 has an unknown key 'int4'"),
    (lambda d: json.dumps(d).replace('"mlp": [2]', '"mlp": [2], "mlp": [3]', 1), "key 'mlp' appears twice"),
    (lambda d: d["model"].__setitem__("num_layers", 6), "num_layers is 4 but model.num_layers"),
])
def test_a_plan_says_nothing_we_do_not_read(tmp_path, change, says):
    """Unknown and repeated keys are refused: a misspelt int8 section never runs as all full precision."""
    data = SkipMask(4, (1,), (2,), ModelInfo("m", 4, 8, "f" * 16)).with_int8([0], [0], False).to_dict()
    text = change(data)
    (tmp_path / "plan.json").write_text(text if isinstance(text, str) else json.dumps(data))
    with pytest.raises(LayersearchError, match=re.escape(says)):
        SkipMask.load(tmp_path / "plan.json")
