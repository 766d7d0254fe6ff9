"""Checks of numeric arguments, one wording everywhere: each returns the value or raises
:class:`~layersearch.common.errors.LayersearchError` naming ``what`` (the argument or field, which
the error's ``fields`` carry so the CLI can name its option) and the value it got.

``bool`` is refused where a number is expected (``True`` is an ``int`` to Python, never a
count or a ratio to a user).
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Mapping, Sequence, TypeVar, cast

from layersearch.common.errors import LayersearchError


def check_int(value: Any, what: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` if it is an integer in ``[minimum, maximum]`` (no upper bound when None)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise LayersearchError(f"{what} must be an integer {bound}, got {value!r}", fields=what)
    return value


def check_int_choice(value: Any, choices: Sequence[int], what: str) -> int:
    """``value`` if it is an integer among ``choices``, by type and value: ``64.0 in (32, 64)``
    and ``True in (1, 2)`` hold in Python, yet a float or a bool reaches the kernels that take the
    number and fails there, far from the field that held it."""
    if isinstance(value, bool) or not isinstance(value, int) or value not in choices:
        raise LayersearchError(f"{what} must be one of {', '.join(map(str, choices))}, got {value!r}", fields=what)
    return value


def check_fraction(value: Any, what: str) -> float:
    """``value`` as a float if it is a real number in ``[0, 1]`` (NaN refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise LayersearchError(f"{what} must be in [0, 1], got {value!r}", fields=what)
    return float(value)


def check_positive(value: Any, what: str, *, unit: str = "") -> float:
    """``value`` as a float if it is a finite real number > 0 (``unit`` only words the message)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < math.inf:
        raise LayersearchError(f"{what} must be > 0{' ' + unit if unit else ''}, got {value!r}", fields=what)
    return float(value)


#: Longest draft any command or file takes: beyond every method's (SWIFT drafts up to 25
#: tokens), and a bound on the work per setting (DISCO's tuning decodes with every static
#: length 1..N).
MAX_DRAFT_LENGTH = 64


def check_draft_length(value: Any, what: str = "max_draft") -> int:
    """``value`` if it is a draft-length bound in ``[1, MAX_DRAFT_LENGTH]``."""
    return check_int(value, what, minimum=1, maximum=MAX_DRAFT_LENGTH)


#: Largest seed any command takes: what every generator layersearch seeds accepts (numpy's
#: legacy RandomState stops at 2**32 - 1, torch's at 2**64 - 1).
MAX_SEED = 2**32 - 1


def check_seed(value: Any, what: str = "seed") -> int:
    """``value`` if it is an integer seed in ``[0, MAX_SEED]``."""
    return check_int(value, what, minimum=0, maximum=MAX_SEED)


def check_real(
    value: Any, what: str, *, low: float = -math.inf, high: float = math.inf, low_open: bool = False, high_open: bool = False,
) -> float:
    """``value`` as a float if it is a finite real number between ``low`` and ``high`` (each
    bound excluded when its ``*_open`` is True). NaN and infinities are always refused."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        shown = f"in {left}{low:g}, {high:g}{right}" if math.isfinite(low) and math.isfinite(high) else (
            f"{'>' if low_open else '>='} {low:g}" if math.isfinite(low) else f"{'<' if high_open else '<='} {high:g}")
        raise LayersearchError(f"{what} must be a finite number {shown}, got {value!r}", fields=what)
    return float(value)


def check_schema_version(version: Any, readable: Sequence[int], what: str = "schema_version") -> int:
    """``version`` if this layersearch reads it (one of ``readable``): the one wording of every
    file's version check. A version above them is named as a newer layersearch's file (an upgrade
    reads it), anything else (a bool, a string, a version never written) as unsupported."""
    if isinstance(version, int) and not isinstance(version, bool) and version > max(readable):
        raise LayersearchError(f"written by a newer layersearch ({what} {version}; this version reads up to "
                               f"{max(readable)}): upgrade layersearch to read it")
    if isinstance(version, bool) or not isinstance(version, int) or version not in readable:
        raise LayersearchError(f"unsupported {what} {version!r} (expected {', '.join(map(str, readable))})")
    return version


_Function = TypeVar("_Function", bound=Callable[..., Any])


def api_arguments(function: _Function) -> _Function:
    """``function`` (a public API function, method or constructor) with a call that does not fit
    its signature refused as one LayersearchError naming the argument and the ones it takes:
    Python's TypeError is not the error the API promises for a bad argument. The signature
    itself is unchanged (``help()`` and ``inspect.signature`` show it)."""
    import functools
    import inspect

    signature = inspect.signature(function)
    called = function.__qualname__.removesuffix(".__init__")
    takes = _parameter_names(signature)

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise LayersearchError(f"{called}(){_binding_problem(exc, signature, kwargs)}; it takes {takes}") from None
        return function(*args, **kwargs)

    return cast(_Function, checked)


def _parameter_names(signature: Any) -> str:
    """``spec_or_path, model and, by keyword, kernels``: a signature's arguments in words (no ``self``)."""
    import inspect

    named = [p for p in signature.parameters.values() if p.name not in ("self", "cls")
             and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    positional = [p.name for p in named if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    keyword = [p.name for p in named if p.kind is inspect.Parameter.KEYWORD_ONLY]
    if not keyword:
        return ", ".join(positional) or "no arguments"
    return (f"{', '.join(positional)} and, by keyword, " if positional else "by keyword ") + ", ".join(keyword)


def _binding_problem(exc: TypeError, signature: Any, kwargs: Mapping[str, Any]) -> str:
    """What did not fit: an unknown keyword (with the closest known name), else Python's words."""
    import difflib
    import inspect

    parameters = signature.parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        unknown = [name for name in kwargs if name not in parameters or parameters[name].kind is inspect.Parameter.POSITIONAL_ONLY]
        if unknown:
            close = difflib.get_close_matches(unknown[0], [n for n in parameters if n not in ("self", "cls")], n=1)
            return f" got an unexpected argument {unknown[0]!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
    return f": {exc}"


#: The draft quantizations, the one list of them: a spec's ``drafter.quant`` and a
#: ``MODEL@QUANT`` draft model read it (a new scheme is one name here, and its kernels in
#: :mod:`layersearch.models.quantize`).
QUANT_SCHEMES = ("int8",)
#: The quantizations the model's own draft can take (its twins: int8, or weight-only int4).
SELF_DRAFT_QUANTS = ("int8", "int4")

#: The dtype names every command and file takes (torch's float32, float16, bfloat16).
DTYPE_NAMES = ("float32", "float16", "bfloat16")


def check_device_name(device: Any) -> re.Match:
    """The match of a device name ("cpu", "cuda", "cuda:N"; group 1: N), whatever this machine has."""
    match = re.fullmatch(r"cpu|cuda(?::(\d+))?", device.strip().lower()) if isinstance(device, str) else None
    if match is None:
        raise LayersearchError(f"unknown device {device!r}; use cpu, cuda or cuda:N")
    return match


def check_dtype_name(dtype: Any) -> str:
    """``dtype`` if it is one of :data:`DTYPE_NAMES`."""
    if not isinstance(dtype, str) or dtype not in DTYPE_NAMES:
        raise LayersearchError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPE_NAMES)}")
    return dtype


def check_finite(value: Any, what: str) -> float:
    """``value`` as a float if it is a finite real number (NaN and infinities refused): the
    check every float option and every number read from a file passes before its own range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LayersearchError(f"{what} must be a finite number, got {value!r}", fields=what)
    return float(value)


def max_threads() -> int:
    """The most CPU threads a command may ask for: the machine's CPU count (more only contend,
    and torch fails deep inside a model load on numbers it cannot start)."""
    import os

    return os.cpu_count() or 1


def check_threads(value: Any, what: str = "threads") -> int:
    """``value`` if it is a thread count in ``[1, max_threads()]``."""
    limit = max_threads()
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise LayersearchError(f"{what} must be an integer in [1, {limit}] (this machine has {limit} CPU threads), got {value!r}", fields=what)
    return value


def check_text(value: Any, what: str, *, argv: bool = False) -> str:
    """``value`` if it is a str that is valid Unicode (encodes as UTF-8). With ``argv`` (a
    command-line value), bytes that were not UTF-8 reached Python as lone surrogates
    (U+DC80..U+DCFF) and are named as the byte they were; otherwise (a JSON ``\\ud800``
    escape, a Python string) a lone surrogate is named as its code point."""
    if not isinstance(value, str):
        raise LayersearchError(f"{what} must be text (a str), got {type(value).__name__}", fields=what)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        code, at = ord(value[exc.start]), exc.start + 1
        if argv and 0xDC80 <= code <= 0xDCFF:
            raise LayersearchError(f"{what} is not valid UTF-8 text (byte 0x{code - 0xDC00:02x} at character {at})", fields=what) from None
        raise LayersearchError(f"{what} is not valid Unicode text (a lone surrogate U+{code:04X} at character {at})", fields=what) from None
    return value


def check_learning_rate(value: float, what: str = "lr") -> float:
    """Check a learning rate: finite and in (0, 1] (an AdamW step moves each weight by about lr, so
    more than 1 per step is a typo, and it overflows into NaN weights before anything is written)."""
    return check_real(value, what, low=0.0, high=1.0, low_open=True)
