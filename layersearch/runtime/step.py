"""What crosses a decode step: its values, where each one lives, and the plug-in bases.

One step of :mod:`layersearch.runtime.loop` hands four values between its plug-ins::

    StepRequest  ->  drafter.propose   ->  Proposal
    Proposal     ->  verifier.verify   ->  Verdict   (the loop commits and emits)
    StepOutcome  ->  lookahead.update, drafter.observe, controller.observe

and, before a step, the controller reads a :class:`DecodeView` and may answer a :class:`Selection`.

**Where a value lives is in its type.** :data:`HostInt` is a count or length the host holds,
:data:`HostTokens` token ids read to the host, :class:`HostIds` a CPU tensor of ids (the prompt
and the emitted tokens) and :class:`DeviceIds` ids on the model's device, which cost nothing until
they are read. Every device-to-host read goes through :func:`to_host`, which counts it for the
generation running in its thread (on a GPU a read waits for the queued kernels: a step that reads
once runs its kernels back to back).

**A plug-in subclasses its base.** :class:`Drafter`, :class:`Verifier`, :class:`Controller` and
:class:`Lookahead` declare every capability the loop reads, each with its default: a plug-in
writes the method it must (``propose``, ``verify``, ``select``, ``keep_drafting``) and overrides
a capability only to offer it. The loop reads capabilities as attributes; it never probes.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Callable, ContextManager, Iterator, Mapping, NewType, cast

import torch

from layersearch.masks.mask import SkipMask
from layersearch.runtime.sampling import SamplingConfig, next_token_probs

# ----- where values live ------------------------------------------------------------------------

#: A count or length the host holds (read once, already paid for).
HostInt = int
#: Token ids read to the host.
HostTokens = tuple[int, ...]
#: [n] long token ids on the CPU (the prompt and the emitted ids). ``HostIds(tensor)`` marks one.
HostIds = NewType("HostIds", torch.Tensor)
#: [n] long token ids on the model's device: no host read until :func:`to_host`. ``DeviceIds(tensor)`` marks one.
DeviceIds = NewType("DeviceIds", torch.Tensor)



class HostReads:
    """The host reads of one generation: :func:`to_host` adds to the counter in force."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


# The counter of the generation running in this thread (or task): a process-wide count would
# let two generations side by side count each other's reads.
_current_reads: ContextVar[HostReads | None] = ContextVar("layersearch_host_reads", default=None)


def to_host(values: torch.Tensor) -> list:
    """``values`` as a Python list (a scalar as a one-item list), counted as one host read of
    the generation in force (:func:`counting_reads`; outside one, counted nowhere)."""
    reads = _current_reads.get()
    if reads is not None:
        reads.count += 1
    return values.reshape(-1).tolist()


@contextlib.contextmanager
def counting_reads(reads: HostReads) -> Iterator[HostReads]:
    """Count the block's host reads (in this thread or task) in ``reads``; an enclosing count resumes after it."""
    token = _current_reads.set(reads)
    try:
        yield reads
    finally:
        _current_reads.reset(token)


# ----- the values of a step ---------------------------------------------------------------------

#: forward(tokens, start, keep=None, *, plan=None, head=None, ...) -> logits [keep or len(tokens), vocab],
#: run in the shared cache and timed; ``tokens`` a list of ids or a device tensor [n], ``plan`` a
#: draft plan to run the target under (None: the full model).
Forward = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class StepRequest:
    """Everything the step's drafter and verifier may read, built once per step (the cache is
    the target's: a drafter only appends to it, the verifier writes the verified entries)."""

    model: torch.nn.Module
    cache: object  # transformers Cache holding ``position`` committed entries
    sequence: HostIds  # [position + 1] prompt and emitted ids (CPU); the last is not cached
    position: HostInt
    limit: HostInt  # at most this many tokens (lookahead cap and room left before max_new)
    mask: SkipMask  # the controller's current mask (the same object until the controller changes it)
    lookahead: Lookahead
    sampling: SamplingConfig
    generator: torch.Generator | None
    forward: Forward  # forward(tokens, start) -> logits [n, vocab], in the shared cache
    # A drafter running its own model times each of its forwards in this region, so the loop's
    # clock counts them as model time, not bookkeeping (the target's forwards are timed already).
    timed: Callable[[], ContextManager] = contextlib.nullcontext
    # A drafter running its own model runs that model's forward over the prompt in this region:
    # the recorder times it as the draft-side prefill, a phase of its own (not the step's draft).
    draft_prefill: Callable[[], ContextManager] = contextlib.nullcontext
    last_ids: DeviceIds | None = None  # [1] the newest token on the model's device (None: from sequence)

    @property
    def last_token(self) -> HostInt:
        """The newest emitted token (the draft continues after it)."""
        return int(self.sequence[-1])

    @property
    def last_on_device(self) -> DeviceIds:
        """The newest token as a [1] tensor on the model's device, without a host round trip."""
        if self.last_ids is not None:
            return self.last_ids
        return DeviceIds(self.sequence[-1:].to(torch.device(cast(Any, self.model).device)))


@dataclass(frozen=True, eq=False)
class Proposal:
    """Draft tokens and, when sampling, the draft distributions they were drawn from.

    ``ids`` may stay on the device (a captured draft never reads its tokens back before
    verification) or be a CPU tensor (a lookup); a tuple of ints is taken as well.
    :attr:`tokens` reads them to the host."""

    ids: DeviceIds | HostIds  # [k] long (a tuple/list is converted to a CPU tensor)
    probs: torch.Tensor | None  # [k, vocab] when sampling, else None
    drafter: str  # which drafter produced it (its name: the statistics label the step with it)
    forwards: int = 0  # draft forwards spent (incl. one whose low confidence stopped the draft)
    # A token tree (SWIFT): for each chain position, other candidates to verify as leaves there.
    branches: tuple[tuple[int, ...], ...] | None = None
    confidences: tuple[float, ...] = ()  # the draft's top-1 probability at each drafted position (chain drafts)
    plan: SkipMask | None = None  # the draft plan the target ran (None: the controller's mask, or no self-draft)

    def __post_init__(self) -> None:
        if not isinstance(self.ids, torch.Tensor):
            object.__setattr__(self, "ids", torch.tensor(list(self.ids), dtype=torch.long))

    @property
    def size(self) -> HostInt:
        """How many tokens were drafted (no host read)."""
        return int(self.ids.shape[0])

    @cached_property
    def tokens(self) -> HostTokens:
        """The draft tokens as ints (a host read when they are on the device)."""
        if not self.size:
            return ()
        return tuple(self.ids.tolist()) if self.ids.device.type == "cpu" else tuple(to_host(self.ids))

    @classmethod
    def empty(cls, drafter: str) -> Proposal:
        """No draft: the step is a plain target step."""
        return cls(HostIds(torch.empty(0, dtype=torch.long)), None, drafter, 0)


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one draft: accepted draft count and the target's next token.
    ``path`` holds the accepted tokens when they are not a prefix of the draft chain (a tree
    verifier accepted a branch); otherwise it is None."""

    num_accepted: HostInt
    next_token: HostInt
    path: HostTokens | None = None
    node: HostInt | None = None  # the verified input whose logits gave next_token (None: num_accepted)
    next_ids: DeviceIds | None = None  # [1] next_token on the device (the next step drafts from it)

    @property
    def source_node(self) -> HostInt:
        """Index, in the verified input, of the node whose output gave ``next_token``."""
        return self.num_accepted if self.node is None else self.node

    def accepted_tokens(self, chain: HostTokens) -> HostTokens:
        """The accepted draft tokens, given the proposal's chain."""
        return self.path if self.path is not None else tuple(chain[: self.num_accepted])


@dataclass(frozen=True)
class StepOutcome:
    """One draft-and-verify step (or a plain step: ``drafted == 0``): the feedback every plug-in
    point receives, as transformers' candidate generators get the number of matches, and the
    per-step record kept in :class:`~layersearch.runtime.stats.DecodeStats`."""

    step: int  # 0-based decoding step of this generation
    position: int  # cache length before the step (the newest emitted token sat here)
    drafted: int  # draft tokens proposed
    accepted: int  # of them accepted by the target
    emitted: int  # tokens this step added (accepted + the target's own, EOS / max_new may cut)
    drafter: str  # which drafter produced the draft ("layer-skip", "prompt-lookup", ...)
    mask: SkipMask | None  # the plan the draft ran: the controller's mask, or the drafter's plan of it (None: none)
    lookahead: str = ""  # the rule and its cap in force, e.g. "confidence:8"
    draft_forwards: int = 0  # draft model forwards spent (incl. the one whose low confidence stopped it)
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    confidences: tuple[float, ...] = ()  # the draft's top-1 probability at each drafted position (chain drafts)
    host_reads: int = 0  # device-to-host reads the step made (to_host)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready record (the mask as its short string)."""
        return {
            "step": self.step,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "emitted": self.emitted,
            "drafter": self.drafter,
            "mask": None if self.mask is None else self.mask.short_string(),
            "lookahead": self.lookahead,
        }


@dataclass(frozen=True)
class DraftPosition:
    """The draft's view of the next position: ``index`` tokens drafted so far, its logits, and
    the top-1 probability the draft had at the previous position (1.0 before the first token)."""

    index: int
    logits: torch.Tensor  # [vocab]
    sampling: SamplingConfig
    previous_confidence: float = 1.0

    @cached_property
    def probs(self) -> torch.Tensor:
        """The distribution a token would be drawn from: [vocab] (plain softmax when greedy)."""
        if self.sampling.greedy:
            return torch.softmax(self.logits.float(), -1)
        return next_token_probs(self.logits, self.sampling)

    @property
    def confidence(self) -> float:
        """Top-1 probability of :attr:`probs` (a host read)."""
        return to_host(self.probs.max())[0]


@dataclass(frozen=True)
class DecodeView:
    """What a controller sees before a step. The cache holds ``position`` entries;
    ``sequence`` is ``[1, position + 1]``: the prompt and every emitted token (the newest not
    yet cached). ``prompt_hidden`` is the prefill's last hidden states ``[prompt_len, hidden]``
    when the controller asked for them (``wants_prompt_hidden``), else None."""

    model: torch.nn.Module
    cache: object
    sequence: torch.Tensor  # [1, position + 1] on the CPU
    position: HostInt
    step: HostInt
    prompt_length: HostInt
    mask: SkipMask
    max_draft: HostInt
    prompt_hidden: torch.Tensor | None = None


@dataclass(frozen=True)
class Selection:
    """A controller's answer: the mask (and max draft length, None = unchanged) for the next
    steps; ``record`` is stored in ``stats.selections`` with the step, context and seconds."""

    mask: SkipMask
    max_draft: int | None = None
    record: Mapping[str, Any] = field(default_factory=dict)


# ----- the plug-in bases ------------------------------------------------------------------------


class Drafter(ABC):
    """Proposes draft tokens. ``name`` labels the steps it drafted in the statistics.

    A drafter may run the target under a plan in the shared cache (its entries are cut away
    before verification), run a model of its own, or look tokens up without any forward. When
    sampling, ``Proposal.probs`` holds the distributions the tokens were drawn from (a one-hot row
    for a deterministic proposal): all speculative sampling needs to stay exact."""

    name: str = "drafter"
    #: Decoder layers whose verifier outputs the drafter reads (SD²'s steering). Non-empty: the
    #: loop keeps them from the prefill and every verification forward (never an extra forward)
    #: and hands them to :meth:`observe_hidden`; the generation then runs eagerly.
    hidden_layers: tuple[int, ...] = ()

    def check_target(self, model: torch.nn.Module) -> None:
        """Refuse (LayersearchError) a target this drafter cannot draft for; any target by default."""

    def begin(self, prompt: torch.Tensor) -> None:
        """A new generation starts with ``prompt`` ([n] ids); drop per-generation state (none by default)."""

    @abstractmethod
    def propose(self, request: StepRequest) -> Proposal:
        """Up to ``request.limit`` draft tokens after ``request.last_token``."""

    def observe(self, outcome: StepOutcome) -> None:
        """Feedback after the step was verified (nothing to learn by default)."""

    def observe_hidden(self, states: torch.Tensor) -> None:
        """The verifier's outputs of :attr:`hidden_layers` ([len(hidden_layers), hidden]) at the
        input whose output gave the newest token, after the prefill and every verification."""


class Verifier(ABC):
    """Runs the target over a proposal and says how much of it to keep.

    It gets the step's :class:`StepRequest` (the one the drafter got) and the drafter's proposal.
    Afterwards the cache must hold the target's entries for ``request.last_token`` and the
    accepted tokens at positions ``position..position + num_accepted`` (the loop cuts the rest)."""

    name: str = "verifier"
    #: One fixed-shape forward per draft length, nothing traced per step: it can run captured.
    capturable: bool = False

    def check_target(self, model: torch.nn.Module) -> None:
        """Refuse (LayersearchError) a target this verifier cannot verify for; any target by default."""

    @abstractmethod
    def verify(self, request: StepRequest, proposal: Proposal) -> Verdict:
        """The verdict on ``proposal``."""


class Controller(ABC):
    """Chooses the mask the drafter uses (and may cap the draft length).

    Before every step the loop shows it a read-only :class:`DecodeView` (step 0 right after the
    prefill, so a router can look at the prompt once); an answer holds until the next one. A
    controller running forwards of its own in the loop's cache (SWIFT's matchness) goes through
    :func:`~layersearch.runtime.teacher.draft_logits_in_cache` with ``valid=view.position``."""

    #: The prefill's last hidden states in ``DecodeView.prompt_hidden`` at step 0 (a router's input).
    wants_prompt_hidden: bool = False

    @abstractmethod
    def select(self, view: DecodeView) -> Selection | None:
        """Called before every step; None keeps the current selection."""

    def observe(self, outcome: StepOutcome) -> None:
        """Feedback after every verification (nothing to learn by default)."""


class Lookahead(ABC):
    """Decides the draft length, one position at a time: an immutable value.

    The drafter asks :meth:`keep_drafting` with the draft's distribution for the next position
    *before* a token is drawn from it, so a stop never biases speculative sampling. After each
    verification the loop keeps the rule :meth:`update` returns. ``max_draft`` caps every draft;
    a controller may change it (:meth:`with_max_draft`)."""

    max_draft: int  # the longest draft this step
    #: Whether :meth:`keep_drafting` (or :meth:`update`) reads the draft's confidence; a rule that
    #: does not lets a draft run on the device without a host read per token.
    reads_confidence: bool = True

    @property
    def ceiling(self) -> int:
        """The longest draft any later state of the rule may ask for (a static cache is sized for
        it): its cap, unless the rule grows its drafts."""
        return self.max_draft

    @abstractmethod
    def keep_drafting(self, position: DraftPosition) -> bool:
        """Draft a token at ``position``? (``position.index < max_draft`` is the caller's job.)"""

    def update(self, outcome: StepOutcome) -> Lookahead:
        """The rule for the next step, given how this step's draft fared (unchanged by default)."""
        return self

    def with_max_draft(self, max_draft: int) -> Lookahead:
        """The same rule with another cap (a frozen dataclass with a ``max_draft`` field gets it free)."""
        return cast(Lookahead, replace(cast(Any, self), max_draft=max_draft))
