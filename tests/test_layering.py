"""Dependencies point one way: the runtime has no CLI (argparse, printing) and no Optuna, no
module imports from a higher layer (commands -> study -> objectives -> runtime), every package and
top-level module has a rule here, and no layersearch modules import each other in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "layersearch"

ABOVE = ("argparse", "layersearch.commands", "layersearch.cli")  # the CLI: nothing below it may import it
METHODS = ("layersearch.knapspec", "layersearch.knn", "layersearch.swift", "layersearch.steer", "layersearch.disco")
# Harness and core modules sit below every method package and the study.
BELOW_METHODS = (*ABOVE, "optuna", "layersearch.study", "layersearch.strategies", "layersearch.objectives", *METHODS)
CORE = (*BELOW_METHODS, "layersearch.runtime", "layersearch.evaluation.measure", "layersearch.evaluation.bench", "layersearch.evaluation.transfer",
        "layersearch.decoder.spec", "layersearch.decoder.sources", "layersearch.decoder.build", "layersearch.decoder.api")

# Layer -> modules it must never import (lazily or not).
FORBIDDEN = {
    "runtime": ("argparse", "optuna", "layersearch.commands", "layersearch.study", "layersearch.strategies", "layersearch.knapspec",
                "layersearch.objectives", "layersearch.cli", "layersearch.decoder.spec", "layersearch.decoder.sources", "layersearch.decoder.build",
                "layersearch.decoder.api", "layersearch.evaluation.measure", "layersearch.evaluation.bench", "layersearch.evaluation.transfer", "layersearch.data",
                "layersearch.swift.proposals", *METHODS),
    "models": (*CORE, "layersearch.data", "layersearch.swift.proposals"),
    "data": (*CORE, "layersearch.models", "layersearch.swift.proposals"),
    "objectives": (*ABOVE, "optuna", "layersearch.study", "layersearch.strategies", *METHODS),
    # The method packages: their file format, fitting, plug-in and bench; none imports another
    # method's package, the search strategies (the knapsack strategy imports KnapSpec) or the CLI.
    "knapspec": ("argparse", "optuna", "layersearch.commands", "layersearch.study", "layersearch.cli", "layersearch.strategies"),
    "knn": ("argparse", "optuna", "layersearch.commands", "layersearch.study", "layersearch.cli", "layersearch.strategies"),
    "study": ("argparse", "layersearch.commands", "layersearch.cli"),
    # tune sits between the commands and the study / objectives / runtime it drives.
    "tune": ("argparse", "layersearch.commands", "layersearch.cli"),
    # SWIFT on the fly (generate --mask swift) pulls no Optuna: its search is swift/search.py.
    "swift": ("argparse", "optuna", "layersearch.commands", "layersearch.study", "layersearch.cli", "layersearch.strategies"),
    "steer": ("argparse", "optuna", "layersearch.commands", "layersearch.study", "layersearch.cli", "layersearch.strategies"),
    "disco": ("argparse", "optuna", "layersearch.commands", "layersearch.study", "layersearch.cli", "layersearch.strategies"),
    "strategies": ("argparse", "layersearch.commands", "layersearch.study", "layersearch.runtime", "layersearch.cli",
                   "layersearch.objectives"),
    "commands": ("layersearch.cli",),  # the top layer: only the entry point sits above it
    # The decoder spec and its builder sit below the CLI; the spec (and the mask-source registry) import no torch.
    "spec.py": ("argparse", "optuna", "torch", "transformers", "layersearch.commands", "layersearch.study", "layersearch.cli",
                "layersearch.decoder.build", "layersearch.decoder.api"),
    # Spec fragments and the item grammar (bench's, tune's, generate's): below the CLI, no torch.
    "spec_fragments.py": ("argparse", "optuna", "torch", "transformers", "layersearch.commands", "layersearch.study",
                          "layersearch.cli", "layersearch.decoder.build", "layersearch.decoder.api"),
    "sources.py": ("argparse", "optuna", "torch", "layersearch.commands", "layersearch.study", "layersearch.cli",
                   "layersearch.decoder.build", "layersearch.decoder.api"),
    "build.py": ("argparse", "optuna", "layersearch.commands", "layersearch.study", "layersearch.cli", "layersearch.decoder.api"),
    "api.py": ("argparse", "optuna", "layersearch.commands", "layersearch.study", "layersearch.cli"),
    # The one measurement harness, and the benchmarks built directly on it, below every method.
    "measure.py": (*BELOW_METHODS, "layersearch.evaluation.bench", "layersearch.evaluation.transfer", "layersearch.evaluation.specbench"),
    "bench.py": (*BELOW_METHODS, "layersearch.evaluation.transfer"),
    "transfer.py": BELOW_METHODS,
    "specbench.py": BELOW_METHODS,
    # Mask proposals (random, GP) for the strategies and SWIFT on the fly: no Optuna, no runtime.
    "proposals.py": (*CORE, "layersearch.models", "layersearch.data"),
    **{f"{name}.py": CORE for name in ("mask", "mask_formats", "modelfile", "checks", "errors", "inputs", "jsonfile", "outputs",
                                         "profile", "progress", "extras")},
    # The pictures read studies' trials (Optuna's), never run anything.
    "plots.py": (*ABOVE, "layersearch.study", "layersearch.strategies", "layersearch.runtime", *METHODS),
    # FR-Spec's vocabulary file is fitted with the runtime's decoder: it sits above the runtime.
    "vocab.py": BELOW_METHODS,
}
ENTRY_POINTS = ("__init__.py", "__main__.py", "cli.py")  # the package itself and the CLI's entry point


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


def test_every_package_and_module_has_a_rule():
    """A new package or top-level module must say here what it may not import."""
    present = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    present |= {p.name for p in PACKAGE.glob("*.py")} - set(ENTRY_POINTS)
    assert present - set(FORBIDDEN) == set()


def module_name(path: Path) -> str:
    """``layersearch/runtime/__init__.py`` -> ``layersearch.runtime``."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def executed_imports(path: Path, modules: set[str]) -> set[str]:
    """The layersearch modules ``path`` imports, lazily (inside functions) or not.

    Two kinds are left out, because they cannot run while the importing module is still loading:
    imports under ``if TYPE_CHECKING:`` (never executed), and a package ``__init__`` loading its
    own submodules inside a function (the registries' factories and PEP 562 ``__getattr__``
    import their module on first use, after the package finished loading)."""
    name = module_name(path)
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child, in_function)
            return
        in_function = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            own_submodule = is_package and target.startswith(name + ".")
            if target and target != name and not (in_function and own_submodule):
                found.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child, in_function)

    visit(ast.parse(path.read_text()), False)
    return found


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return circles


def test_no_import_circles():
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {name: executed_imports(path, set(paths)) for name, path in paths.items()}
    assert import_circles(graph) == []


def test_the_circle_finder_finds_circles():
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []
