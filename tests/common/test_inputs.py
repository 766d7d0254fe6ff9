"""Issue 16 items 6 and 9: any input file costs bounded work and memory, and bad bytes get one line."""

from __future__ import annotations

import json
import os
import resource

import pytest

from layersearch.common.errors import LayersearchError
from layersearch.common.inputs import json_depth, parse_json, read_text
from layersearch.masks.mask import SkipMask


def test_a_long_index_list_names_its_first_duplicate(tmp_path):
    # 409,600 indices: the quadratic duplicate check of old would not finish this test at all
    # (its speed is a benchmark's business, not a limit here).
    path = tmp_path / "dups.json"
    path.write_text(json.dumps({"schema_version": 1, "num_layers": 4096, "attention": list(range(4096)) * 100, "mlp": []}))
    with pytest.raises(LayersearchError, match="duplicate layer index 0"):
        SkipMask.load(path)


def test_a_mask_claiming_a_billion_layers_is_refused_without_allocating(tmp_path):
    path = tmp_path / "huge.json"
    path.write_text('{"schema_version":1,"num_layers":1000000000,"attention":[],"mlp":[]}')
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(LayersearchError, match="beyond any model"):
        SkipMask.load(path)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # KB


def test_json_limits_depth_and_integer_length_but_not_brackets_in_strings():
    assert json_depth('{"a": "[[[[[[[[", "b": [1, [2]]}') == 3
    assert parse_json('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}', "x") == {"a": "[" * 40}
    with pytest.raises(LayersearchError, match="nested 100000 levels"):
        parse_json("[" * 100_000 + "]" * 100_000, "x")
    with pytest.raises(LayersearchError, match="integer with 5000 digits"):
        parse_json("9" * 5000, "x")


@pytest.mark.parametrize("data, needle", [
    (b'{"prompt": "caf\xe9"}\n', r"not UTF-8 text \(byte 0xe9 on line 1\)"),
    (bytes(range(256)), "not UTF-8 text"),
])
def test_non_utf8_input_names_the_byte(tmp_path, data, needle):
    path = tmp_path / "in.json"
    path.write_bytes(data)
    with pytest.raises(LayersearchError, match=needle):
        read_text(path, "prompts")


def test_a_bom_is_accepted_and_size_is_bounded(tmp_path):
    path = tmp_path / "in.json"
    path.write_bytes(b"\xef\xbb\xbf{}")
    assert read_text(path, "mask") == "{}"
    path.write_bytes(b" " * 2000)
    with pytest.raises(LayersearchError, match="too large"):
        read_text(path, "mask", max_bytes=1000)


# ----- one input opener; what is not a regular file is refused, never waited on -------------------
@pytest.mark.parametrize("make, needle", [
    (lambda p: os.mkfifo(p), "is a FIFO"),
    (lambda p: p.mkdir(), "is a directory"),
])
def test_the_input_opener_refuses_what_is_not_a_regular_file(tmp_path, make, needle):
    from layersearch.common.inputs import open_input, read_text

    path = tmp_path / "mask.json"
    make(path)
    for read in (lambda: read_text(path, "mask"), lambda: open_input(path, "mask")):
        with pytest.raises(LayersearchError, match=needle):
            read()
    with pytest.raises(LayersearchError, match="is a device"):
        read_text(os.devnull, "mask")
    with pytest.raises(LayersearchError, match="name is empty"):
        read_text("", "mask")  # Path("") would be the current folder


def test_domain_options_map_names_to_values_once():
    from layersearch.common.inputs import domain_options

    assert domain_options(["code=a.json", "math=b.json"], "--mask", "DOMAIN=FILE") == {"code": "a.json", "math": "b.json"}
    with pytest.raises(LayersearchError, match="--mask takes DOMAIN=FILE, got 'code'"):
        domain_options(["code"], "--mask", "DOMAIN=FILE")
    with pytest.raises(LayersearchError, match="two masks for domain 'code'"):
        domain_options(["code=a", "code=b"], "--mask", "DOMAIN=FILE")
