"""What compiling reports: a forward about to compile, and what a compiled-forward table holds.

Compiling takes 20-40 s a shape on a CPU, so it shows as progress: the captured backend
(:class:`~layersearch.runtime.backend.CapturedBackend`) tells the watchers of :func:`compile_notes`
of every forward about to compile (a :class:`CompileNote`; a command prints it, the runtime prints
nothing), and its table counts what it compiled (:class:`CaptureStats`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

@dataclass(frozen=True)
class CaptureStats:
    """The compiled-forward table: entries now, lookups that hit or compiled, evictions, and
    the seconds the compiling calls took (paid once per entry, reported apart from decoding)."""

    entries: int
    hits: int
    misses: int
    evictions: int
    compile_seconds: float

    @property
    def hit_rate(self) -> float | None:
        """Share of lookups that found a compiled forward (None before any lookup)."""
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"entries": self.entries, "hits": self.hits, "misses": self.misses, "evictions": self.evictions,
                "hit_rate": self.hit_rate, "compile_seconds": round(self.compile_seconds, 3)}


@dataclass(frozen=True)
class CompileNote:
    """A forward about to compile: its number among the generation's compiles, at most how many
    the generation can compile (None: unknown), and what it computes."""

    number: int
    bound: int | None
    what: str  # e.g. "verify 4 tokens"

    def line(self) -> str:
        """The progress line (``compiling forward 2/5 (verify 4 tokens)...``)."""
        count = f"{self.number}/{self.bound}" if self.bound is not None and self.number <= self.bound else str(self.number)
        return f"compiling forward {count} ({self.what})..."


_WATCHERS: list[Callable[[CompileNote], None]] = []


@contextlib.contextmanager
def compile_notes(watch: Callable[[CompileNote], None]) -> Iterator[None]:
    """Inside, ``watch`` is told of every forward about to compile (compiling takes 20-40 s a shape
    on a CPU: a command shows it as progress; the runtime prints nothing itself)."""
    _WATCHERS.append(watch)
    try:
        yield
    finally:
        _WATCHERS.remove(watch)


def note_compile(note: CompileNote) -> None:
    """Tell the watchers of :func:`compile_notes` that ``note``'s forward compiles now."""
    for watch in list(_WATCHERS):
        watch(note)
