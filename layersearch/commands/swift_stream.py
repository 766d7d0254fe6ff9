"""``layersearch swift-stream``: the old spelling of ``layersearch swift stream``
(:mod:`layersearch.commands.swift`); same options, and a one-line note after the run."""

from __future__ import annotations

from typing import Any


def add_parser(sub: Any, parser_class: type) -> None:
    """Register ``swift-stream`` on the ``sub`` subparsers of the main CLI."""
    from layersearch.commands.swift import stream_args

    p = sub.add_parser("swift-stream", help="old spelling of `swift stream`")
    stream_args(p)
    p.set_defaults(command="swift_stream")


def run(args: Any) -> int:
    """``swift stream``, then the note on its spelling."""
    from layersearch.commands.common import note_old_spelling
    from layersearch.commands.swift import stream

    status = stream(args)
    note_old_spelling("swift-stream", "swift stream")
    return status
