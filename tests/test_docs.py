"""docs/cli.md is the command reference: its command table lists exactly the commands (and their
actions) that the CLI's parser registers, each with the extras that command checks for."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from layersearch.cli import build_parser
from layersearch.commands.requires import needed_extras

CLI_MD = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def registered_commands() -> dict[str, argparse.ArgumentParser]:
    """``command`` or ``command action`` -> its parser, read from the CLI's own parser."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subparsers and prefix:
            found[prefix] = parser
        for action in subparsers:
            for name, child in action.choices.items():
                walk(child, f"{prefix} {name}".strip())

    walk(build_parser(), "")
    return found


def documented_commands() -> dict[str, str]:
    """The rows of docs/cli.md's command table: ``command`` -> its extra column."""
    text = CLI_MD.read_text()
    table = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `layersearch ([a-z0-9 -]+)` \|.*\| ([^|]+) \|$", table, re.M)}


def test_cli_md_lists_every_registered_command_and_no_other():
    registered, documented = set(registered_commands()), set(documented_commands())
    assert registered - documented == set(), "commands missing from docs/cli.md"
    assert documented - registered == set(), "docs/cli.md lists commands the CLI does not have"


def test_cli_md_names_each_commands_extras():
    documented = documented_commands()
    for name, parser in registered_commands().items():
        command, _, action = name.partition(" ")
        # What the command parses to with its defaults (set_defaults names old spellings' modules).
        args = argparse.Namespace(**{a.dest: a.default for a in parser._actions}, **parser._defaults)
        args.command, args.action = getattr(args, "command", None) or command, action or None
        needed, column = needed_extras(args), documented[name]
        for extra in needed:
            assert extra in column.split("(")[0], f"{name}: docs/cli.md says {column!r}, the CLI checks {extra!r}"
        if not needed:
            assert column.startswith("base"), f"{name}: needs no extra, docs/cli.md says {column!r}"


# ----- every API name the docs mention exists -------------------------------------------------------
DOCS = (Path(__file__).resolve().parents[1] / "README.md", *sorted((CLI_MD.parent).glob("*.md")))
#: Where a name the docs start a dotted API name with lives (``layersearch.X`` is imported as itself).
ROOTS = {"load_decoder": "layersearch.decoder.api", "Decoder": "layersearch.decoder.api",
         "Generation": "layersearch.decoder.api", "DecoderSpec": "layersearch.decoder.spec",
         "LayersearchError": "layersearch.common.errors", "SpeculativeDecoder": "layersearch.runtime.loop",
         "DraftPolicy": "layersearch.runtime.draft_policy"}
#: Names docs/design.md lists as gone (old spellings): each must really be gone.
GONE = {"layersearch.swift.stream", "layersearch.strategies._gp", "layersearch.evaluation.bench.Config",
        "SpeculativeDecoder.policy", "DraftPolicy.adaptive_threshold"}
#: A backticked span that is a dotted API name, alone or called: `layersearch.load_decoder("spec.json")`.
API_SPAN = re.compile(rf"`((?:layersearch|{'|'.join(ROOTS)})(?:\.[A-Za-z_]\w*)*)(?:\([^`]*\))?`")


def documented_api_names() -> dict[str, str]:
    """Each dotted API name in backticks in README.md and docs/*.md -> the first file naming it."""
    found: dict[str, str] = {}
    for path in DOCS:
        for match in API_SPAN.finditer(path.read_text()):
            if match.group(1) != "layersearch":  # the package itself
                found.setdefault(match.group(1), path.name)
    return found


def resolves(name: str) -> bool:
    """Whether ``name`` is a module, or an attribute reached from one (an attribute a class's
    ``__init__`` assigns, ``self.lookahead = ...``, counts as the class's)."""
    import importlib
    import inspect

    parts = name.split(".")
    if parts[0] in ROOTS:
        obj, rest = importlib.import_module(ROOTS[parts[0]]), parts
    else:
        for end in range(len(parts), 0, -1):
            try:
                obj, rest = importlib.import_module(".".join(parts[:end])), parts[end:]
                break
            except ModuleNotFoundError:
                continue
        else:
            return False
    for index, part in enumerate(rest):
        if hasattr(obj, part):
            obj = getattr(obj, part)
        elif inspect.isclass(obj) and re.search(rf"\bself\.{part}\s*[:=]", inspect.getsource(obj)):
            return index == len(rest) - 1  # an instance attribute: nothing to follow past it
        else:
            return False
    return True


def test_the_docs_find_api_names():
    names = documented_api_names()
    assert {"layersearch.load_decoder", "Decoder.capture_stats", "Decoder.generate"} <= set(names)  # the parser reads them


def test_every_api_name_the_docs_mention_exists():
    names = documented_api_names()
    missing = {name: where for name, where in names.items() if name not in GONE and not resolves(name)}
    assert missing == {}, "the docs name API that does not exist"
    assert {name for name in GONE if resolves(name)} == set(), "a name the docs call gone still exists"


# ----- every promise of token equality says in which dtype it holds -------------------------------
# Greedy speculative output is plain decoding's token for token in fp32; in bf16/fp16 a forward over
# k+1 tokens rounds differently from a one-token forward, so near-ties can break differently. A text
# that promises equal tokens must say so in the same paragraph (README.md: "Lossless: what holds").
ROOT = CLI_MD.parents[1]
#: A phrase promising greedy output equal to plain decoding's.
EQUALITY = re.compile(r"token[- ]for[- ]token|token[- ]by[- ]token|token-identical"
                      r"|identical to (?:plain|HF|transformers|`*(?:model\.)?generate)"
                      r"|equals? (?:plain |the model's own (?:greedy )?)?`*(?:model\.)?generate", re.IGNORECASE)
#: What the paragraph of such a phrase must name: the dtype the equality holds in.
DTYPE_CONDITION = re.compile(r"\b(?:fp32|float32)\b", re.IGNORECASE)
#: The Python modules whose text users read as documentation: the package's and the integrations' docstrings,
#: the Python API and the folder ``export-hf`` writes.
API_MODULES = ("layersearch/__init__.py", "layersearch/decoder/api.py", "layersearch/integrations/hf_generate.py",
               "layersearch/integrations/export.py", "layersearch/integrations/arguments.py")


def paragraphs(text: str) -> list[str]:
    """``text``'s paragraphs: blocks between blank lines, each markdown table row and list item its own."""
    found: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        found += [part for part in re.split(r"\n(?=\s*(?:\||[-*] ))", block) if part.strip()]
    return found


def unconditional_promises(text: str) -> list[str]:
    """The paragraphs of ``text`` that promise equal tokens without naming fp32."""
    return [" ".join(p.split())[:160] for p in paragraphs(text) if EQUALITY.search(p) and not DTYPE_CONDITION.search(p)]


def help_texts() -> list[str]:
    """Every description and option help of the CLI's parsers."""
    texts: list[str] = []

    def walk(parser: argparse.ArgumentParser) -> None:
        texts.append(parser.description or "")
        for action in parser._actions:
            texts.append(action.help or "")
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    walk(child)

    walk(build_parser())
    return [t for t in texts if t]


@pytest.mark.parametrize("text", [
    "Greedy output equals `model.generate` token for token; sampled output follows the model's distribution.",
    "so greedy output is token-for-token what `model.generate` gives",
    "every output token-identical to plain decoding",
    "runs the spec (greedy output equals plain generate's)",
])
def test_the_check_catches_a_promise_without_its_dtype(text):
    assert unconditional_promises(text) and not unconditional_promises(text + " In fp32, that is.")


def test_the_check_reads_table_rows_and_list_items_apart():
    assert unconditional_promises("In fp32 below.\n\n| a | b |\n| x | token-identical |\n- fp32 item\n- token for token")
    assert unconditional_promises("| in fp32 | token for token |\n| z | w |") == []


def test_docs_promise_equal_tokens_only_with_the_dtype():
    found = {path.name: unconditional_promises(path.read_text()) for path in DOCS}
    assert {name: hits for name, hits in found.items() if hits} == {}


def test_api_docstrings_and_help_texts_promise_equal_tokens_only_with_the_dtype():
    found = {name: unconditional_promises((ROOT / name).read_text()) for name in API_MODULES}
    found["--help"] = [hit for text in help_texts() for hit in unconditional_promises(text)]
    assert {name: hits for name, hits in found.items() if hits} == {}


# ----- every measured figure in docs/results.md cites its raw file --------------------------------
RESULTS_MD = CLI_MD.parent / "results.md"
#: A measured figure: a number or range followed by x, ms, s, % or tok/s ("1.79x", "2.210 ms", "20-40 s", "-18%").
FIGURE = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,]\d+)*(?:-\d+(?:\.\d+)?)?\s?(?:x|ms|s|%|tok/s)(?![\w/])")
#: A raw file: a path under docs/cpu, docs/gpu or docs/figures (from docs/, or from the root as docs/...);
#: one given to an option or a redirection (``--out docs/figures/x.json``) is a command's, not a citation.
RAW_PATH = re.compile(r"(--[\w-]+(?:\s+|=)|>\s+)?(?<![\w/])((?:docs/)?(?:cpu|gpu|figures)/[\w.-]+\.(?:json|jsonl|csv|log|txt|md))\b")
#: What a figure whose raw file is gone carries instead, with the command that measures it again.
NO_RAW = "(no raw file kept"
#: The section of results.md that lists runs prepared but not made: its figures are settings, not results.
PREPARED = re.compile(r"^#+ Prepared, not yet run.*?(?=^#)", re.M | re.S)


def cited_paths(text: str) -> list[str]:
    """The raw files ``text`` cites (not the paths its commands write or read)."""
    return [path for argument, path in RAW_PATH.findall(text) if not argument]


def raw_file(path: str) -> Path:
    """The file a raw path names: ``docs/...`` from the repository root, anything else from docs/."""
    return ROOT / path if path.startswith("docs/") else RESULTS_MD.parent / path


def cites_raw(text: str) -> bool:
    """Whether ``text`` names an existing raw file, or says none was kept (wherever its lines wrap)."""
    return NO_RAW in " ".join(text.split()) or any(raw_file(path).is_file() for path in cited_paths(text))


def figure_units(text: str) -> list[tuple[str, str]]:
    """``text`` cut into the units a citation covers, each with the paragraph that introduces it:
    every prose paragraph (introduced by nothing) and every table row (introduced by the last prose
    paragraph before its table, under the same heading). Code blocks (commands) and headings are not read."""
    text = re.sub(r"^```.*?^```[ \t]*$", "", PREPARED.sub("", text + "\n#"), flags=re.M | re.S)
    units: list[tuple[str, str]] = []
    caption = ""
    for line_block in re.split(r"\n\s*\n", text):
        prose: list[str] = []
        for line in line_block.splitlines():
            if line.lstrip().startswith("#"):
                caption = ""
            elif line.lstrip().startswith("|"):
                if prose:
                    units.append(("\n".join(prose), ""))
                    caption, prose = "\n".join(prose), []
                units.append((line, caption))
            else:
                prose.append(line)
        if "".join(prose).strip():
            units.append(("\n".join(prose), ""))
            caption = "\n".join(prose)
    return units


def uncited_figures(text: str, rows_only: bool = False) -> list[str]:
    """The units of ``text`` holding a measured figure that neither they nor their caption trace to a raw file."""
    return [" ".join(unit.split())[:140] for unit, caption in figure_units(text)
            if FIGURE.search(unit) and not cites_raw(unit) and not cites_raw(caption)
            and not (rows_only and not unit.lstrip().startswith("|"))]


def readme_results() -> str:
    """The README's results section (its tables cite docs/results.md's raw files)."""
    return (ROOT / "README.md").read_text().split("## What each method achieves", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("text", ["Q1.5B: 1.79x (2.68x) end to end.", "| int8 self-draft | 1.79x |",
                                  "one token 319 ms", "compiling 20-40 s", "draft forward -18%", "110.6 tok/s",
                                  "a row (raw: [f](figures/no-such-file.json)) of 1.2x",
                                  "1.2x, from `bench --out docs/figures/bench_q15_code48_int8self.json`"])
def test_the_check_catches_a_figure_without_its_raw_file(text):
    assert uncited_figures(text)


@pytest.mark.parametrize("text", [
    "Q1.5B: 1.79x (raw: [bench](figures/bench_q15_code48_int8self.json)).",
    "1.54x on code (no raw file kept: re-measure with `layersearch bench --out FILE`)",
    "A table (raw: `docs/gpu/captured-h100.json`):\n\n| | 8B |\n|---|---|\n| ours | 110.6 tok/s |",
    "## 2x faster, a heading\n\n```\nbench --budget 600 s\n```",
    "### Prepared, not yet run\n\nEach run fits 5 s.\n\n## Next\n\nText.",
])
def test_the_check_spares_cited_figures_headings_code_and_prepared_runs(text):
    assert uncited_figures(text) == []


def test_a_table_row_takes_the_citation_of_its_own_caption_only():
    cited, table = "Raw: [x](cpu/step-time-refactor.json).", "| a | 1.2x |"
    assert uncited_figures(f"{cited}\n\n{table}") == []
    assert uncited_figures(f"{cited}\n\n## Next\n\n{table}")  # a heading between: not its caption


def test_every_figure_in_results_md_cites_its_raw_file():
    """Every paragraph and table row of docs/results.md with a measured figure names an existing raw
    file (docs/cpu, docs/gpu, docs/figures), directly or in the paragraph introducing its table, or
    says ``(no raw file kept: re-measure with COMMAND)``. Exempt: headings, code blocks (commands)
    and the section of runs prepared but not yet made."""
    assert uncited_figures(RESULTS_MD.read_text()) == []


def test_every_row_of_the_readmes_results_tables_cites_its_raw_file():
    """The same rule for the rows of the README's results tables (its prose there is a summary of
    results.md and is not read)."""
    assert uncited_figures(readme_results(), rows_only=True) == []


def test_every_raw_file_the_results_cite_exists():
    texts = PREPARED.sub("", RESULTS_MD.read_text() + "\n#") + readme_results()
    missing = sorted({path for path in cited_paths(texts) if not raw_file(path).is_file()})
    assert missing == []
