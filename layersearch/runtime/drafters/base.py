"""The drafter plug-in point: what a drafter gets (:class:`StepRequest`, which the verifier
gets too) and returns (:class:`Proposal`), and the chain-drafting loop the model-based drafters
share.

A drafter proposes up to ``request.limit`` tokens to follow ``request.last_token``. It may run
the target model with a mask in the shared cache (its entries are cut away by the loop before
verification), run a model of its own, or look tokens up without any forward. When sampling,
``Proposal.probs`` holds the distributions the tokens were drawn from (a one-hot row for a
deterministic proposal), which is all speculative sampling needs to stay exact.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, ContextManager, Protocol, runtime_checkable

import torch

from layersearch.masks.mask import SkipMask
from layersearch.runtime.forward import Head
from layersearch.runtime.host import DeviceIds, HostIds, HostInt, to_host
from layersearch.runtime.lookahead import DraftPosition, Lookahead
from layersearch.runtime.outcome import StepOutcome
from layersearch.runtime.sampling import SamplingConfig

# forward(tokens, start, keep=None, *, plan=None, head=None, ...) -> logits [keep or len(tokens), vocab],
# run in the shared cache and timed; ``tokens`` a list of ids or a device tensor [n], ``plan`` a
# draft plan to run the target under (None: the full model).
Forward = Callable[..., torch.Tensor]
# An independent draft model: a causal LM sharing the target's tokenizer.
DraftModel = torch.nn.Module
# branching(position, chosen_token) -> other candidates to verify as leaves beside it (token trees).
Branching = Callable[[DraftPosition, int], tuple[int, ...]]


def vocab_of(model: torch.nn.Module) -> int:
    """The rows of ``model``'s LM head: its output vocabulary."""
    lm: Any = model  # a transformers model: its methods are not in torch's Module type
    return int(lm.get_output_embeddings().out_features)


def device_of(model: torch.nn.Module) -> torch.device:
    """The device ``model`` (a transformers model) runs on."""
    lm: Any = model
    return torch.device(lm.device)


class DraftHead(Protocol):
    """Where a drafter's reduced LM head comes from (FR-Spec's :class:`~layersearch.frspec.head.DraftHeads`):
    the head for the model it drafts with, its rows in int8 when ``int8``, in int4 in groups of
    ``int4_group`` when given. The drafters take any such object, so the runtime imports no method."""

    def for_model(self, model: torch.nn.Module, int8: bool = False, int4_group: int | None = None) -> Head:
        """The reduced head of ``model``'s LM head."""
        ...


@dataclass(frozen=True)
class StepRequest:
    """Everything the step's drafter and verifier may read, built once per step (the cache is
    the target's: a drafter only appends to it, the verifier writes the verified entries)."""

    model: torch.nn.Module
    cache: object  # transformers Cache holding ``position`` committed entries
    sequence: HostIds  # [position + 1] prompt and emitted ids (CPU); the last is not cached
    position: HostInt
    limit: HostInt  # at most this many tokens (lookahead cap and room left before max_new_tokens)
    mask: SkipMask  # the controller's current mask (the same object until the controller changes it)
    lookahead: Lookahead
    sampling: SamplingConfig
    generator: torch.Generator | None
    forward: Forward  # forward(tokens, start) -> logits [n, vocab], in the shared cache
    # A drafter running its own model times each of its forwards in this region, so the loop's
    # clock counts them as model time, not bookkeeping (the target's forwards are timed already).
    timed: Callable[[], ContextManager] = contextlib.nullcontext
    last_ids: DeviceIds | None = None  # [1] the newest token on the model's device (None: from sequence)

    @property
    def last_token(self) -> int:
        """The newest emitted token (the draft continues after it)."""
        return int(self.sequence[-1])

    @property
    def last_on_device(self) -> torch.Tensor:
        """The newest token as a [1] tensor on the model's device, without a host round trip."""
        if self.last_ids is not None:
            return self.last_ids
        return self.sequence[-1:].to(device_of(self.model))


@dataclass(frozen=True, eq=False)
class Proposal:
    """Draft tokens and, when sampling, the draft distributions they were drawn from.

    ``ids`` may stay on the device (a captured draft never reads its tokens back before
    verification); a tuple of ints is taken as well. :attr:`tokens` reads them to the host."""

    ids: torch.Tensor  # [k] long, on the model's device or the CPU (a tuple/list is converted)
    probs: torch.Tensor | None  # [k, vocab] when sampling, else None
    drafter: str = "layer-skip"
    forwards: int = 0  # draft forwards spent (incl. one whose low confidence stopped the draft)
    # A token tree (SWIFT): for each chain position, other candidates to verify as leaves there.
    branches: tuple[tuple[int, ...], ...] | None = None
    confidences: tuple[float, ...] = ()  # the draft's top-1 probability at each drafted position (chain drafts)
    prefill_seconds: float = 0.0  # a draft model's forward over the prompt inside this proposal (its own phase)
    plan: SkipMask | None = None  # the draft plan the target ran (None: the controller's mask, or no self-draft)

    def __post_init__(self) -> None:
        if not isinstance(self.ids, torch.Tensor):
            object.__setattr__(self, "ids", torch.tensor(list(self.ids), dtype=torch.long))

    @property
    def size(self) -> int:
        """How many tokens were drafted (no host read)."""
        return int(self.ids.shape[0])

    @cached_property
    def tokens(self) -> tuple[int, ...]:
        """The draft tokens as ints (a host read when they are on the device)."""
        if not self.size:
            return ()
        return tuple(self.ids.tolist()) if self.ids.device.type == "cpu" else tuple(to_host(self.ids))

    @classmethod
    def empty(cls, drafter: str) -> "Proposal":
        """No draft: the step is a plain target step."""
        return cls(torch.empty(0, dtype=torch.long), None, drafter, 0)


@runtime_checkable
class Drafter(Protocol):
    """Proposes draft tokens; ``name`` labels the steps it drafted in the statistics."""

    name: str

    def begin(self, prompt: torch.Tensor) -> None:
        """A new generation starts with ``prompt`` ([n] ids); drop per-generation state."""
        ...

    def propose(self, request: StepRequest) -> Proposal:
        """Up to ``request.limit`` draft tokens after ``request.last_token``."""
        ...

    def observe(self, outcome: StepOutcome) -> None:
        """Feedback after the step was verified."""
        ...

    # Optional: a drafter with a non-empty ``hidden_layers`` attribute (decoder layer indices)
    # also gets ``observe_hidden(states)`` with the verifier's outputs of those layers
    # ([len(hidden_layers), hidden]) at the input whose output gave the newest token, after
    # the prefill and after every verification (SD²'s steering reads them).


class StatelessDrafter:
    """Base for drafters that keep nothing between steps."""

    name = "drafter"

    def begin(self, prompt: torch.Tensor) -> None:
        """Nothing to reset."""

    def observe(self, outcome: StepOutcome) -> None:
        """Nothing to learn."""


def draft_chain(
    request: StepRequest,
    next_logits: Callable[[torch.Tensor, int], torch.Tensor],
    name: str,
    branching: Branching | None = None,
) -> Proposal:
    """Draft one token at a time: ``next_logits(token, index)`` -> [vocab] logits for draft
    position ``index`` after ``token`` (a [1] tensor on the model's device); the lookahead may
    stop before a token is drawn. Tokens stay on the device: a rule that reads no confidence
    (``reads_confidence`` False) drafts without a single host read. With ``branching`` (greedy
    only) each position also gets alternative candidates: ``branching(position, chosen_token)``
    -> tokens to verify as leaves beside it."""
    tokens: list[torch.Tensor] = []  # [1] each, on the device
    probs: list[torch.Tensor] = []
    branches: list[tuple[int, ...]] = []
    greedy = request.sampling.greedy
    branching = branching if greedy else None
    reads_confidence = request.lookahead.reads_confidence
    # Greedy under a rule that reads no confidence and without branches: the argmax is all a
    # position needs, so no DraftPosition is built (the same tokens, no host read).
    argmax_only = greedy and not reads_confidence and branching is None
    token = request.last_ids if request.last_ids is not None else request.last_on_device
    forwards = 0
    confidences: list[float] = []  # top-1 probability at each drafted position (rules learn from them)
    for index in range(request.limit):
        logits = next_logits(token, index)  # [vocab]
        forwards += 1
        if argmax_only:
            token = logits.argmax(-1, keepdim=True)  # [1]
            tokens.append(token)
            continue
        view = DraftPosition(index, logits, request.sampling, confidences[-1] if confidences else 1.0)
        if reads_confidence and not request.lookahead.keep_drafting(view):
            break
        if greedy:
            token = logits.argmax(-1, keepdim=True)  # [1]
            if branching is not None:
                branches.append(branching(view, to_host(token)[0]))
        else:
            token = torch.multinomial(view.probs, 1, generator=request.generator)  # [1]
            probs.append(view.probs)
        tokens.append(token)
        if reads_confidence:
            confidences.append(view.confidence)
    ids = torch.cat(tokens) if tokens else torch.zeros(0, dtype=torch.long)  # [k]
    return Proposal(
        ids, torch.stack(probs) if probs else None, name, forwards,
        tuple(branches) if branching is not None else None, tuple(confidences),
    )


def point_mass(tokens: tuple[int, ...], vocab: int, device: torch.device) -> torch.Tensor:
    """One-hot rows [k, vocab]: the draft distribution of a deterministic proposal."""
    rows = torch.zeros(len(tokens), vocab, device=device)
    if tokens:
        rows[torch.arange(len(tokens)), torch.tensor(tokens)] = 1.0
    return rows
