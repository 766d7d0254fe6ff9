"""Command-line entry point: ``layersearch <command> ...`` and ``python -m layersearch``.

This module only builds the argument parsers and dispatches: each command is a module in
``layersearch/commands/`` (:data:`COMMANDS`) whose top level imports neither torch nor Optuna,
so ``--help`` stays fast; the heavy imports happen inside ``run``. Bad input
ends in one ``layersearch: error: ...`` line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from layersearch.errors import LayersearchError

#: The commands, one module each under layersearch/commands/ with ``add_parser(sub,
#: parser_class)`` and ``run(args)``; the order is the order of ``--help``.
COMMANDS = ("generate", "mask", "profile", "bench", "demo", "study", "plot", "knapspec_bench", "transfer")


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line instead of usage + error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The full ``layersearch`` argument parser."""
    parser = Parser(prog="layersearch", description="Search and run layer-skip masks for self-speculative decoding.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name in COMMANDS:
        importlib.import_module(f"layersearch.commands.{name}").add_parser(sub, Parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        module = importlib.import_module(f"layersearch.commands.{args.command}")
        return int(module.run(args) or 0)
    except LayersearchError as exc:
        print(f"layersearch: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("layersearch: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a failure we did not foresee: still one line, the traceback on request
        if os.environ.get("LAYERSEARCH_DEBUG"):
            raise
        print(f"layersearch: error: {_one_line(exc)} ({type(exc).__name__}; LAYERSEARCH_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


def _one_line(exc: BaseException) -> str:
    """The first line of an exception's message, capped so the error line stays readable."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


if __name__ == "__main__":
    sys.exit(main())
