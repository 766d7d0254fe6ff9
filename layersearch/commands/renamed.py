"""Spellings the CLI no longer takes, each answered by one error line that names its replacement.

layersearch is 0.x: a renamed command or option is not kept as an alias (two spellings of one
thing drift apart in docs and tests). A script that still uses an old one stops before any work
with exit status 2 and the new spelling, so fixing it is one edit. This module stays light: the
parsers are built for ``--help`` too.
"""

from __future__ import annotations

import argparse
from typing import Sequence

#: Old command -> its new spelling (after ``layersearch``).
RENAMED_COMMANDS = {"knapspec-bench": "knapspec bench", "swift-stream": "swift stream"}


def renamed_command(argv: Sequence[str]) -> str | None:
    """The error message for an old command spelling at the start of ``argv``, else None."""
    if argv and argv[0] in RENAMED_COMMANDS:
        return f"`{argv[0]}` is now `layersearch {RENAMED_COMMANDS[argv[0]]}`"
    return None


class _Renamed(argparse.Action):
    """A hidden option that ends the parse with one line naming its replacement."""

    def __init__(self, option_strings, dest, *, new: str, metavar: str | None = None, why: str | None = None, **_):
        # A flag takes no value; an option that took one takes it (optional, so a bare old
        # option still gets the replacement line rather than argparse's "expected one argument").
        super().__init__(option_strings, argparse.SUPPRESS, nargs="?" if metavar else 0, default=argparse.SUPPRESS,
                         help=argparse.SUPPRESS, metavar=metavar)
        self.new, self.why = new, why

    def __call__(self, parser, namespace, values, option_string=None):
        if self.why is not None:
            parser.error(f"{option_string} was removed: {self.why}")
        if self.metavar is None:
            parser.error(f"{option_string} is now {self.new}")
        value = self.metavar if values is None else values
        parser.error(f"{option_string} {value} is now {self.new.format(value=value)}")


def renamed_option(parser: argparse.ArgumentParser, old: str, new: str, *, metavar: str | None = None) -> None:
    """Register ``old`` on ``parser`` as a spelling that fails with "``old`` is now ``new``".

    ``metavar``: the old option took a value; ``new`` may use it as ``{value}``
    (``renamed_option(p, "--skip-ratio", "--mask uniform:{value}", metavar="R")``)."""
    parser.add_argument(old, action=_Renamed, new=new, metavar=metavar)


def removed_option(parser: argparse.ArgumentParser, old: str, why: str) -> None:
    """Register ``old`` (a flag with no replacement on this command) as failing with
    "``old`` was removed: ``why``"."""
    parser.add_argument(old, action=_Renamed, new="", why=why)
