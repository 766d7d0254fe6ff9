"""No output of a command onto one of its inputs or another of its outputs, checked by option
before any work (:func:`check_overwrites`, which :mod:`layersearch.cli` runs for every command).
How files are checked and written is :mod:`layersearch.common.outputs`'."""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from layersearch.common.outputs import check_distinct


#: Options that name a file (or folder) a command writes; a command writing others (derived
#: names: tune's report, an ``--out-prefix``'s files) gives them to :func:`check_overwrites`.
OUTPUT_OPTIONS = ("out", "save_spec", "report", "plot", "pca", "finetune_drafter", "out_dir")



#: Options whose values are names, never files read.
_NOT_PATHS = ("command", "name", "names", "prefix", "prompt")



def check_overwrites(given: Mapping[str, Any], derived: Mapping[str, str] | None = None,
                     read: Sequence[tuple[str, str]] = (), words: Mapping[str, str] | None = None) -> None:
    """Refuse an output that is an input or another output of the same run (``generate --prompts
    p.jsonl --save-spec p.jsonl``), before any work. ``given``: a command's options by name
    (``vars(args)``). The outputs: the :data:`OUTPUT_OPTIONS` given, and ``derived`` ({what: path}:
    what the command writes or opens for writing beside them: a report's picture, a study storage
    derived from ``--name``); the inputs: every other option's value (or a path inside it:
    ``NAME=FILE``, ``disco:FILE``, ``sqlite:///FILE``, ``study:NAME@FILE``, comma lists) that names
    an existing file or folder, and ``read`` ((what, path) pairs: files named inside the input files,
    such as a spec's profile and mask file). ``words``: how the command line spells each argument
    (:func:`~layersearch.commands.wording.option_words`: a positional by its metavar, ``FILE``);
    without it, ``--name``."""
    def word(name: str) -> str:
        return (words or {}).get(name) or "--" + name.replace("_", "-")

    outputs = {word(name): given[name] for name in OUTPUT_OPTIONS if isinstance(given.get(name), str)}
    outputs.update(derived or {})
    storage = _storage_file(given.get("storage"))
    if storage is not None:  # read and written: a report onto it destroys the study, even one made by this run
        outputs["--storage"] = storage
    inputs: list[tuple[str, str]] = []
    for name, value in given.items():
        if name in OUTPUT_OPTIONS or name in ("out_prefix", "storage") or name in _NOT_PATHS:
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                inputs.extend((word(name), path) for path in _paths_in(item))
    inputs.extend((label, path) for label, path in read if path and os.path.exists(path))
    check_distinct(list(outputs.items()), inputs)



def _storage_file(value: Any) -> str | None:
    """The file of a ``--storage`` (``x.db``, ``x.log``, ``sqlite:///x.db``, ``journal:///x.log``), None
    for a database server or no storage (a malformed one is the command's to report)."""
    if not isinstance(value, str):
        return None
    for scheme in ("sqlite:///", "journal:///"):
        if value.startswith(scheme):
            return value[len(scheme):] or None
    return value if "://" not in value and value.endswith((".db", ".log", ".sqlite", ".sqlite3")) else None



def _paths_in(value: str) -> list[str]:
    """The existing files or folders ``value`` names, itself or inside one of the forms above."""
    found = []
    for part in value.split(","):
        for candidate in (part, part.partition("=")[2], part.partition(":")[2], part.rpartition("@")[2]):
            candidate = candidate[3:] if candidate.startswith("///") else candidate  # sqlite:///x, journal:///x
            if candidate and "\0" not in candidate and os.path.exists(candidate) and candidate not in found:
                found.append(candidate)
    return found
