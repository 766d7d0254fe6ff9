"""Read what a GGUF file says it holds before anything slow happens to it.

Converting a GGUF file (dequantising every tensor through transformers) takes from seconds to
minutes; refusing an unsupported architecture or a file that is not GGUF at all should take
milliseconds. :func:`read_header` parses just the file's fixed header and its key/value pairs
up to ``general.architecture`` (llama.cpp writes it first), with every length checked against
the file's size before anything is allocated, so a damaged or hostile header is one
:class:`~layersearch.errors.LayersearchError`, never a huge allocation.

The format: ``b"GGUF"``, version (u32), tensor count (u64), key/value count (u64), then each
pair as key (u64 length + UTF-8), value type (u32), value. See the ``gguf`` package's
``constants.GGUFValueType`` for the type numbers used below.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from layersearch.errors import LayersearchError

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)

# GGUF value types (gguf.constants.GGUFValueType) -> struct format of one scalar.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_MAX_KEYS_SCANNED = 64  # general.architecture comes first in practice; a few dozen is generous
_MAX_STRING = 1 << 20  # no key or scalar string in a header is anywhere near 1 MiB

# GGUF architecture name -> the transformers model_type its conversion produces.
ARCHITECTURES = {
    "llama": "llama",
    "mistral": "mistral",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "phi3": "phi3",
    "gemma2": "gemma2",
    "gemma3": "gemma3_text",
}


@dataclass(frozen=True)
class GGUFHeader:
    """The parts of a GGUF header layersearch decides on: format version, tensor count, architecture."""

    version: int
    tensor_count: int
    architecture: str

    @property
    def model_type(self) -> str | None:
        """The transformers model_type this architecture converts to, or None if we do not support it."""
        return ARCHITECTURES.get(self.architecture)


def is_gguf_path(name: str) -> bool:
    """True if ``name`` names a GGUF file by its suffix (the file need not exist)."""
    return name.lower().endswith(".gguf")


def read_header(path: Path) -> GGUFHeader:
    """Parse ``path``'s GGUF header up to ``general.architecture``; anything else is a LayersearchError."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            return _parse(handle, size, path)
    except OSError as exc:
        raise LayersearchError(f"cannot read GGUF file {path}: {exc.strerror or exc}") from None


def check_supported(path: Path) -> GGUFHeader:
    """The header of ``path``, refusing (one line) an architecture layer skipping does not support."""
    header = read_header(path)
    if header.model_type is None:
        raise LayersearchError(
            f"GGUF file {path} holds a {header.architecture!r} model, which layersearch does not support "
            f"(supported GGUF architectures: {', '.join(sorted(ARCHITECTURES))})"
        )
    return header


def _parse(handle: BinaryIO, size: int, path: Path) -> GGUFHeader:
    reader = _Reader(handle, size, path)
    if reader.take(4) != MAGIC:
        raise LayersearchError(f"{path} is not a GGUF file (it does not start with the GGUF magic bytes)")
    version = reader.scalar("I")
    if version not in SUPPORTED_VERSIONS:
        raise LayersearchError(f"{path}: GGUF version {version} is not supported (supported: 2, 3)")
    tensor_count, kv_count = reader.scalar("Q"), reader.scalar("Q")
    if tensor_count == 0:
        raise LayersearchError(f"{path}: the GGUF file holds no tensors")
    for _ in range(min(kv_count, _MAX_KEYS_SCANNED)):
        key = reader.string()
        value_type = reader.scalar("I")
        if key == "general.architecture":
            if value_type != _STRING:
                raise LayersearchError(f"{path}: general.architecture is not a string")
            return GGUFHeader(version, tensor_count, reader.string())
        reader.skip_value(value_type)
    raise LayersearchError(f"{path}: the GGUF header names no general.architecture")


class _Reader:
    """Bounds-checked little-endian reads from a file of known size."""

    def __init__(self, handle: BinaryIO, size: int, path: Path) -> None:
        self.handle, self.size, self.path = handle, size, path

    def take(self, count: int) -> bytes:
        if count < 0 or self.handle.tell() + count > self.size:
            raise LayersearchError(f"{self.path}: the GGUF file is truncated or damaged (its header runs past the end)")
        return self.handle.read(count)

    def scalar(self, fmt: str):
        width = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, self.take(width))[0]

    def string(self) -> str:
        length = self.scalar("Q")
        if length > _MAX_STRING:
            raise LayersearchError(f"{self.path}: the GGUF header is damaged (a string of {length} bytes)")
        try:
            return self.take(length).decode("utf-8")
        except UnicodeDecodeError:
            raise LayersearchError(f"{self.path}: the GGUF header is damaged (a key is not UTF-8)") from None

    def skip_value(self, value_type: int) -> None:
        if value_type in _SCALARS:
            self.take(struct.calcsize("<" + _SCALARS[value_type]))
        elif value_type == _STRING:
            self.string()
        elif value_type == _ARRAY:
            item_type, count = self.scalar("I"), self.scalar("Q")
            if item_type in _SCALARS:  # fixed width: skip in one seek, bounds-checked
                width = struct.calcsize("<" + _SCALARS[item_type])
                self.handle.seek(self._checked_end(count * width))
            else:
                for _ in range(count):
                    self.skip_value(item_type)
        else:
            raise LayersearchError(f"{self.path}: the GGUF header is damaged (unknown value type {value_type})")

    def _checked_end(self, count: int) -> int:
        end = self.handle.tell() + count
        if end > self.size:
            raise LayersearchError(f"{self.path}: the GGUF file is truncated or damaged (its header runs past the end)")
        return end
