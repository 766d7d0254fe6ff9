"""Read what a GGUF file says it holds before anything slow happens to it.

Converting a GGUF file (dequantising every tensor through transformers) takes from seconds to
minutes; refusing an unsupported architecture or a file that is not GGUF at all should take
milliseconds. :func:`read_header` parses just the file's fixed header and its key/value pairs
up to ``general.architecture`` (llama.cpp writes it first), with every length checked against
the file's size before anything is allocated, so a damaged or hostile header is one
:class:`~layersearch.common.errors.LayersearchError`, never a huge allocation.

The format: ``b"GGUF"``, version (u32), tensor count (u64), key/value count (u64), then each
pair as key (u64 length + UTF-8), value type (u32), value. See the ``gguf`` package's
``constants.GGUFValueType`` for the type numbers used below.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from layersearch.common.errors import LayersearchError

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)

# GGUF value types (gguf.constants.GGUFValueType) -> struct format of one scalar.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_MAX_KEYS_SCANNED = 64  # general.architecture comes first in practice; a few dozen is generous
_MAX_STRING = 1 << 20  # no key or scalar string in a header is anywhere near 1 MiB
_MAX_NESTING = 8  # llama.cpp writes arrays of scalars or strings; nothing nests deeper than a few levels

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
    from layersearch.common.inputs import open_input

    try:
        with open_input(path, "GGUF") as handle:  # a FIFO or device refused, not waited on
            return _parse(handle, os.fstat(handle.fileno()).st_size, path)
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


def check_convertible(path: Path) -> GGUFHeader:
    """:func:`check_supported`, then the whole file's layout, before a conversion is tried: every
    key/value pair and tensor entry parsed with its lengths checked, every tensor's data inside
    the file, and the keys and tensors a conversion needs present. A damaged, truncated or
    empty-bodied file is one LayersearchError here, so it leaves no cache folder and no partial copy."""
    from layersearch.common.inputs import open_input

    header = check_supported(path)
    try:
        with open_input(path, "GGUF") as handle:
            layout = _layout(_Reader(handle, os.fstat(handle.fileno()).st_size, path))
    except OSError as exc:
        raise LayersearchError(f"cannot read GGUF file {path}: {exc.strerror or exc}") from None
    _check_contents(layout, header.architecture, path)
    return header


@dataclass(frozen=True)
class _Layout:
    """What :func:`_layout` found: the few key values checked, and each tensor's name and data size."""

    values: dict
    tensors: dict  # name -> byte size of its data


# Keys whose values check_convertible reads (any other is skipped).
_ALIGNMENT_KEY = "general.alignment"
_TOKENS_KEY = "tokenizer.ggml.tokens"
_MAX_DIMS = 4  # GGML_MAX_DIMS


def _layout(reader: "_Reader") -> _Layout:
    reader.take(4)
    reader.scalar("I")
    tensor_count, kv_count = reader.scalar("Q"), reader.scalar("Q")
    # A key/value pair takes at least 13 bytes, a tensor entry at least 24: counts beyond what the
    # file can hold are damage, refused before any loop runs that long.
    if kv_count > reader.size // 13 or tensor_count > reader.size // 24:
        raise LayersearchError(f"{reader.path}: the GGUF header is damaged (it claims {kv_count} keys and {tensor_count} "
                               f"tensors in {reader.size} bytes)")
    values = {}
    for _ in range(kv_count):
        key = reader.string()
        value_type = reader.scalar("I")
        if value_type in _SCALARS and not key.startswith("tokenizer."):
            values[key] = reader.scalar(_SCALARS[value_type])
        elif key == _TOKENS_KEY and value_type == _ARRAY:
            start = reader.handle.tell()
            reader.scalar("I")
            values[key] = reader.scalar("Q")  # the vocabulary's size
            reader.handle.seek(start)
            reader.skip_value(value_type)
        else:
            reader.skip_value(value_type)
    tensors, ends = {}, []
    for _ in range(tensor_count):
        name = reader.string()
        dims = reader.scalar("I")
        if not 1 <= dims <= _MAX_DIMS:
            raise LayersearchError(f"{reader.path}: the GGUF file is damaged (tensor {name!r} has {dims} dimensions)")
        shape = [reader.scalar("Q") for _ in range(dims)]
        tensors[name] = _tensor_bytes(name, shape, reader.scalar("I"), reader.path)
        ends.append(reader.scalar("Q") + tensors[name])
    alignment = values.get(_ALIGNMENT_KEY, 32)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1 or alignment & (alignment - 1):
        raise LayersearchError(f"{reader.path}: the GGUF file is damaged (alignment {alignment!r})")
    data_start = -(-reader.handle.tell() // alignment) * alignment
    if len(tensors) != tensor_count:
        raise LayersearchError(f"{reader.path}: the GGUF file is damaged (two tensors share a name)")
    if ends and data_start + max(ends) > reader.size:
        raise LayersearchError(f"{reader.path}: the GGUF file is truncated (its tensor data runs past the end)")
    return _Layout(values, tensors)


def _tensor_bytes(name: str, shape: list[int], type_code: int, path: Path) -> int:
    """The byte size of a tensor's data, from its shape and GGML type (gguf's block sizes)."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(type_code)]
    except (ValueError, KeyError):
        raise LayersearchError(f"{path}: the GGUF file is damaged (tensor {name!r} has unknown type {type_code})") from None
    if any(n == 0 for n in shape) or shape[0] % block:
        raise LayersearchError(f"{path}: the GGUF file is damaged (tensor {name!r} has shape {shape})")
    count = 1
    for n in shape:
        count *= n
    return count // block * block_bytes


def _check_contents(layout: _Layout, architecture: str, path: Path) -> None:
    """The keys and tensors every conversion needs: a layer count, a width, a vocabulary, the
    embedding, and tensors for each layer the file claims."""
    def positive(key: str) -> int:
        value = layout.values.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise LayersearchError(f"{path}: the GGUF file has no valid {key} ({value!r}); it is not a complete model")
        return value

    layers = positive(f"{architecture}.block_count")
    positive(f"{architecture}.embedding_length")
    positive(_TOKENS_KEY)
    if "token_embd.weight" not in layout.tensors:
        raise LayersearchError(f"{path}: the GGUF file holds no token_embd.weight; it is not a complete model")
    found = {name.split(".")[1] for name in layout.tensors if name.startswith("blk.") and name.count(".") >= 2}
    missing = [index for index in range(layers) if str(index) not in found]
    if missing:
        raise LayersearchError(f"{path}: the GGUF file claims {layers} layers but holds no tensors for layer {missing[0]}")
    # Tensors of a layer past the claimed count would be dropped by the conversion without a word
    # (a patched block_count): the model would run with a layer missing.
    extra = sorted(found - {str(index) for index in range(layers)}, key=lambda index: (len(index), index))
    if extra:
        raise LayersearchError(f"{path}: the GGUF file claims {layers} layers ({architecture}.block_count) but also holds "
                               f"tensors for layer {extra[0]}: its weights and its settings disagree")


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

    def skip_value(self, value_type: int, depth: int = 0) -> None:
        if depth > _MAX_NESTING:
            raise LayersearchError(f"{self.path}: the GGUF header is damaged (arrays nested more than {_MAX_NESTING} deep)")
        if value_type in _SCALARS:
            self.take(struct.calcsize("<" + _SCALARS[value_type]))
        elif value_type == _STRING:
            self.string()
        elif value_type == _ARRAY:
            item_type, count = self.scalar("I"), self.scalar("Q")
            if item_type not in _SCALARS and count > (self.size - self.handle.tell()) // 8:
                # every item of a string or array array takes at least 8 bytes: refuse a count the
                # rest of the file cannot hold now, not after skipping through a large file
                raise LayersearchError(f"{self.path}: the GGUF header is damaged (an array of {count} items)")
            if item_type in _SCALARS:  # fixed width: skip in one seek, bounds-checked
                width = struct.calcsize("<" + _SCALARS[item_type])
                self.handle.seek(self._checked_end(count * width))
            else:
                for _ in range(count):
                    self.skip_value(item_type, depth + 1)
        else:
            raise LayersearchError(f"{self.path}: the GGUF header is damaged (unknown value type {value_type})")

    def _checked_end(self, count: int) -> int:
        end = self.handle.tell() + count
        if end > self.size:
            raise LayersearchError(f"{self.path}: the GGUF file is truncated or damaged (its header runs past the end)")
        return end
