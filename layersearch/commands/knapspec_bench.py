"""``layersearch knapspec-bench``: the old spelling of ``layersearch knapspec bench``
(:mod:`layersearch.commands.knapspec`); same options, and a one-line note after the run."""

from __future__ import annotations

from typing import Any


def add_parser(sub: Any, parser_class: type) -> None:
    """Register ``knapspec-bench`` on the ``sub`` subparsers of the main CLI."""
    from layersearch.commands.knapspec import bench_args

    p = sub.add_parser("knapspec-bench", help="old spelling of `knapspec bench`")
    bench_args(p)
    p.set_defaults(command="knapspec_bench")


def run(args: Any) -> int:
    """``knapspec bench``, then the note on its spelling."""
    from layersearch.commands.common import note_old_spelling
    from layersearch.commands.knapspec import bench

    status = bench(args)
    note_old_spelling("knapspec-bench", "knapspec bench")
    return status
