"""``layersearch demo``: the shipped draft plan (package data) and the plan rows beside tune's table."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest

from layersearch.commands import demo
from layersearch.masks.mask import SkipMask

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_plan_is_a_plan_for_the_embedded_model():
    plan = SkipMask.load(demo.shipped_plan())
    assert plan.model is not None and plan.model.name == "smollm2-135m" and plan.num_layers == 30
    assert plan.has_int8 and not plan.is_empty
    assert plan.provenance.get("study")  # exported from the search recorded in docs/results.md


def test_a_clean_install_ships_the_plan():
    """The plan is package data of layersearch.data: pyproject's globs take it into the wheel."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["layersearch.data"]
    relative = "/".join(demo.PLAN_FILE)
    assert any(fnmatch(relative, pattern) for pattern in globs)
    assert (ROOT / "layersearch" / "data" / relative).is_file()


@pytest.mark.embedded
def test_demo_prints_the_plan_rows_beside_tune(tmp_path, capsys, embedded_dir):
    from layersearch.cli import main

    assert main(["demo", "--budget", "5", "--max-new-tokens", "12", "--threads", "1", "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    tune_table, plan_table = out.split("the model as its own draft", 1)
    assert "chosen:" in tune_table
    lines = plan_table.splitlines()
    for label in ("plain generate", "ours: prompt-lookup", "ours: int8 self-draft", "ours: searched plan",
                  "ours: hybrid (searched plan)"):
        (row,) = [line for line in lines if line.startswith(label)]
        assert row.rstrip().endswith("yes"), row  # every row's output is plain decoding's
    assert f"--mask {demo.shipped_plan()}" in out
