"""Reading a DISCO rows file (``.npz`` from ``disco collect``) as a hostile file: bounded work
and memory, every array checked, one LayersearchError naming the file for any problem.

An ``.npz`` is a zip of ``.npy`` arrays. Each member's header (dtype, shape) is read and
checked against the size the zip declares before numpy allocates the array, so a header
claiming a huge shape costs nothing; object arrays (pickles) are never loaded.
"""

from __future__ import annotations

import io
import os
import stat
import zipfile
from pathlib import Path

import numpy as np

from layersearch.disco.features import NUM_FEATURES
from layersearch.common.errors import LayersearchError

#: Largest rows file read, and largest total of its arrays once unpacked (bytes).
MAX_ROWS_BYTES = 256 * 1024 * 1024
#: Each array: its kind of dtype (numpy ``dtype.kind`` letters) and its number of dimensions.
ARRAYS = {"x": ("f", 2), "label": ("b", 1), "tv": ("f", 1), "prompt": ("iu", 1), "position": ("iu", 1)}


def read_rows(path: str | Path) -> tuple[np.ndarray, ...]:
    """``(x [N, F] float32, label [N] bool, tv [N] float32, prompt [N] int64, position [N] int64)``."""
    try:
        arrays = _arrays(_read(path))
        return _checked(arrays)
    except LayersearchError as exc:
        raise LayersearchError(f"{path}: {exc}") from None


def _read(path: str | Path) -> bytes:
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise LayersearchError("is a directory, not a DISCO rows file")
        if st.st_size > MAX_ROWS_BYTES:
            raise LayersearchError(f"larger than {MAX_ROWS_BYTES // 2**20} MiB; not a DISCO rows file")
        from layersearch.common.inputs import open_input

        with open_input(path, "DISCO rows") as handle:  # a FIFO or device refused, not waited on
            return handle.read(MAX_ROWS_BYTES + 1)
    except FileNotFoundError:
        raise LayersearchError("rows file not found") from None
    except OSError as exc:
        raise LayersearchError(f"cannot read ({exc.strerror or exc})") from None


def _arrays(data: bytes) -> dict[str, np.ndarray]:
    if data[:6] == b"\x93NUMPY":
        raise LayersearchError("a single .npy array, not a DISCO rows file (the .npz that `disco collect` writes)")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError):
        raise LayersearchError("not a DISCO rows file (not an .npz archive from `disco collect`)") from None
    with archive:
        members = {info.filename.removesuffix(".npy"): info for info in archive.infolist()}
        if set(members) != set(ARRAYS):
            found = ", ".join(sorted(members)) or "nothing"
            raise LayersearchError(f"not a DISCO rows file: expected arrays {', '.join(ARRAYS)}, found {found}")
        if sum(info.file_size for info in members.values()) > MAX_ROWS_BYTES:
            raise LayersearchError(f"its arrays unpack to more than {MAX_ROWS_BYTES // 2**20} MiB")
        return {name: _array(archive, info, name) for name, info in members.items()}


def _array(archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str) -> np.ndarray:
    """One member's array: header first (dtype kind, dimensions, size within the declared one)."""
    kind, ndim = ARRAYS[name]
    try:
        with archive.open(info) as member:
            version = np.lib.format.read_magic(member)
            readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in readers:
                raise LayersearchError(f"{name} is an .npy of format version {version}, expected 1.0 or 2.0")
            shape, _, dtype = readers[version](member)
            if dtype.kind not in kind or dtype.hasobject or len(shape) != ndim:
                raise LayersearchError(f"{name} is {len(shape)}-D {dtype} (expected a {ndim}-D {_kind_words(kind)} array)")
            if int(np.prod(shape, dtype=object)) * dtype.itemsize > info.file_size:
                raise LayersearchError(f"{name} claims shape {shape}, more than its {info.file_size} bytes hold")
        with archive.open(info) as member:
            return np.lib.format.read_array(member, allow_pickle=False)
    except LayersearchError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, RuntimeError, TypeError) as exc:
        raise LayersearchError(f"{name} is not a readable array ({' '.join(str(exc).split())[:120]})") from None


def _kind_words(kind: str) -> str:
    return {"f": "float", "b": "bool", "iu": "integer"}[kind]


def _checked(arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    x, label, tv, prompt, position = (arrays[k] for k in ARRAYS)
    if x.shape[1] != NUM_FEATURES:
        raise LayersearchError(f"x has {x.shape[1]} features per row, this version's rows have {NUM_FEATURES}")
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise LayersearchError("arrays of different lengths: " + ", ".join(f"{k} {v}" for k, v in lengths.items()))
    if len(x) == 0:
        raise LayersearchError("no rows")
    if not (np.isfinite(x).all() and np.isfinite(tv).all()):
        raise LayersearchError("x or tv holds NaN or infinite values")
    if tv.min() < 0 or tv.max() > 1:
        raise LayersearchError("tv must be total variation distances in [0, 1]")
    if prompt.min() < 0 or position.min() < 1 or prompt.max() > 2**62 or position.max() > 2**62:
        raise LayersearchError("prompt ids must be >= 0 and positions >= 1")
    return (x.astype(np.float32), label.astype(bool), tv.astype(np.float32), prompt.astype(np.int64),
            position.astype(np.int64))
