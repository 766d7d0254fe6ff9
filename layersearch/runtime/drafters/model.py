"""Drafting with an independent small causal LM that shares the target's tokenizer.

The drafter keeps its own KV cache across the steps of one generation. Before each draft it
keeps the longest prefix of its cache that agrees with the emitted sequence (accepted draft
tokens stay; rejected ones are cropped) and feeds the rest in one forward, so it never
re-reads the prompt. With ``head`` its head scores only a subset of the vocabulary (FR-Spec:
the draft model's own LM head is a quarter of a 0.5B Qwen's weights).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from transformers import PreTrainedModel

from layersearch.common.errors import LayersearchError
from layersearch.runtime.cache import new_cache, truncate_cache
from layersearch.runtime.drafters.base import DraftHead, vocab_of
from layersearch.runtime.drafters.layer_skip import draft_chain
from layersearch.runtime.step import Drafter, Proposal, StepOutcome, StepRequest, to_host
from layersearch.runtime.forward import forward_tokens


class ModelDrafter(Drafter):
    """Drafts with ``model``, an independent causal LM with the same vocabulary as the target;
    ``head`` gives it a reduced head, e.g. over a subset of the vocabulary (None: the full head)."""

    name = "model"

    def __init__(self, model: PreTrainedModel, *, head: DraftHead | None = None) -> None:
        self.model = model
        self.head = head
        self._cache: Any = None  # a transformers Cache once a generation began
        self._ids: list[int] = []  # ids whose entries are in self._cache, in order
        # The last draft's tokens fed to the cache ([1] device tensors: no host read while drafting),
        # and how many of them the target accepted (from observe; None: not told).
        self._pending: list[torch.Tensor] = []
        self._accepted: int | None = None

    def check_target(self, target: torch.nn.Module) -> None:
        """Refuse a drafter whose vocabulary differs from the target's."""
        if vocab_of(self.model) != vocab_of(target):
            raise LayersearchError(
                f"the draft model's vocabulary ({vocab_of(self.model)}) differs from the target's ({vocab_of(target)}); "
                "an independent drafter must share the target's tokenizer"
            )

    def begin(self, prompt: torch.Tensor) -> None:
        """Fresh cache for a new generation."""
        self._cache = new_cache(self.model)
        self._ids = []
        self._pending, self._accepted = [], None

    def observe(self, outcome: StepOutcome) -> None:
        """Note how much of this drafter's last draft the target accepted (its cache keeps that much)."""
        if outcome.drafter == self.name:
            self._accepted = outcome.accepted

    def propose(self, request: StepRequest) -> Proposal:
        """Chain draft with the small model, stopped by the lookahead rule."""
        if request.limit <= 0:
            return Proposal.empty(self.name)
        sequence = request.sequence.tolist()
        self._settle_pending(sequence)
        keep = min(_common_prefix(self._ids, sequence), len(sequence) - 1)
        options: dict[str, Any] = {} if self.head is None else {"head": self.head.for_model(self.model)}
        truncate_cache(self._cache, keep)
        self._ids = sequence[:keep]

        def next_logits(token: torch.Tensor, index: int) -> torch.Tensor:  # token [1] on the device
            fed = sequence[keep:] if index == 0 else token
            start = len(self._ids) + len(self._pending)
            # The draft model's prompt forward is the draft-side prefill: the recorder times it as its own phase.
            prefill = request.draft_prefill() if start == 0 else contextlib.nullcontext()
            with prefill, request.timed():
                logits = forward_tokens(self.model, fed, start, self._cache, keep=1, **options)[-1]  # [vocab]
            if index == 0:
                self._ids.extend(fed)
            else:
                self._pending.append(token)
            return logits

        with torch.inference_mode():
            return draft_chain(request, next_logits, self.name)

    def _settle_pending(self, sequence: list[int]) -> None:
        """Turn the last draft's cached tokens into ids: the accepted ones are the sequence's
        next ids (no host read), the rest are dropped; without ``observe`` they are read back."""
        if self._pending:
            if self._accepted is not None:
                valid = min(self._accepted, len(self._pending))
                self._ids.extend(sequence[len(self._ids) : len(self._ids) + valid])
            else:
                self._ids.extend(to_host(torch.cat(self._pending)))
        self._pending, self._accepted = [], None


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differs = (torch.tensor(a[:n]) != torch.tensor(b[:n])).nonzero()
    return int(differs[0]) if len(differs) else n
