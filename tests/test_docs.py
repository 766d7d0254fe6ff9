"""docs/cli.md is the command reference: its command table lists exactly the commands (and their
actions) that the CLI's parser registers, each with the extras that command checks for."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

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
