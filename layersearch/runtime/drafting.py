"""Drafting: the masked model proposes tokens one at a time, reusing the target's KV cache.

Drafting stops at ``max_draft_tokens`` or as soon as the draft's top-1 probability for the
next position falls below the confidence threshold (Self-SD; SWIFT §4.2). The decision uses
the draft distribution before a token is drawn from it, so it never biases speculative
sampling. Self-SD's adaptive threshold is :class:`AdaptiveThreshold`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch
from transformers import Cache

from layersearch.errors import LayersearchError
from layersearch.runtime.forward import forward_tokens
from layersearch.runtime.sampling import SamplingConfig, next_token_probs, sample


@dataclass(frozen=True)
class DraftPolicy:
    """How long drafts get: a hard cap and a confidence threshold (0 disables it)."""

    max_draft_tokens: int = 8
    confidence_threshold: float = 0.8
    adaptive_threshold: bool = False

    def __post_init__(self) -> None:
        if self.max_draft_tokens < 1:
            raise LayersearchError(f"max draft tokens must be >= 1, got {self.max_draft_tokens}")
        if not 0 <= self.confidence_threshold <= 1:
            raise LayersearchError(f"draft threshold must be in [0, 1], got {self.confidence_threshold}")


@dataclass(frozen=True)
class AdaptiveThreshold:
    """Self-SD's adaptive stop threshold, updated from each verification's matchness.

    EMA (0.5) of the step's acceptance share; below 0.9 the threshold rises by 0.01 (draft
    less), otherwise it falls by 0.01; the threshold in use is an EMA (0.9) of that.
    """

    raw: float
    value: float
    matchness: float = 1.0

    @classmethod
    def start(cls, threshold: float) -> "AdaptiveThreshold":
        """Initial state at ``threshold``."""
        return cls(raw=threshold, value=threshold)

    def update(self, accepted: int, drafted: int) -> "AdaptiveThreshold":
        """State after a verification that accepted ``accepted`` of ``drafted`` tokens."""
        if drafted == 0:
            return self
        matchness = 0.5 * self.matchness + 0.5 * accepted / drafted
        raw = self.raw + (0.01 if matchness < 0.9 else -0.01)
        raw = min(1.0, max(0.0, raw))
        return replace(self, raw=raw, value=0.9 * self.value + 0.1 * raw, matchness=matchness)


@dataclass(frozen=True)
class Proposal:
    """Draft tokens and, when sampling, the draft distributions they were drawn from."""

    tokens: tuple[int, ...]
    probs: torch.Tensor | None  # [k, vocab] when sampling, else None


def draft(
    model: torch.nn.Module,
    cache: Cache,
    last_token: int,
    position: int,
    *,
    max_tokens: int,
    threshold: float,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    forward: Callable[..., torch.Tensor] = forward_tokens,
) -> Proposal:
    """Draft up to ``max_tokens`` tokens after ``last_token`` (at ``position``).

    Call inside ``skipping(model, mask)``; the caller truncates the cache afterwards.
    ``forward(model, tokens, start, cache)`` runs the model (the decoder passes a timed one).
    """
    tokens: list[int] = []
    probs: list[torch.Tensor] = []
    token = last_token
    for step in range(max_tokens):
        logits = forward(model, [token], position + step, cache)[-1]  # [vocab]
        if sampling.greedy:
            # Confidence needs probabilities only when a threshold is in force.
            confidence = torch.softmax(logits.float(), -1).max() if threshold > 0 else None
            if confidence is not None and confidence < threshold:
                break
            token = int(logits.argmax())
        else:
            dist = next_token_probs(logits, sampling)  # [vocab]
            if dist.max() < threshold:
                break
            token = sample(dist, generator)
            probs.append(dist)
        tokens.append(token)
    return Proposal(tuple(tokens), torch.stack(probs) if probs else None)
