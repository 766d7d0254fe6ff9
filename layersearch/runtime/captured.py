"""Captured forwards: each fixed-shape forward of the decode loop compiled once and replayed.

A decode step runs a handful of shapes: the draft's one-token forward under each plan, and
verification over k + 1 tokens for each draft length k. :class:`CapturedForwards` compiles each
(plan, tokens, logits kept, head) once with ``torch.compile(fullgraph=True, dynamic=False)``
(``mode="reduce-overhead"`` on CUDA: the forward is a CUDA graph) over a static KV cache, and
keeps the compiled functions in a bounded least-recently-used table, so a controller that keeps
switching plans cannot compile without bound. The table's size, hits, misses, evictions and the
seconds spent compiling are in :meth:`CapturedForwards.stats`.

Dynamo keys its compiled code by the Python code object, so every entry compiles its own copy
of :func:`_forward`'s code: entries never evict each other from dynamo's per-code recompile limit.
"""

from __future__ import annotations

import contextlib
import threading
import time
import types
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterator, cast

import torch
from transformers import PreTrainedModel

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.plan_view import plan_view
from layersearch.runtime.cache import new_static_cache, seat_static_cache

#: Compiled forwards kept per decoder; the least recently used goes first.
MAX_ENTRIES = 32

#: ``compiler(device)`` makes one compiled forward of :func:`_forward`'s signature.
Compiler = Callable[[torch.device], Callable[..., torch.Tensor]]


def _forward(model: PreTrainedModel, cache: Any, ids: torch.Tensor, positions: torch.Tensor, keep: int, head: Any) -> torch.Tensor:
    # ids, positions [1, n] -> logits [keep, vocab]; every cache layer writes from positions[0, 0].
    seat_static_cache(cache, positions[0, 0])
    if head is None:
        return model(input_ids=ids, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=keep).logits[0]
    hidden = cast(Any, model).get_decoder()(input_ids=ids, position_ids=positions, cache=cache, use_cache=True).last_hidden_state
    return head.logits(hidden[0, -keep:])


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


class CapturedForwards:
    """One model's plan views, static KV cache and compiled forwards, shared by every decoder
    of that model (:func:`captured_forwards`), keyed by (plan, n, keep, head, capacity).

    Like transformers' model-held static cache, the cache is one per model: a generation
    holds it (:meth:`claim`), and a second one of the same model started meanwhile (another
    thread) gets a clear error instead of writing into the first one's cache."""

    def __init__(self, model: PreTrainedModel, max_entries: int = MAX_ENTRIES,
                 compiler: Compiler | None = None) -> None:
        """``compiler(device)`` makes one compiled forward (default: :func:`dynamo_compiler`'s inductor)."""
        # A weak reference: the table is kept per model in a WeakKeyDictionary, so a strong one
        # would keep every model alive that a decoder was ever made for.
        self._model = weakref.ref(model)
        self.max_entries = max_entries
        self.compiler: Compiler = compiler or dynamo_compiler()
        self._compiled: OrderedDict[Hashable, Callable[..., torch.Tensor]] = OrderedDict()
        self._hits = self._misses = self._evictions = 0
        self.compile_seconds = 0.0  # the compiling calls so far (a plain attribute: the loop reads it per step)
        self._views: dict[SkipMask, PreTrainedModel] = {}
        self._cache: Any = None
        self._busy = threading.Lock()

    @property
    def model(self) -> PreTrainedModel:
        """The model these forwards run."""
        model = self._model()
        if model is None:
            raise RuntimeError("the model of these captured forwards was freed")  # a bug: decoders hold their model
        return model

    def view(self, plan: SkipMask | None) -> PreTrainedModel:
        """The model with ``plan`` applied (None: the model), built once per plan and kept."""
        if plan is None:
            return self.model
        view = self._views.get(plan)
        if view is None:
            if len(self._views) >= 4 * self.max_entries:
                self._views.clear()  # views are cheap to rebuild; a switching controller must not grow them without bound
            view = self._views[plan] = plan_view(self.model, plan)
        return view

    def static_cache(self, capacity: int) -> Any:
        """The static KV cache, kept across generations; reallocated (rounded up to 256
        positions, so nearby lengths share the compiled forwards) when ``capacity`` outgrows it."""
        if self._cache is None or self._cache.get_max_length() < capacity:
            self._cache = new_static_cache(self.model, -(-capacity // 256) * 256)
        return self._cache

    @contextlib.contextmanager
    def claim(self) -> Iterator[None]:
        """Hold the static cache for one generation; raises LayersearchError while another holds it."""
        if not self._busy.acquire(blocking=False):
            raise LayersearchError(
                "another captured generation of this model is running: its decoders share one static cache; "
                "run them one after the other, give each thread its own model, or use compile=False"
            )
        try:
            yield
        finally:
            self._busy.release()

    def forward(self, model: PreTrainedModel, key: Hashable, cache: Any, ids: torch.Tensor, start: int, keep: int, head: Any) -> torch.Tensor:
        """Logits [keep, vocab] of ``model`` (a plan's view) over ``ids`` [n] at ``start``, by the
        compiled forward of ``key`` (compiled on first use; the least recently used one evicted
        past ``max_entries``)."""
        device = ids.device
        positions = torch.arange(start, start + ids.shape[0], device=device).view(1, -1)  # [1, n]
        compiled = self._compiled.get(key)
        if compiled is not None:
            self._hits += 1
            self._compiled.move_to_end(key)
            return self._run(compiled, model, cache, ids, positions, keep, head)
        self._misses += 1
        compiled = self.compiler(device)
        self._compiled[key] = compiled
        if len(self._compiled) > self.max_entries:
            self._compiled.popitem(last=False)
            self._evictions += 1
        _sync(device)
        t0 = time.perf_counter()
        logits = self._run(compiled, model, cache, ids, positions, keep, head)
        _sync(device)
        self.compile_seconds += time.perf_counter() - t0
        return logits

    def __contains__(self, key: Hashable) -> bool:
        """Whether the forward of ``key`` is compiled (a call runs it without compiling)."""
        return key in self._compiled

    @property
    def backend(self) -> str:
        """The dynamo backend its compiler uses (``inductor`` unless a test gave another)."""
        return str(getattr(self.compiler, "backend", "inductor"))

    def stats(self) -> CaptureStats:
        """The table's counters so far."""
        return CaptureStats(len(self._compiled), self._hits, self._misses, self._evictions, self.compile_seconds)

    @staticmethod
    def _run(compiled, model, cache, ids, positions, keep, head) -> torch.Tensor:
        if ids.device.type == "cuda":
            # Each call is its own CUDA-graph step; the output is copied before the next replay reuses its memory.
            torch.compiler.cudagraph_mark_step_begin()
            return compiled(model, cache, ids.view(1, -1), positions, keep, head).clone()
        return compiled(model, cache, ids.view(1, -1), positions, keep, head)


_SHARED: "weakref.WeakKeyDictionary[PreTrainedModel, CapturedForwards]" = weakref.WeakKeyDictionary()


def captured_forwards(model: PreTrainedModel) -> CapturedForwards:
    """The :class:`CapturedForwards` of ``model``, made on first use and shared by its decoders."""
    shared = _SHARED.get(model)
    if shared is None:
        shared = _SHARED[model] = CapturedForwards(model)
    return shared


def compile_with(model: PreTrainedModel, compiler: Compiler) -> CapturedForwards:
    """Give ``model`` a fresh shared table compiling with ``compiler``; decoders made from now on
    use it. Tests pass ``dynamo_compiler("eager")``: the same full-graph capture, without
    inductor's code generation (tens of seconds per shape on a CPU)."""
    shared = _SHARED[model] = CapturedForwards(model, compiler=compiler)
    return shared


def dynamo_compiler(backend: str = "inductor") -> Compiler:
    """A compiler of fresh copies of :func:`_forward` (each its own code object, so its own dynamo
    cache) by ``torch.compile(fullgraph=True, dynamic=False)`` with ``backend``; with inductor on
    CUDA, ``mode="reduce-overhead"`` (a CUDA graph)."""

    def compile_forward(device: torch.device) -> Callable[..., torch.Tensor]:
        code = _forward.__code__.replace(co_name=f"captured_forward_{next(_COUNTER)}")
        function = types.FunctionType(code, _forward.__globals__, code.co_name)
        mode = "reduce-overhead" if device.type == "cuda" and backend == "inductor" else None
        return torch.compile(function, fullgraph=True, dynamic=False, backend=backend, mode=mode)

    setattr(compile_forward, "backend", backend)  # what a profile measured with it records
    return compile_forward


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _counter():
    n = 0
    while True:
        n += 1
        yield n


_COUNTER = _counter()
