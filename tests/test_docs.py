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
