"""Reading and writing layersearch's small JSON files (masks, profiles, reports, tables).

Reading goes through :mod:`layersearch.common.inputs` (bounded size and nesting, UTF-8 checked) and
turns a missing, unreadable or malformed file into a LayersearchError naming the file;
writing goes through :mod:`layersearch.common.outputs` (temporary file and rename, symlinks written
through, ``-`` streamed to stdout, the user's usual permissions).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from layersearch.common.inputs import parse_json, read_text
from layersearch.common.outputs import OutputTarget, write_output


#: schema_version of a ``bench`` report (its ``out`` file); reports written before it had none
#: and are the same format.
BENCH_SCHEMA_VERSION = 1


def read_json_file(path: str | Path, what: str) -> Any:
    """The parsed JSON of ``path``, a ``what`` file ("mask", "profile"); raises LayersearchError."""
    return parse_json(read_text(path, what), str(path))


def file_kind(data: Any) -> str | None:
    """What kind of layersearch file ``data`` looks like ("a mask file", "a latency profile"...), None if unknown.

    Used to say "this is a mask file, not a latency profile" instead of listing missing keys.
    """
    if isinstance(data, list):
        return "a table (study compare output)" if data and isinstance(data[0], dict) and "name" in data[0] else None
    if not isinstance(data, dict):
        return None
    if {"num_layers", "attention", "mlp"} <= data.keys():
        return "a mask file"
    if data.get("kind") == "layersearch-decoder-spec":
        return "a decoder spec"
    if data.get("kind") == "latency-profile" or "verify_ratios" in data:
        return "a latency profile"
    if "domains" in data and "profile" in data:
        return "a bench report"
    if "contexts" in data and "solver" in data:
        return "a knapspec bench report"
    if "prompt" in data:
        return "a prompts line"
    return None


def check_kind(data: Any, expected: str) -> None:
    """Raise "this is X, not Y" when ``data`` is clearly another kind of layersearch file."""
    from layersearch.common.errors import LayersearchError

    kind = file_kind(data)
    if kind is not None and kind != expected:
        raise LayersearchError(f"this is {kind}, not {expected}")


def json_text(data: Any) -> str:
    """The text layersearch writes for ``data``: indented JSON and a final newline."""
    return json.dumps(data, indent=2) + "\n"


def write_json_atomic(path: "str | Path | OutputTarget", data: Any) -> Path:
    """Write ``data`` as JSON to ``path`` whole (see :mod:`layersearch.common.outputs`); returns the path given."""
    return write_text_atomic(path, json_text(data))


def write_text_atomic(path: "str | Path | OutputTarget", text: str, *, newline: str | None = "") -> Path:
    """Write ``text`` to ``path`` whole (see :mod:`layersearch.common.outputs`); returns the path given.

    ``newline=None`` translates ``\\n`` to the platform's line separator (as :func:`open` does).
    """
    import os

    if newline is None and os.linesep != "\n":
        text = text.replace("\n", os.linesep)
    target = write_output(path, text)
    return Path(target.given)


__all__ = ["json_text", "read_json_file", "write_json_atomic", "write_text_atomic"]
