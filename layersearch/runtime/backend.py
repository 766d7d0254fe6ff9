"""Where the target's forwards run: the forward backend under the decode loop.

The loop asks a backend for forwards and rollbacks and never asks how they are done. Two
implementations share one interface (:class:`Backend`):

* :class:`EagerBackend`: a dynamic cache (:func:`~layersearch.runtime.cache.new_cache`), one
  eager forward per call; a rollback cuts every layer back (a layer-skip draft appends entries
  only in the layers it ran, and those are not the target's).
* :class:`CapturedBackend`: the model's static cache, each fixed-shape forward compiled once
  (:mod:`layersearch.runtime.captured`) under **the** compile key (:func:`compile_key`); a
  rollback moves nothing: every forward writes from its first position and the causal mask
  hides what lies beyond.

:func:`choose_backend` picks one for a generation. Captured is asked for with ``compile=True``;
it falls back to eager, with the reason in ``stats.path_reason``, where a part cannot be traced
(:func:`capture_blocker`). Inside a captured generation a few forwards run eagerly over the
static cache too, each for a stated reason (:meth:`CapturedBackend.forward`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Iterator, NamedTuple, Protocol

import torch
from transformers import PreTrainedModel

from layersearch.kernels.select import is_traceable
from layersearch.masks.mask import SkipMask
from layersearch.runtime.cache import has_sliding_window, new_cache, seat_static_cache, truncate_cache
from layersearch.runtime.captured import CapturedForwards, CompileNote, note_compile
from layersearch.runtime.forward import forward_tokens

#: Positions a static cache keeps beyond the prompt, the new tokens and the longest draft
#: (the verifier's own token and the newest, not yet cached, token).
CAPACITY_MARGIN = 2
#: The longest draft a static cache is sized for at least (a rule may grow its drafts).
MIN_DRAFT_ROOM = 64


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
    kernels = getattr(model, "_layersearch_kernels", None)
    return CompileKey(plan, tokens, keep, id(head), cache.get_max_length(), kernels)


def capture_blocker(model: PreTrainedModel, drafter: Any, verifier: Any) -> str:
    """Why a generation of these parts cannot run captured ("" when it can)."""
    if getattr(verifier, "capturable", False) is not True:
        return f"the {verifier.name!r} verifier masks a token tree per step"
    if getattr(drafter, "hidden_layers", None):
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


class _Views:
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


class EagerBackend(_Views):
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


class CapturedBackend(_Views):
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
