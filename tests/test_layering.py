"""Dependencies point one way: the runtime has no CLI (argparse, printing) and no Optuna, and
no module imports from a higher layer (commands -> study -> objectives -> runtime)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "layersearch"

# Layer -> modules it must never import (lazily or not).
FORBIDDEN = {
    "runtime": ("argparse", "optuna", "layersearch.commands", "layersearch.study", "layersearch.strategies", "layersearch.knapspec",
                "layersearch.objectives", "layersearch.cli", "layersearch.spec", "layersearch.sources", "layersearch.build",
                "layersearch.api"),
    "knapspec": ("argparse", "optuna", "layersearch.commands", "layersearch.study", "layersearch.cli"),
    "knn": ("argparse", "optuna", "layersearch.commands", "layersearch.study", "layersearch.cli"),
    "study": ("argparse", "layersearch.commands", "layersearch.cli"),
    # tune sits between the commands and the study / objectives / runtime it drives.
    "tune": ("argparse", "layersearch.commands", "layersearch.cli"),
    "swift": ("argparse", "layersearch.commands", "layersearch.study", "layersearch.cli"),
    "steer": ("argparse", "optuna", "layersearch.commands", "layersearch.study", "layersearch.cli"),
    "strategies": ("argparse", "layersearch.commands", "layersearch.study", "layersearch.runtime", "layersearch.cli"),
    # The decoder spec and its builder sit below the CLI; the spec (and the mask-source registry) import no torch.
    "spec.py": ("argparse", "optuna", "torch", "transformers", "layersearch.commands", "layersearch.study", "layersearch.cli",
                "layersearch.build", "layersearch.api"),
    "sources.py": ("argparse", "optuna", "torch", "layersearch.commands", "layersearch.study", "layersearch.cli",
                   "layersearch.build", "layersearch.api"),
    "build.py": ("argparse", "optuna", "layersearch.commands", "layersearch.study", "layersearch.cli", "layersearch.api"),
    "api.py": ("argparse", "optuna", "layersearch.commands", "layersearch.study", "layersearch.cli"),
}


def imports_of(path: Path) -> set[str]:
    """Every module name ``path`` imports, at any depth of the file."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layers_import_nothing_above_them(layer):
    bad = []
    target = PACKAGE / layer
    for path in [target] if target.is_file() else sorted(target.rglob("*.py")):
        for name in imports_of(path):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[layer]):
                bad.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert not bad, bad


def test_runtime_prints_nothing():
    calls = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in sorted((PACKAGE / "runtime").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
    ]
    assert not calls, calls
