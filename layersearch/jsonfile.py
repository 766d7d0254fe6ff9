"""Reading and writing layersearch's small JSON files (masks, profiles, reports, tables).

Reading turns a missing, unreadable or malformed file into a LayersearchError naming the
file; writing goes through a temporary file and a rename, so a crash never leaves a partial
file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from layersearch.errors import LayersearchError


def read_json_file(path: str | Path, what: str) -> Any:
    """The parsed JSON of ``path``, a ``what`` file ("mask", "profile"); raises LayersearchError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LayersearchError(f"{what} file not found: {path}") from None
    except OSError as exc:
        raise LayersearchError(f"cannot read {what} file {path}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise LayersearchError(f"{path}: malformed JSON ({exc.msg} at line {exc.lineno})") from None


def write_json_atomic(path: str | Path, data: Any) -> Path:
    """Write ``data`` as JSON to ``path`` via a temporary file and rename."""
    return write_text_atomic(path, json.dumps(data, indent=2) + "\n", newline=None)


def write_text_atomic(path: str | Path, text: str, *, newline: str | None = "") -> Path:
    """Write ``text`` to ``path`` via a temporary file in the same folder and a rename.

    ``newline`` is passed to :func:`open`: ``""`` writes the text as it is, None translates
    ``\\n`` to the platform's line separator.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


__all__ = ["read_json_file", "write_json_atomic", "write_text_atomic"]
