"""What the benchmark scripts share to answer bad arguments as the commands do: one
``SCRIPT: error: ...`` line on stderr and exit status 2, never a traceback.

:class:`ToolParser` words argparse's usage errors in one line; :func:`run_tool` runs a script's
body and turns a :class:`~layersearch.common.errors.LayersearchError` (from the checks below, or
from layersearch itself: a missing mask file) into that line. The checks name the option
(``--repeats``) and reuse :mod:`layersearch.common.checks`, so a range reads as it does in the
commands. This module stays light (no torch, no Optuna): ``mask_patterns.py`` imports it too.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Iterable

from layersearch.common.checks import check_device_name, check_dtype_name, check_int, check_real, check_threads
from layersearch.common.errors import LayersearchError
from layersearch.common.jsonfile import read_json_file
from layersearch.common.outputs import check_output


class ToolParser(argparse.ArgumentParser):
    """argparse whose usage errors are one ``SCRIPT: error:`` line and exit 2 (no usage block);
    ``script`` is the script's ``__file__`` (its name is the program's, however it was started)."""

    def __init__(self, script: str, **kwargs: Any) -> None:
        super().__init__(prog=os.path.basename(script), **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def run_tool(parser: argparse.ArgumentParser, body: Callable[[], Any]) -> int:
    """``body()``'s exit status (0 for None); a LayersearchError is one line on stderr and 2."""
    try:
        return int(body() or 0)
    except LayersearchError as exc:
        print(f"{parser.prog}: error: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return 2


def names(value: str, option: str, known: Iterable[str]) -> list[str]:
    """The comma-separated names of ``value``, each one of ``known`` (at least one)."""
    known = tuple(known)
    given = [name.strip() for name in value.split(",")]
    unknown = [name for name in given if name not in known]
    if not value.strip() or unknown:
        shown = ", ".join(repr(name) for name in unknown) if value.strip() else "nothing"
        raise LayersearchError(f"{option}: unknown {shown}; choose from {', '.join(known)}")
    return given


def name(value: str, option: str, known: Iterable[str]) -> str:
    """``value`` if it is one of ``known``."""
    known = tuple(known)
    if value not in known:
        raise LayersearchError(f"{option}: unknown {value!r}; choose one of {', '.join(known)}")
    return value


def device(value: str, option: str = "--device") -> str:
    """``value`` if it names a device this machine has (cpu, cuda, cuda:N)."""
    try:
        match = check_device_name(value)
    except LayersearchError as exc:
        raise LayersearchError(f"{option}: {exc}") from None
    if value.strip().lower() == "cpu":
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        raise LayersearchError(f"{option} {value}: this machine has no CUDA device (use --device cpu)")
    index = int(match[1] or 0)
    if index >= torch.cuda.device_count():
        raise LayersearchError(f"{option} {value}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return value.strip().lower()


def backend(value: str, option: str = "--backend") -> str:
    """``value`` if it names a dynamo backend of this torch (``torch._dynamo.list_backends``)."""
    import torch._dynamo

    known = torch._dynamo.list_backends(exclude_tags=())
    if value not in known:
        shown = sorted({*torch._dynamo.list_backends(), "eager", "aot_eager"} & set(known))
        raise LayersearchError(f"{option}: unknown dynamo backend {value!r}; choose one of {', '.join(shown)} "
                               "(or another of torch._dynamo.list_backends(exclude_tags=()))")
    return value


def dtypes(value: str, option: str) -> list[str]:
    """The comma-separated dtype names of ``value`` (float32, float16, bfloat16)."""
    try:
        return [check_dtype_name(name.strip()) for name in value.split(",")]
    except LayersearchError as exc:
        raise LayersearchError(f"{option}: {exc}") from None


def count(value: Any, option: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` if it is an integer in ``[minimum, maximum]``."""
    return check_int(value, option, minimum=minimum, maximum=maximum)


def real(value: Any, option: str, **bounds: Any) -> float:
    """``value`` if it is a finite number within ``bounds`` (those of :func:`check_real`)."""
    return check_real(value, option, **bounds)


def threads(value: int | None, option: str = "--threads") -> int | None:
    """``value`` (None: torch's choice) if it is a thread count this machine has."""
    return None if value is None else check_threads(value, option)


def json_input(path: str, option: str) -> Any:
    """The parsed JSON file ``path`` (a missing or malformed file is one line naming it)."""
    return read_json_file(path, option)


def output(path: str | None, option: str = "--out") -> str | None:
    """``path`` if it can be written (checked before the work, as the commands check theirs)."""
    if path is not None:
        check_output(path, option)
    return path

