"""Where the target's forwards run: the forward backend under the decode loop.

The loop asks a backend for forwards and rollbacks and never asks how they are done. Two
implementations share one interface (:class:`Backend`):

* :class:`EagerBackend`: a dynamic cache (:func:`~layersearch.runtime.cache.new_cache`), one
  eager forward per call; a rollback cuts every layer back (a layer-skip draft appends entries
  only in the layers it ran, and those are not the target's).
* :class:`CapturedBackend`: the model's static cache, each fixed-shape forward compiled once
  under **the** compile key (:func:`compile_key`) and replayed; a rollback moves nothing: every
  forward writes from its first position and the causal mask hides what lies beyond.

:func:`choose_backend` picks one for a generation. Captured is asked for with ``compile=True``;
it falls back to eager, with the reason in ``stats.path_reason``, where a part cannot be traced
(:func:`capture_blocker`). Inside a captured generation a few forwards run eagerly over the
static cache too, each for a stated reason (:meth:`CapturedBackend.forward`).

A step runs a handful of shapes: the draft's one-token forward under each plan and verification
over k + 1 tokens for each draft length k. :class:`CapturedForwards`, one per model and shared
by its decoders, holds the plan views, the static cache and the compiled forwards in a bounded
least-recently-used table (a controller that keeps switching plans cannot compile without
bound); its :meth:`~CapturedForwards.stats` count entries, hits, misses, evictions and compile
seconds. Each entry is a fresh copy of :func:`_forward` compiled by :func:`dynamo_compiler`
(``torch.compile(fullgraph=True, dynamic=False)``; ``mode="reduce-overhead"`` on CUDA: a CUDA
graph): dynamo keys compiled code by the code object, so entries never evict each other from its
per-code recompile limit. What compiling reports is :mod:`layersearch.runtime.compiling`.
"""

from __future__ import annotations

import contextlib
import threading
import time
import types
import weakref
from collections import OrderedDict
from typing import Any, Callable, ContextManager, Hashable, Iterator, NamedTuple, Protocol, cast

import torch
from transformers import PreTrainedModel

from layersearch.common.errors import LayersearchError
from layersearch.kernels.select import ROUTED_KERNELS, is_traceable
from layersearch.masks.mask import SkipMask
from layersearch.models.plan_view import plan_view
from layersearch.runtime.cache import has_sliding_window, new_cache, new_static_cache, seat_static_cache, truncate_cache
from layersearch.runtime.compiling import CaptureStats, CompileNote, note_compile
from layersearch.runtime.forward import forward_tokens
from layersearch.runtime.step import Drafter, Verifier


#: Positions a static cache keeps beyond the prompt, the new tokens and the longest draft
#: (the verifier's own token and the newest, not yet cached, token).
CAPACITY_MARGIN = 2
#: The longest draft a static cache is sized for at least (a rule may grow its drafts).
MIN_DRAFT_ROOM = 64
#: Compiled forwards kept per model; the least recently used goes first.
MAX_ENTRIES = 32

#: ``compiler(device)`` makes one compiled forward of :func:`_forward`'s signature.
Compiler = Callable[[torch.device], Callable[..., torch.Tensor]]


class CompileKey(NamedTuple):
    """What makes two captured forwards the same compiled code: the draft plan (None: the
    target), tokens in, logits kept, the reduced head (by identity), the static cache's capacity,
    and the model's routed kernels (a graph traced with numba's ops differs)."""

    plan: SkipMask | None
    tokens: int
    keep: int
    head: int
    capacity: int
    kernels: object


def compile_key(model: PreTrainedModel, plan: SkipMask | None, tokens: int, keep: int, head: Any, cache: Any) -> CompileKey:
    """The one compile key of a forward of ``tokens`` ids keeping ``keep`` logits, over ``cache``
    (a static cache). The decode loop, the profiler and the benchmarks all key by it, so a
    benchmark's compiled forwards are the ones a generation replays."""
    return CompileKey(plan, tokens, keep, id(head), cache.get_max_length(), vars(model).get(ROUTED_KERNELS))


def capture_blocker(model: PreTrainedModel, drafter: Drafter, verifier: Verifier) -> str:
    """Why a generation of these parts cannot run captured ("" when it can)."""
    if not verifier.capturable:
        return f"the {verifier.name!r} verifier masks a token tree per step"
    if drafter.hidden_layers:
        return "the drafter reads the verifier's hidden states"
    if has_sliding_window(model):
        return "sliding-window attention keeps a ring cache that cannot roll back"
    overrides = [vars(module)["forward"] for module in model.modules() if "forward" in vars(module)]
    if not all(is_traceable(forward) for forward in overrides):  # the kernels' routed forwards are traceable
        return "a module's forward is overridden by code that cannot be traced"
    return ""


class Backend(Protocol):
    """Runs the target's forwards of one generation, owns their cache and rolls it back."""

    path: str  # "captured" or "eager"
    reason: str  # why a captured generation runs eagerly ("" otherwise)
    cache: Any  # the transformers Cache the forwards read and write
    hidden: torch.Tensor | None  # [n, layers, hidden]: the states of the last forward run inside capturing()

    def forward(self, tokens: Any, start: int, keep: int | None = None, *, plan: SkipMask | None = None,
                head: Any = None, hidden_layers: tuple[int, ...] = (), **options: Any) -> Any:
        """Logits [keep or n, vocab] of ``tokens`` at ``start`` (under ``plan``: a draft plan),
        in the cache; with ``hidden_layers``, ``(logits, hidden)`` as :func:`forward_tokens`."""
        ...

    def rollback(self, length: int) -> None:
        """Keep the cache's first ``length`` positions: what follows is not the target's."""
        ...

    def capturing(self, layers: tuple[int, ...]) -> ContextManager[None]:
        """Inside, every forward also keeps the outputs of decoder ``layers`` in :attr:`hidden`."""
        ...

    def claim(self) -> ContextManager[None]:
        """Hold the cache for one generation (a shared cache: a clear error if it is held)."""
        ...


class BackendBase:
    """The model under each draft plan, resolved once per plan object (the drafter's plan is one
    object until the controller changes the mask), and the timer every forward runs under."""

    def __init__(self, model: PreTrainedModel, table: CapturedForwards, timed: Callable[[], ContextManager]) -> None:
        self.model, self.table, self.timed = model, table, timed
        self.plan: SkipMask | None = None
        self.plan_model: PreTrainedModel = model
        self.hidden: torch.Tensor | None = None
        self._capture: tuple[int, ...] = ()

    def _under(self, plan: SkipMask) -> PreTrainedModel:
        # The drafter's plan is one object until the controller changes the mask: one identity check a step.
        if plan is not self.plan:
            self.plan, self.plan_model = plan, self.table.view(plan)
        return self.plan_model

    @contextlib.contextmanager
    def capturing(self, layers: tuple[int, ...]) -> Iterator[None]:
        self._capture = layers
        try:
            yield
        finally:
            self._capture = ()

    def _eager(self, model: PreTrainedModel, tokens: Any, start: int, keep: int | None, head: Any,
               hidden_layers: tuple[int, ...], options: dict) -> Any:
        if self._capture:  # SD²'s steering: the verifier's hidden states from the same forward
            logits, self.hidden = forward_tokens(model, tokens, start, self.cache, keep, hidden_layers=self._capture,
                                                 head=head, **options)
            return logits
        return forward_tokens(model, tokens, start, self.cache, keep, hidden_layers=hidden_layers, head=head, **options)

    cache: Any


class EagerBackend(BackendBase):
    """Eager forwards over a dynamic cache of the generation's own; rollback cuts it."""

    path = "eager"

    def __init__(self, model: PreTrainedModel, table: CapturedForwards, timed: Callable[[], ContextManager],
                 reason: str = "") -> None:
        super().__init__(model, table, timed)
        self.reason = reason
        self.cache = new_cache(model)

    def forward(self, tokens: Any, start: int, keep: int | None = None, *, plan: SkipMask | None = None,
                head: Any = None, hidden_layers: tuple[int, ...] = (), **options: Any) -> Any:
        model = self.model if plan is None else self._under(plan)
        with self.timed():
            return self._eager(model, tokens, start, keep, head, hidden_layers, options)

    def rollback(self, length: int) -> None:
        truncate_cache(self.cache, length)

    def claim(self) -> ContextManager[None]:
        return contextlib.nullcontext()  # the cache is this generation's own


class CapturedBackend(BackendBase):
    """Compiled forwards over the model's one static cache (shared by its decoders: one
    generation at a time, :meth:`claim`); rollback moves nothing."""

    path = "captured"
    reason = ""

    def __init__(self, model: PreTrainedModel, table: CapturedForwards, timed: Callable[[], ContextManager],
                 capacity: int, compile_bound: Callable[[], int]) -> None:
        super().__init__(model, table, timed)
        self.cache = table.static_cache(capacity)
        self.compile_bound = compile_bound  # the generation's bound on compiles, for the progress line
        self.misses_before = table.stats().misses

    def forward(self, tokens: Any, start: int, keep: int | None = None, *, plan: SkipMask | None = None,
                head: Any = None, hidden_layers: tuple[int, ...] = (), **options: Any) -> Any:
        model = self.model if plan is None else self._under(plan)
        with self.timed():
            # Eager over the static cache, each for its reason: the prefill's length varies per
            # prompt (start 0), hidden states and a token tree's positions and mask are not traced.
            if self._capture or hidden_layers or options or start == 0:
                seat_static_cache(self.cache, start)
                return self._eager(model, tokens, start, keep, head, hidden_layers, options)
            ids = torch.as_tensor(tokens, device=self.model.device).view(-1)  # [n]
            n = ids.shape[0]
            kept = n if keep is None else keep
            key = compile_key(self.model, plan, n, kept, head, self.cache)
            if key not in self.table:
                self._note_compile(plan, n)
            return self.table.forward(model, key, self.cache, ids, start, kept, head)

    def rollback(self, length: int) -> None:
        """Nothing to move: the next forward writes over the stale entries, the causal mask hides the rest."""

    def claim(self) -> ContextManager[None]:
        return self.table.claim()

    def _note_compile(self, plan: SkipMask | None, n: int) -> None:
        # Bound: verifications of 1..max_draft + 1 tokens and a one-token draft forward under the plan.
        number = self.table.stats().misses - self.misses_before + 1
        what = f"draft {n} token{'s' if n > 1 else ''} under the plan" if plan is not None else \
            "one token" if n == 1 else f"verify {n} tokens"
        note_compile(CompileNote(number, self.compile_bound(), what))


def choose_backend(model: PreTrainedModel, table: CapturedForwards, compile: bool, blocker: str,
                   timed: Callable[[], ContextManager], capacity: int, compile_bound: Callable[[], int]) -> Backend:
    """The captured backend when ``compile`` and nothing blocks it (``blocker`` == ""), else the
    eager one (carrying ``blocker`` as its reason). ``capacity``: the positions a generation may
    hold (prompt, new tokens and the longest draft; the table rounds it up)."""
    if compile and not blocker:
        return CapturedBackend(model, table, timed, capacity, compile_bound)
    return EagerBackend(model, table, timed, blocker if compile else "")


def capacity(prompt_length: int, max_new: int, longest_draft: int) -> int:
    """Positions a static cache needs for one generation: the prompt, the new tokens and the
    longest draft (at least :data:`MIN_DRAFT_ROOM`), plus :data:`CAPACITY_MARGIN`."""
    return prompt_length + max_new + max(longest_draft, MIN_DRAFT_ROOM) + CAPACITY_MARGIN


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


def _forward(model: PreTrainedModel, cache: Any, ids: torch.Tensor, positions: torch.Tensor, keep: int, head: Any) -> torch.Tensor:
    # ids, positions [1, n] -> logits [keep, vocab]; every cache layer writes from positions[0, 0].
    seat_static_cache(cache, positions[0, 0])
    if head is None:
        return model(input_ids=ids, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=keep).logits[0]
    hidden = cast(Any, model).get_decoder()(input_ids=ids, position_ids=positions, cache=cache, use_cache=True).last_hidden_state
    return head.logits(hidden[0, -keep:])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _counter():
    n = 0
    while True:
        n += 1
        yield n


_COUNTER = _counter()
