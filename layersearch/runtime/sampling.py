"""How the next token is chosen: greedy argmax, or temperature / top-k / top-p sampling.

Both the draft and the target go through :func:`next_token_probs`, so speculative sampling
compares the same warped distributions (Leviathan et al.: the output then follows the
target's warped distribution exactly).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from layersearch.common.errors import LayersearchError


@dataclass(frozen=True)
class SamplingConfig:
    """Decoding settings; ``temperature == 0`` means greedy, ``top_k == 0`` keeps every token."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    top_k: int = 0
    greedy: bool = field(init=False, repr=False, compare=False)  # deterministic argmax (temperature 0)

    def __post_init__(self) -> None:
        if not 0 <= self.temperature < float("inf"):
            raise LayersearchError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise LayersearchError(f"top-p must be in (0, 1], got {self.top_p}")
        if self.seed is not None and not 0 <= self.seed < 2**64:  # torch's generator takes 64 bits
            raise LayersearchError(f"seed must be in 0..2**64-1, got {self.seed}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise LayersearchError(f"top-k must be an integer >= 0 (0: every token), got {self.top_k!r}")
        # A field, not a property: the step reads it several times per token.
        object.__setattr__(self, "greedy", self.temperature == 0)

    def generator(self, device: torch.device | str) -> torch.Generator | None:
        """A seeded generator for sampling (None when greedy)."""
        if self.greedy:
            return None
        gen = torch.Generator(device=device)
        gen.manual_seed(0 if self.seed is None else self.seed)
        return gen


def next_token_probs(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """Warped probabilities from logits ``[..., vocab]`` (temperature, then top-k, then top-p:
    transformers' order, so the law is the one its ``generate`` samples from)."""
    if config.greedy:
        raise ValueError("greedy decoding has no sampling distribution")
    probs = torch.softmax(logits.float() / config.temperature, dim=-1)
    if 0 < config.top_k < probs.shape[-1]:
        # Keep every token at least as likely as the k-th (ties kept, as transformers' top-k keeps them).
        kth = torch.topk(probs, config.top_k, dim=-1).values[..., -1:]  # [..., 1]
        probs = probs.masked_fill(probs < kth, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    if config.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (the first token always survives).
        outside = sorted_probs.cumsum(-1) - sorted_probs >= config.top_p
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """Draw one token id from a 1-D probability vector."""
    return int(torch.multinomial(probs, 1, generator=generator))
