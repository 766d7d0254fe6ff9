"""The ``custom_generate/`` folder that runs a spec in transformers' ``generate``.

``export_hf(spec, folder)`` writes ``folder/custom_generate/generate.py`` (the spec embedded, the
code imported from layersearch: the folder holds none of it), ``requirements.txt`` (layersearch,
which transformers checks is installed) and ``layersearch_spec.json`` (the spec to read). Then::

    model.generate(**inputs, custom_generate="folder", trust_remote_code=True)

runs the spec, locally or from a Hub repository the folder is pushed to. transformers copies
``generate.py`` alone into its module cache, so the spec lives inside it, not beside it: a spec
that names other files (a latency profile, a DISCO or router file, steering, a draft model
folder) is refused, since they would not travel with the folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DecoderSpec

__all__ = ["FILES", "export_hf", "portable_spec"]

#: The files written under ``folder/custom_generate/``.
FILES = ("generate.py", "requirements.txt", "layersearch_spec.json")

_GENERATE_PY = '''"""A layersearch decoding method for transformers' generate (written by `layersearch export-hf`).

    model.generate(**inputs, custom_generate="<this repository or folder>", trust_remote_code=True)

runs the decoder spec below with layersearch's lossless speculative decode loop on the model it is
called on (in fp32, greedy output equals plain generate's token for token; in bf16/fp16 near-ties
can break differently, as under any change of batch shape). It imports layersearch
(requirements.txt) and holds no copy of its code; layersearch_spec.json beside it is the same
spec, to read.
"""

import json

from layersearch.integrations.hf_generate import folder_decoding

SPEC = json.loads({spec!r})


def generate(model, *args, **kwargs):
    """transformers' generate arguments in, its output out (see layersearch's docs/transformers.md)."""
    return folder_decoding(SPEC).generate_from_folder(model, *args, **kwargs)
'''


def portable_spec(spec: DecoderSpec) -> DecoderSpec:
    """``spec`` as the folder embeds it: an inline mask's source file dropped (the mask is inline);
    any other file the spec names refused, naming its field."""
    from dataclasses import replace

    named = {"profile": spec.profile, "steering": spec.steering, "lookahead.file": spec.lookahead.file,
             "drafter.model": spec.drafter.model.ref if spec.drafter.model is not None and spec.drafter.model.path else None}
    if spec.mask_source.kind != "mask":
        named["mask_source.file"] = spec.mask_source.file
    for field, path in named.items():
        if path:
            raise LayersearchError(f"the spec's {field} names the file {path}, which an exported folder cannot carry "
                                   f"(transformers copies generate.py alone): export a spec without it", fields=field)
    if spec.mask_source.kind == "mask" and spec.mask_source.file is not None:
        spec = replace(spec, mask_source=replace(spec.mask_source, file=None))
    return spec


def export_hf(spec_or_path: DecoderSpec | str | os.PathLike, folder: str | os.PathLike) -> list[Path]:
    """Write the ``custom_generate`` files of ``spec_or_path`` under ``folder`` (created if missing);
    returns their paths. Refuses, before writing anything, a file that exists already."""
    from layersearch import __version__
    from layersearch.common.jsonfile import write_json_atomic

    if not isinstance(spec_or_path, (DecoderSpec, str, os.PathLike)):
        raise LayersearchError(f"export_hf takes a DecoderSpec or a spec file, got {type(spec_or_path).__name__}")
    spec = portable_spec(spec_or_path if isinstance(spec_or_path, DecoderSpec) else
                         DecoderSpec.load(spec_or_path if isinstance(spec_or_path, str) else Path(spec_or_path)))
    root = Path(folder).expanduser()
    if root.exists() and not root.is_dir():
        raise LayersearchError(f"{root} is a file: give the folder to write custom_generate/ into")
    target = root / "custom_generate"
    if target.exists() and not target.is_dir():
        raise LayersearchError(f"{target} is a file: the export writes a folder of that name")
    paths = [target / name for name in FILES]
    existing = [str(p) for p in paths if p.exists() or p.is_symlink()]
    if existing:
        raise LayersearchError(f"{existing[0]} exists: the export never overwrites a file (remove it, or export elsewhere)")
    data = spec.to_dict()
    requirement = "layersearch" if "unknown" in __version__ else f"layersearch>={__version__}"
    target.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    try:
        _write_new(paths[0], _GENERATE_PY.format(spec=json.dumps(data)))
        written.append(paths[0])
        _write_new(paths[1], requirement + "\n")
        written.append(paths[1])
        write_json_atomic(paths[2], data)
        written.append(paths[2])
    except BaseException:
        for path in written:  # never a partial folder
            path.unlink(missing_ok=True)
        raise
    return paths


def _write_new(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, which must not exist (``x`` mode: a file made meanwhile is kept)."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(temporary, "x", encoding="utf-8") as handle:
            handle.write(text)
        os.link(temporary, path)  # fails if path appeared meanwhile: never overwritten
    finally:
        temporary.unlink(missing_ok=True)

