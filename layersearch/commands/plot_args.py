"""Argument parser of ``layersearch plot ...`` (mask, history, compare)."""

from __future__ import annotations

import argparse
from typing import Any

from layersearch.cli import DEFAULT_STORAGE_HELP


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Add ``plot`` and its kinds to the CLI's sub-parsers."""
    p = sub.add_parser("plot", help="draw a mask, a study's history or several studies (PNG under plots/)")
    kinds = p.add_subparsers(dest="kind", required=True, parser_class=parser_class)

    m = kinds.add_parser("mask", help="draw which sub-layers a mask file skips")
    m.add_argument("file", help="mask JSON file")
    m.add_argument("--out", help="PNG to write (default plots/mask-<file>.png)")

    h = kinds.add_parser("history", help="objective per trial and best so far vs wall-clock")
    h.add_argument("--name", required=True)
    h.add_argument("--storage", help=DEFAULT_STORAGE_HELP)
    h.add_argument("--out", help="PNG to write (default plots/history-<name>.png)")

    c = kinds.add_parser("compare", help="best-so-far curves of several studies")
    c.add_argument("--names", nargs="+", required=True)
    c.add_argument("--storage", help=DEFAULT_STORAGE_HELP)
    c.add_argument("--out", help="PNG to write (default plots/compare-<names>.png)")

    p.set_defaults(command="plot")
