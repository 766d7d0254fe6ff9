"""Dependencies point one way.

The top-level packages stand in layers (:data:`LAYERS`, bottom to top; docs/design.md draws the
map): a package imports only packages of lower layers, never one of its own layer (the methods
are independent of each other), and the graph of top-level packages has no cycle, counting every
import in a file (lazy ones inside functions and ``TYPE_CHECKING`` ones too). Besides: only the
CLI imports argparse, only the search imports Optuna, the runtime prints nothing, the decoder
spec imports no torch, no two modules import each other in a circle while loading, and only the
CLI speaks of command-line flags."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "layersearch"

METHODS = ("disco", "frspec", "knapspec", "knn", "steer", "swift")
#: The top-level packages, bottom to top: each imports only packages of the layers below it.
LAYERS = (
    ("common",),  # errors, checks, input and output files: imports nothing of layersearch
    ("masks", "kernels"),  # skip masks (draft plans) and their files; the CPU kernels
    ("models",),  # loading models (HF, GGUF), skipping sub-layers, int8 twins
    ("runtime", "data"),  # the decode loop and its plug-in points; the prompt sets
    ("profiling", *METHODS),  # the latency profile; each method's decode-time parts and how its file is fitted
    ("decoder",),  # the spec and the builder: where the methods meet the runtime; load_decoder
    ("evaluation", "objectives", "strategies", "integrations"),  # the harness and its benchmarks; what a search scores,
    # how it proposes; decoders inside other libraries' entry points (transformers' generate)
    ("experiments", "study"),  # each method's experiments (fit, then bench); the Optuna study
    ("tune",),  # tuning a whole decoder spec with studies
    ("commands",),  # the CLI's subcommands (cli.py, the entry point, sits on top)
)
ENTRY_POINTS = ("__init__.py", "__main__.py", "cli.py")  # the package itself and the CLI's entry point
LAYER = {package: i for i, layer in enumerate(LAYERS) for package in layer}

#: Only the CLI parses arguments, and only the search (and its pictures) imports Optuna.
ARGPARSE_USERS = ("commands", "cli.py")
#: Only the CLI speaks of its flags (``--max-draft``): below it errors name API arguments and spec fields.
FLAG_USERS = ARGPARSE_USERS
FLAG = re.compile(r"--[a-z][a-z0-9-]+")
#: Another program's flags, in the commands these modules tell the user to run (pip's).
FOREIGN_FLAGS = {
    "data/_common.py": ("--force-reinstall",),
    "data/gsm.py": ("--upgrade",),
    "data/sql.py": ("--no-deps", "--no-binary"),
    "models/loading.py": ("--no-deps",),
    # pip's flags, and vLLM's server options in the README an export writes (vLLM's, not ours)
    "integrations/vllm/install.py": ("--quiet", "--upgrade", "--yes", "--no-deps", "--force-reinstall"),
    "integrations/vllm_export.py": ("--no-deps", "--model", "--dtype", "--speculative-config"),
}
OPTUNA_USERS = ("strategies", "study", "tune", "commands", "evaluation/plots.py")
#: Further rules, by package or module path: names it must never import (lazily or not).
NO_TORCH = ("torch", "transformers")
FORBIDDEN = {
    # The spec, its fragments and the mask-source registry are read for --help and by the
    # search's parent process: no torch. The spec knows nothing of how it is built.
    "decoder/spec.py": (*NO_TORCH, "layersearch.decoder.build", "layersearch.decoder.api"),
    "decoder/fragments.py": (*NO_TORCH, "layersearch.decoder.build", "layersearch.decoder.api"),
    "decoder/sources.py": ("torch", "layersearch.decoder.build", "layersearch.decoder.api"),
    "decoder/build.py": ("layersearch.decoder.api",),
    # The one measurement harness sits below the benchmarks built on it.
    "evaluation/measure.py": ("layersearch.evaluation.bench", "layersearch.evaluation.transfer", "layersearch.evaluation.specbench",
                              "layersearch.evaluation.plots"),
    "evaluation/bench.py": ("layersearch.evaluation.transfer", "layersearch.evaluation.plots"),
    # The pictures read studies' trials and result files, never run anything.
    "evaluation/plots.py": ("layersearch.runtime", "layersearch.decoder", "layersearch.evaluation.measure",
                            *(f"layersearch.{m}" for m in METHODS)),
    # What a search scores is method-free: a method's search space is its strategy's business.
    "objectives": tuple(f"layersearch.{m}" for m in METHODS),
    # The strategies propose masks from trials: they run no model (the objectives do).
    "strategies": ("layersearch.runtime", "layersearch.objectives", "layersearch.decoder", "layersearch.evaluation"),
    # GP proposals serve the strategies and SWIFT on the fly alike: no model, no runtime.
    "swift/proposals.py": ("layersearch.runtime", "layersearch.models", "layersearch.data"),
    "swift/search.py": ("layersearch.runtime", "layersearch.models", "layersearch.data"),
    # The light package roots: the CLI reads their names for --help.
    "kernels/__init__.py": ("torch", "numba"),
    "runtime/__init__.py": NO_TORCH,
    "runtime/drafters/__init__.py": NO_TORCH,
}


def imports_in(path: Path) -> list[tuple[str, int]]:
    """Every module name ``path`` imports, at any depth of the file (inside functions, under
    ``if TYPE_CHECKING:``), with its line; relative imports resolved, and ``from pkg import mod``
    read as ``pkg.mod`` (a name that is not a module is found by its package all the same)."""
    here = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = here[:-1]
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def top_level(name: str) -> str | None:
    """``layersearch.decoder.build.assemble`` -> ``decoder``; None outside layersearch or for
    the package root's own names (``from layersearch import load_decoder``)."""
    parts = name.split(".")
    if parts[0] != "layersearch" or len(parts) < 2:
        return None
    if (PACKAGE / parts[1]).is_dir() or (PACKAGE / f"{parts[1]}.py").is_file():
        return parts[1]
    return None


def owner(path: Path) -> str:
    """The top-level package (or entry-point module, ``cli``) a file belongs to."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def package_graph() -> dict[str, dict[str, list[str]]]:
    """Top-level package -> each top-level package it imports -> where (``path:line``)."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = owner(path)
        edges = graph.setdefault(source, {})
        for name, line in imports_in(path):
            target = top_level(name)
            place = f"{path.relative_to(PACKAGE)}:{line}"
            if target is not None and target != source and place not in edges.get(target, ()):
                edges.setdefault(target, []).append(place)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that returns to its start (``[a, b, a]``), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return path[path.index(w):] + [w]
            if w not in state and (cycle := visit(w)) is not None:
                return cycle
        state[v] = 2
        path.pop()
        return None

    for v in sorted(graph):
        if v not in state and (cycle := visit(v)) is not None:
            return cycle
    return None


def test_no_cycles_between_top_level_packages():
    graph = package_graph()
    cycle = find_cycle({source: set(targets) for source, targets in graph.items()})
    where = [] if cycle is None else [f"{a} -> {b}: {', '.join(graph[a][b][:3])}" for a, b in zip(cycle, cycle[1:])]
    assert cycle is None, "import cycle " + " -> ".join(cycle or ()) + "\n" + "\n".join(where)


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_the_layout_has_no_loose_modules():
    """Every top-level package stands in a layer; the only top-level modules are the entry points
    (a new module goes into the package of its concept)."""
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.name for p in PACKAGE.glob("*.py")}
    assert packages == set(LAYER)
    assert modules == set(ENTRY_POINTS)


def test_packages_import_only_lower_layers():
    bad = [
        f"{where} ({source}, layer {LAYER[source]}) imports {target} (layer {LAYER[target]})"
        for source, targets in package_graph().items() if source in LAYER
        for target, places in targets.items() if target in LAYER and LAYER[target] >= LAYER[source]
        for where in places
    ]
    assert not bad, "\n".join(bad)


def files_of(rule: str) -> list[Path]:
    """The files a rule's key names: a package (all its modules) or one module."""
    target = PACKAGE / rule
    return [target] if target.is_file() else sorted(target.rglob("*.py"))


def offending(paths: list[Path], names: tuple[str, ...]) -> list[str]:
    """``path:line imports name`` for each import in ``paths`` of one of ``names`` (or below it)."""
    return [
        f"{path.relative_to(PACKAGE)}:{line} imports {name}"
        for path in paths
        for name, line in imports_in(path)
        if any(name == n or name.startswith(n + ".") for n in names)
    ]


@pytest.mark.parametrize("rule", sorted(FORBIDDEN))
def test_modules_import_nothing_forbidden(rule):
    assert files_of(rule), f"{rule}: no such package or module (update the rule)"
    bad = offending(files_of(rule), FORBIDDEN[rule])
    assert not bad, bad


@pytest.mark.parametrize(("library", "users"), [("argparse", ARGPARSE_USERS), ("optuna", OPTUNA_USERS)])
def test_only_their_users_import_argparse_and_optuna(library, users):
    allowed = {path for rule in users for path in files_of(rule)}
    bad = offending([p for p in sorted(PACKAGE.rglob("*.py")) if p not in allowed], (library,))
    assert not bad, bad


def docstring_nodes(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def flag_strings(path: Path) -> list[str]:
    """``path:line: --flag`` for each command-line flag in a string constant of ``path`` (f-string
    parts included; docstrings and comments aside)."""
    tree = ast.parse(path.read_text())
    docstrings = docstring_nodes(tree)
    return [
        f"{path.relative_to(PACKAGE)}:{node.lineno}: {flag}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        for flag in FLAG.findall(node.value)
        if flag not in FOREIGN_FLAGS.get(path.relative_to(PACKAGE).as_posix(), ())
    ]


def test_only_the_cli_speaks_of_flags():
    allowed = {path for rule in FLAG_USERS for path in files_of(rule)}
    bad = [line for path in sorted(PACKAGE.rglob("*.py")) if path not in allowed for line in flag_strings(path)]
    assert not bad, "\n".join(bad)


def test_the_flag_finder_finds_flags_and_skips_docstrings(tmp_path, monkeypatch):
    monkeypatch.setitem(globals(), "PACKAGE", tmp_path)
    path = tmp_path / "m.py"
    path.write_text('"""--doc-flag."""\n\ndef f(x):\n    """--inner."""\n    # --comment\n'
                    '    return f"--max-draft {x}", "a --b", "--", "---", "x--y"\n')
    assert [line.rpartition(": ")[2] for line in flag_strings(path)] == ["--max-draft"]


#: Docstrings below the CLI that still name a flag, to be reworded to the spec field or API argument
#: (module: its flags); entries only ever go away.
DOC_FLAGS_LEFT: dict[str, tuple[str, ...]] = {}


def doc_flags(path: Path) -> list[str]:
    """``path:line: --flag`` for each command-line flag in a docstring or comment of ``path``."""
    text = path.read_text()
    rel = path.relative_to(PACKAGE).as_posix()
    docstrings = docstring_nodes(tree := ast.parse(text))
    texts = [(node.lineno, node.value) for node in ast.walk(tree) if id(node) in docstrings]
    texts += [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
              if tok.type == tokenize.COMMENT]
    allowed = FOREIGN_FLAGS.get(rel, ()) + DOC_FLAGS_LEFT.get(rel, ())
    return [f"{rel}:{line}: {flag}" for line, words in sorted(texts) for flag in FLAG.findall(words) if flag not in allowed]


def test_docstrings_below_the_cli_name_fields_not_flags():
    """Below the CLI, docstrings and comments name spec fields (``lookahead.max_draft``) and API
    arguments (``kernels=``), as its errors do, not the options that set them."""
    allowed = {path for rule in FLAG_USERS for path in files_of(rule)}
    bad = [line for path in sorted(PACKAGE.rglob("*.py")) if path not in allowed for line in doc_flags(path)]
    assert not bad, "\n".join(bad)


def test_the_docstring_flag_finder_finds_flags_in_docstrings_and_comments(tmp_path, monkeypatch):
    monkeypatch.setitem(globals(), "PACKAGE", tmp_path)
    path = tmp_path / "m.py"
    path.write_text('"""--doc-flag."""\n\ndef f(x):\n    """``--inner`` and lookahead.max_draft."""\n    # --comment\n'
                    '    return f"--max-draft {x}", "a --b", "--", "---", "x--y"  # x--y, -- and ---\n')
    assert [line.rpartition(": ")[2] for line in doc_flags(path)] == ["--doc-flag", "--inner", "--comment"]


def test_runtime_prints_nothing():
    calls = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in sorted((PACKAGE / "runtime").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
    ]
    assert not calls, calls


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
