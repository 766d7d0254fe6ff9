"""Verification: which draft tokens the full model accepts (pure functions, no model).

Greedy: accept the longest draft prefix that equals the target's argmax, then emit the
target's own token at the first mismatch (or after the last draft token).

Sampling (Leviathan et al. 2023): accept draft token d at position j with probability
min(1, p_j(d) / q_j(d)); at the first rejection emit a token drawn from
norm(max(p_j - q_j, 0)); if every draft token is accepted emit one drawn from p_k. The
emitted sequence then follows the target distribution p exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

from layersearch.runtime.sampling import SamplingConfig, next_token_probs, sample

if TYPE_CHECKING:
    from layersearch.runtime.drafters.base import Forward, Proposal


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one draft: accepted draft count and the target's next token.
    ``path`` holds the accepted tokens when they are not a prefix of the draft chain (a tree
    verifier accepted a branch); otherwise it is None."""

    num_accepted: int
    next_token: int
    path: tuple[int, ...] | None = None
    node: int | None = None  # the verified input whose logits gave next_token (None: num_accepted)

    @property
    def source_node(self) -> int:
        """Index, in the verified input, of the node whose output gave ``next_token``."""
        return self.num_accepted if self.node is None else self.node

    def accepted_tokens(self, chain: tuple[int, ...]) -> tuple[int, ...]:
        """The accepted draft tokens, given the proposal's chain."""
        return self.path if self.path is not None else tuple(chain[: self.num_accepted])


def verify_greedy(draft_tokens: list[int], target_logits: torch.Tensor) -> Verdict:
    """Greedy verification. ``target_logits``: [k + 1, vocab] for the k draft tokens."""
    target_tokens = target_logits.argmax(-1).tolist()  # [k + 1]
    accepted = 0
    for draft, target in zip(draft_tokens, target_tokens):
        if draft != target:
            break
        accepted += 1
    return Verdict(accepted, target_tokens[accepted])


def verify_sampling(
    draft_tokens: list[int],
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None,
) -> Verdict:
    """Speculative sampling. ``draft_probs``: [k, vocab]; ``target_probs``: [k + 1, vocab]."""
    k = len(draft_tokens)
    if k:
        index = torch.arange(k, device=target_probs.device)
        tokens = torch.tensor(draft_tokens, device=target_probs.device)
        p = target_probs[index, tokens]  # [k]
        q = draft_probs[index, tokens]  # [k]
        uniform = torch.rand(k, generator=generator, device=target_probs.device)
        rejected = (uniform * q > p).nonzero()  # accept iff u < p / q, written without division
        if len(rejected):
            j = int(rejected[0])
            residual = (target_probs[j] - draft_probs[j]).clamp_min(0.0)
            total = residual.sum()
            # p == q (up to rounding) leaves no residual mass; then p itself is the right law.
            residual = residual / total if total > 0 else target_probs[j]
            return Verdict(j, sample(residual, generator))
    return Verdict(k, sample(target_probs[k], generator))


@dataclass(frozen=True)
class VerifyRequest:
    """One verification: the proposal after ``last_token``, which sits at ``position``."""

    proposal: "Proposal"
    last_token: int
    position: int
    sampling: SamplingConfig
    generator: torch.Generator | None
    forward: "Forward"  # forward(tokens, start) -> logits [n, vocab], in the shared cache
    cache: object = None  # the shared cache (a tree verifier moves the accepted branch into place)


@runtime_checkable
class Verifier(Protocol):
    """Runs the target over a proposal and says how much of it to keep.

    Afterwards the cache must hold the target's entries for ``last_token`` and the accepted
    tokens at positions ``position..position + num_accepted`` (the loop cuts anything beyond).
    """

    name: str

    def verify(self, request: VerifyRequest) -> Verdict:
        """The verdict on ``request.proposal``."""
        ...


class ChainVerifier:
    """A draft chain verified in one forward: greedy match or speculative sampling."""

    name = "chain"

    def verify(self, request: VerifyRequest) -> Verdict:
        """Forward ``[last, d1..dk]`` at ``position`` and apply the greedy or sampling rule."""
        tokens = list(request.proposal.tokens)
        logits = request.forward([request.last_token, *tokens], request.position)  # [k + 1, vocab]
        if request.sampling.greedy:
            return verify_greedy(tokens, logits)
        target_probs = next_token_probs(logits, request.sampling)  # [k + 1, vocab]
        draft_probs = request.proposal.probs if request.proposal.probs is not None else target_probs[:0]
        return verify_sampling(tokens, draft_probs, target_probs, request.generator)
