"""Reading user input files with bounded work and memory, and one-line errors.

Every file a user passes (masks, profiles, prompt lists) is read through :func:`read_text`:
a size limit (:data:`MAX_INPUT_BYTES`) before anything is read, UTF-8 (a BOM is allowed)
checked with the offending byte named. Every input is opened through :func:`open_input` (or,
for a path handed to a library, checked by :func:`check_regular_file` first): only a regular
file is read, so a FIFO, a device or a socket is refused at once instead of blocking forever. :func:`parse_json` adds
limits on nesting depth and on the length of integers, so a small hostile file cannot make
the parser, or code walking its result, run for long or recurse deeply, and refuses a key repeated
in one object (readers disagree on which value counts).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO

from layersearch.common.errors import LayersearchError

#: Largest input file read (bytes): masks and profiles are a few KB, prompt lists a few MB.
MAX_INPUT_BYTES = 32 * 1024 * 1024
#: Deepest JSON nesting accepted (our files nest 3 levels).
MAX_JSON_DEPTH = 32
#: Longest integer literal accepted, in digits.
MAX_INT_DIGITS = 30

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


def read_text(path: str | Path, what: str, *, max_bytes: int | None = None) -> str:
    """The text of ``path``, a ``what`` file ("mask", "prompts"); raises LayersearchError.

    ``max_bytes`` defaults to :data:`MAX_INPUT_BYTES`.
    """
    max_bytes = MAX_INPUT_BYTES if max_bytes is None else max_bytes
    with open_input(path, what) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > max_bytes:
            raise LayersearchError(f"{what} file {path} is too large ({size} bytes; at most {max_bytes})")
        try:
            data = handle.read(max_bytes + 1)  # bounded even if the file grows while read
        except OSError as exc:
            raise LayersearchError(f"cannot read {what} file {path}: {exc.strerror or exc}") from None
    path = Path(path)
    if len(data) > max_bytes:
        raise LayersearchError(f"{what} file {path} is too large (more than {max_bytes} bytes)")
    return decode_utf8(data, f"{what} file {path}")


def open_input(path: str | Path, what: str) -> BinaryIO:
    """``path`` opened for reading in binary, a ``what`` file; raises LayersearchError unless it is
    a regular file (a directory, FIFO, device or socket is refused without waiting on it)."""
    if not isinstance(path, (str, os.PathLike)):
        raise LayersearchError(f"{what} file must be a path (str or Path), got {type(path).__name__}")
    if isinstance(path, str) and not path.strip():  # Path("") is ".", the current folder
        raise LayersearchError(f"{what} file name is empty: name a file")
    if "\0" in os.fspath(path):
        raise LayersearchError(f"{what} file name {os.fspath(path)!r} contains a NUL character")
    path = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO nobody writes to returns at once instead of waiting for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise LayersearchError(f"{what} file not found: {path}") from None
    except IsADirectoryError:
        raise LayersearchError(f"{what} file {path} is a directory") from None
    except OSError as exc:
        raise LayersearchError(f"cannot read {what} file {path}: {exc.strerror or exc}") from None
    try:
        _refuse_special(os.fstat(fd).st_mode, path, what)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular_file(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` when it is a regular file (after symlinks), for inputs handed to a library that opens
    them itself; a missing path is left to that reader's own message. Raises LayersearchError for a
    directory, FIFO, device or socket (a library opening a FIFO would wait forever)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return path
    _refuse_special(mode, path, what)
    return path


def _refuse_special(mode: int, path: Path, what: str) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise LayersearchError(f"{what} file {path} is a directory")
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "something else")
    raise LayersearchError(f"{what} file {path} is {kind}, not a regular file")


def decode_utf8(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text (a leading BOM dropped); raises LayersearchError naming the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise LayersearchError(
            f"{where} is not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}); save it as UTF-8"
        ) from None


def parse_json(text: str, where: str) -> Any:
    """Parsed JSON with bounded nesting and integer length; raises LayersearchError naming ``where``."""
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise LayersearchError(f"{where}: JSON nested {depth} levels deep (at most {MAX_JSON_DEPTH})")
    try:
        data = json.loads(text, parse_int=_bounded_int, parse_float=_finite_float, parse_constant=_constant,
                          object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise LayersearchError(f"{where}: malformed JSON ({exc.msg} at line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:
        raise LayersearchError(f"{where}: {exc}") from None
    if _SURROGATE_ESCAPE.search(text):  # only an escape can make a lone surrogate: walk just then
        _check_strings(data, where)
    return data


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are all different: with a repeated key, JSON readers disagree on which
    value counts (Python's keeps the last), so no file of ours may hold one."""
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        repeated = next(key for key, _ in pairs if _seen_before(key, seen))
        raise ValueError(f"key {repeated!r} appears twice in one object (keep one)")
    return data


def _seen_before(key: str, seen: set[str]) -> bool:
    """True when ``key`` is already in ``seen``; adds it otherwise."""
    if key in seen:
        return True
    seen.add(key)
    return False


def _finite_float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):  # 1e999: no file of ours holds a number beyond a float's range
        raise ValueError(f"number {literal[:40]} is too large for a float (numbers must be finite)")
    return value


def _constant(name: str) -> float:
    # NaN stays (a measurement that could not be taken is written as NaN; each reader checks
    # its own fields); an infinity is never a setting or a measurement of ours.
    if name != "NaN":
        raise ValueError(f"{name} is not a finite number (numbers must be finite)")
    return math.nan


def _check_strings(data: Any, where: str) -> None:
    """Raise naming the first string (or key) of ``data`` that is not valid Unicode (a lone surrogate)."""
    from layersearch.common.checks import check_text

    stack: list[tuple[Any, str]] = [(data, "a string")]
    while stack:
        item, what = stack.pop()
        if isinstance(item, str):
            check_text(item, f"{where}: {what}")
        elif isinstance(item, list):
            stack.extend((value, what) for value in item)
        elif isinstance(item, dict):
            for key, value in item.items():
                check_text(key, f"{where}: a key")
                stack.append((value, f'"{key}"'))


def json_depth(text: str) -> int:
    """Deepest bracket nesting of ``text`` outside strings (linear time, no recursion)."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _bounded_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"integer with {len(literal.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(literal)


def domain_options(items: list[str], option: str, form: str) -> dict[str, str]:
    """Repeated ``NAME=VALUE`` options (one mask source per domain) as {name: value}; one error
    line for a malformed or repeated one. ``form`` says the expected shape in that line."""
    named: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise LayersearchError(f"{option} takes {form}, got {item!r}")
        if name in named:
            raise LayersearchError(f"{option} gives two masks for domain {name!r}")
        named[name] = value
    return named


__all__ = ["MAX_INPUT_BYTES", "MAX_JSON_DEPTH", "check_regular_file", "decode_utf8", "domain_options", "json_depth",
           "open_input", "parse_json", "read_text"]
