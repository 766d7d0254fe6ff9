"""The demo's shipped draft plan: package data of layersearch.data, a plan for the embedded model."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

from layersearch.tune import demo
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
