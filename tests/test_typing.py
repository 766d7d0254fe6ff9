"""The package is typed: mypy, with the configuration in pyproject.toml, finds no error in any
of layersearch/ (models/ included, which the captured path stands on)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("layersearch",)


@pytest.mark.slow
def test_mypy_finds_no_error_in_the_typed_packages():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    run = subprocess.run([sys.executable, "-m", "mypy", *PACKAGES],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr


def test_mypy_checks_the_typed_packages():
    """The configuration names the whole package, so a bare ``mypy`` checks all of it."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert tuple(project["tool"]["mypy"]["files"]) == PACKAGES
    assert any(need.startswith("mypy") for need in project["project"]["optional-dependencies"]["test"])


MIXED = '''
import torch
from layersearch.runtime.step import DeviceIds, HostIds, StepRequest, Verdict

def newest_on_device(request: StepRequest) -> DeviceIds:
    return request.sequence[-1:]  # the CPU sequence where device ids are due

def verdict(ids: torch.Tensor) -> Verdict:
    return Verdict(1, 2, next_ids=ids)  # an unmarked tensor

def sequence(ids: DeviceIds) -> HostIds:
    return ids  # device ids where CPU ids are due
'''


@pytest.mark.slow
def test_mypy_refuses_host_ids_where_device_ids_are_due(tmp_path):
    """Where the step's token ids live is in their types: mypy refuses to mix them."""
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    snippet = tmp_path / "mixed.py"
    snippet.write_text(MIXED)
    run = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", str(snippet)],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 3, run.stdout + run.stderr
    assert all(("DeviceIds" in e or "HostIds" in e) for e in errors), errors
