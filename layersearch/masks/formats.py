"""The papers' mask files: read and write Self-SD, SWIFT, KNN-SSD and KnapSpec skip sets.

None of the papers' repositories shares a format with another, and none records the model's
depth, so an import needs the layer count (``num_layers``) and names the model it was for:

========  ===========================================  ===================================
format    file                                         key
========  ===========================================  ===================================
selfsd    ``{model: {"attention": [..], "mlp": [..]}}``  the model, ``llama-2-13b``
swift     same inner shape                             ``{model}_{task}``; the task is the
                                                       part after the last ``_`` (a model
                                                       name may hold one: ``llama-2-13b_chat``)
knnssd    same inner shape, file ``<model>_skip.json``   ``{task}_{model}`` (task first; it may
                                                       hold ``_``: ``math_algebra``)
knapspec  a flat 0/1 list of 2L, interleaved            none, or ``{key: [..]}`` for several
          ``[attn_0, mlp_0, attn_1, ...]``, 1 = skip
========  ===========================================  ===================================

None holds int8 sub-layers: exporting a plan that has some is refused, naming them.
Indices in all of them are 0-based decoder layers, as in :class:`~layersearch.masks.mask.SkipMask`,
so conversion is exact both ways. Every problem (unknown key, index past the depth, a
malformed file) is one :class:`LayersearchError` line naming the file and key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from layersearch.common.errors import LayersearchError
from layersearch.common.jsonfile import read_json_file, write_json_atomic
from layersearch.masks.mask import ModelInfo, SkipMask

FORMATS: tuple[str, ...] = ("selfsd", "swift", "knnssd", "knapspec")
_SUBLAYERS = ("attention", "mlp")


def check_format(name: str) -> str:
    """``name`` if it is a known format; LayersearchError listing them otherwise."""
    if name not in FORMATS:
        raise LayersearchError(f"unknown mask format {name!r}: choose one of {', '.join(FORMATS)}")
    return name


def file_keys(path: str | Path, fmt: str) -> tuple[str, ...]:
    """The keys of a papers' mask file (empty for a KnapSpec file holding one bare list)."""
    data = _read(path, check_format(fmt))
    return () if isinstance(data, list) else tuple(data)


def split_key(fmt: str, key: str, path: str | Path = "") -> tuple[str | None, str | None]:
    """(model name, task) that a key names in ``fmt``'s convention (None where it names none)."""
    if fmt == "selfsd":
        return key, None
    if fmt == "swift":
        model, sep, task = key.rpartition("_")
        return (model, task) if sep else (key, None)
    if fmt == "knnssd":
        named = knnssd_model(path)
        if named and key.endswith(f"_{named}"):
            return named, key[: -len(named) - 1]
        task, sep, model = key.partition("_")  # a file not named <model>_skip.json: best guess
        return (model, task) if sep else (key, None)
    return None, None


def knnssd_model(path: str | Path) -> str | None:
    """The model that a KNN-SSD file is for, from its name ``[knnssd_]<model>_skip.json``."""
    stem = Path(path).name
    if not stem.endswith("_skip.json"):
        return None
    stem = stem[: -len("_skip.json")]
    return stem[len("knnssd_"):] if stem.startswith("knnssd_") else stem


def import_mask(
    path: str | Path,
    fmt: str,
    key: str | None = None,
    *,
    num_layers: int | None = None,
    model: ModelInfo | None = None,
    model_name: str | None = None,
) -> SkipMask:
    """The SkipMask stored under ``key`` of a papers' mask file.

    The depth comes from ``model`` (the mask is bound to it, fingerprint and all) or from
    ``num_layers`` (no fingerprint: the mask file then names the model in its provenance,
    ``model_name`` or the one the key names). Raises LayersearchError for an unknown key
    (listing the available ones), an index past the depth or a malformed file.
    """
    check_format(fmt)
    where = Path(path).name
    data = _read(path, fmt)
    if isinstance(data, list):
        if key is not None:
            raise LayersearchError(f"{where} holds one bare KnapSpec list and no keys; drop key {key}", fields="key")
        entry, label = data, where
    else:
        if key is None or key not in data:
            asked = "no key given" if key is None else f"no key {key!r}"
            raise LayersearchError(f"{where}: {asked}; available keys: {', '.join(data) or 'none'}",
                                   fields="key" if key is None else ())
        entry, label = data[key], f"{where} key {key!r}"
    depth = _depth(num_layers, model)
    attention, mlp = (_flat_sets if fmt == "knapspec" else _layer_sets)(entry, label, depth)
    named_model, task = split_key(fmt, key, path) if key is not None else (None, None)
    provenance = {"strategy": f"imported:{fmt}", "source_file": where, "source_key": key}
    if task:
        provenance["task"] = task
    if model is None:
        provenance["model_name"] = model_name or named_model
    try:
        return SkipMask(depth, tuple(attention), tuple(mlp), model, provenance)
    except LayersearchError as exc:
        raise LayersearchError(f"{label}: {exc}") from None


def export_mask(mask: SkipMask, fmt: str, path: str | Path, key: str | None = None) -> Path:
    """Write ``mask`` as a papers' mask file of ``fmt`` (atomically) under ``key``.

    selfsd, swift and knnssd files need a key (their convention: see the module docstring);
    a KnapSpec file is the bare flat list, or ``{key: list}`` when a key is given. An existing
    file of ``fmt`` at ``path`` is merged into: its other keys are kept (``key`` replaced).
    """
    check_format(fmt)
    if not mask.is_skip_only:  # every paper's format holds skips only: writing the rest would drop it silently
        raise LayersearchError(f"a {fmt} mask file holds skipped sub-layers only: this plan's "
                               f"{mask.low_bit_parts()} would be lost; keep the plan file for them")
    if fmt != "knapspec" and not key:
        raise LayersearchError(f"a {fmt} mask file stores masks under a key: give key", fields="key")
    existing = existing_keys(path, fmt, key)
    if fmt == "knapspec":
        flat = [int(bit) for bit in mask.to_flat()]
        return write_json_atomic(path, flat if key is None else {**existing, key: flat})
    return write_json_atomic(path, {**existing, key: {"attention": list(mask.attention), "mlp": list(mask.mlp)}})


def existing_keys(path: str | Path, fmt: str, key: str | None) -> dict[str, Any]:
    """The masks already in the ``fmt`` file at ``path`` that an export under ``key`` keeps ({} when
    there is no such file, or it is stdout or a device). A file that is not one of ``fmt`` (or
    one a keyless KnapSpec list would replace) is refused: exporting must not drop what it holds."""
    from layersearch.common.outputs import check_output

    target = check_output(path, "out")
    if target.stream or target.real is None or not target.real.exists():
        return {}
    try:
        data = _read(target.real, fmt)
        for name, entry in (data.items() if isinstance(data, dict) else ()):
            if not (isinstance(entry, list) if fmt == "knapspec" else isinstance(entry, dict) and set(_SUBLAYERS) <= set(entry)):
                raise LayersearchError(f"its entry {name!r} is no {fmt} mask")
    except LayersearchError as exc:
        raise LayersearchError(f"out {path} exists and is not a {fmt} mask file ({exc}); "
                               "layersearch leaves it untouched: choose another file", fields="out") from None
    if isinstance(data, list):
        if key is not None:
            raise LayersearchError(f"out {path} holds one KnapSpec mask without a key: export without key "
                                   "to replace it, or to another file", fields=("out", "key"))
        return {}
    if key is None and data:
        raise LayersearchError(f"out {path} holds the KnapSpec masks {', '.join(sorted(data)[:5])}: give key to add "
                               "this one beside them", fields=("out", "key"))
    return dict(data)


def _depth(num_layers: int | None, model: ModelInfo | None) -> int:
    """The layer count to import for: the model's, or num_layers (they must agree)."""
    if model is not None:
        if num_layers is not None and num_layers != model.num_layers:
            raise LayersearchError(f"num_layers {num_layers} disagrees with {model.name!r}, which has {model.num_layers} layers", fields="num_layers")
        return model.num_layers
    if num_layers is None:
        raise LayersearchError("the papers' mask files do not record the depth: give model or num_layers", fields=("model", "num_layers"))
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise LayersearchError(f"num_layers must be an integer >= 1, got {num_layers!r}", fields="num_layers")
    return num_layers


def _read(path: str | Path, fmt: str) -> dict[str, Any] | list[Any]:
    """The file's JSON: an object (every format) or a bare list (KnapSpec only)."""
    data = read_json_file(path, f"{fmt} mask")
    if isinstance(data, dict) or (fmt == "knapspec" and isinstance(data, list)):
        return data
    shape = "an object of keys or a flat 0/1 list" if fmt == "knapspec" else "an object of keys"
    raise LayersearchError(f"{Path(path).name}: a {fmt} mask file holds {shape}, not {type(data).__name__}")


def _layer_sets(entry: Any, label: str, depth: int) -> tuple[list[int], list[int]]:
    """The attention and MLP index lists of a ``{"attention": [...], "mlp": [...]}`` entry."""
    if not isinstance(entry, dict) or set(_SUBLAYERS) - set(entry):
        raise LayersearchError(f'{label}: expected {{"attention": [...], "mlp": [...]}}')
    out = []
    for part in _SUBLAYERS:
        values = entry[part]
        if not isinstance(values, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
            raise LayersearchError(f"{label}: {part} must be a list of integer layer indices")
        negative = [v for v in values if v < 0]
        if negative:  # not "past the last layer": papers' files count layers from 0, never from the end
            raise LayersearchError(f"{label}: {part} index {negative[0]} is negative (layers are numbered 0 to {depth - 1})")
        past = [v for v in values if v >= depth]
        if past:
            raise LayersearchError(f"{label}: {part} index {past[0]} is past the last layer ({depth - 1}) of a {depth}-layer model")
        out.append(values)
    return out[0], out[1]


def _flat_sets(entry: Any, label: str, depth: int) -> tuple[list[int], list[int]]:
    """Attention and MLP indices of KnapSpec's interleaved 0/1 list of length 2L."""
    if not isinstance(entry, list) or any(type(v) is not int or v not in (0, 1) for v in entry):
        raise LayersearchError(f"{label}: a KnapSpec mask is a flat list of 0/1 values")
    if len(entry) != 2 * depth:
        raise LayersearchError(f"{label}: a KnapSpec list for a {depth}-layer model has {2 * depth} entries, not {len(entry)}")
    attention = [i for i in range(depth) if entry[2 * i]]
    mlp = [i for i in range(depth) if entry[2 * i + 1]]
    return attention, mlp
