"""Verification: which draft tokens the full model accepts (pure functions, no model).

Greedy: accept the longest draft prefix that equals the target's argmax, then emit the
target's own token at the first mismatch (or after the last draft token).

Sampling (Leviathan et al. 2023): accept draft token d at position j with probability
min(1, p_j(d) / q_j(d)); at the first rejection emit a token drawn from
norm(max(p_j - q_j, 0)); if every draft token is accepted emit one drawn from p_k. The
emitted sequence then follows the target distribution p exactly.
"""

from __future__ import annotations

import torch

from layersearch.runtime.sampling import SamplingConfig, next_token_probs
from layersearch.runtime.step import DeviceIds, Proposal, StepRequest, Verdict, Verifier, to_host


def verify_greedy(draft_tokens: list[int], target_logits: torch.Tensor) -> Verdict:
    """Greedy verification. ``target_logits``: [k + 1, vocab] for the k draft tokens."""
    draft = torch.tensor(draft_tokens, dtype=torch.long, device=target_logits.device)  # [k]
    return verify_chain(draft, None, target_logits, SamplingConfig(), None)


def verify_sampling(
    draft_tokens: list[int],
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None,
) -> Verdict:
    """Speculative sampling. ``draft_probs``: [k, vocab]; ``target_probs``: [k + 1, vocab]."""
    draft = torch.tensor(draft_tokens, dtype=torch.long, device=target_probs.device)  # [k]
    return _verdict(*_sampled_acceptance(draft, draft_probs, target_probs, generator), draft)


def verify_chain(
    draft: torch.Tensor, draft_probs: torch.Tensor | None, target_logits: torch.Tensor,
    sampling: SamplingConfig, generator: torch.Generator | None,
) -> Verdict:
    """The verdict on draft ids ``draft`` [k] (on the device) from the target's logits
    [k + 1, vocab], computed on the device and read to the host once: greedy match, or
    speculative sampling against ``draft_probs`` [k, vocab]. The verdict's ``path`` holds the
    accepted tokens."""
    if sampling.greedy:
        target = target_logits.argmax(-1)  # [k + 1]
        k = draft.shape[0]
        accepted = (draft == target[:k]).long().cumprod(0).sum()  # the matching prefix's length, on the device
        return _verdict(accepted, target[accepted], target[:k])
    target_probs = next_token_probs(target_logits, sampling)  # [k + 1, vocab]
    probs = draft_probs if draft_probs is not None else target_probs[:0]
    return _verdict(*_sampled_acceptance(draft, probs, target_probs, generator), draft)


def _sampled_acceptance(
    draft: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(accepted count, next token) as device scalars, by Leviathan et al.'s rule. One uniform
    per draft token and one draw per position (k residual rows and p_k) are always made, so the
    random stream does not depend on where the first rejection falls."""
    k = draft.shape[0]
    device = target_probs.device
    index = torch.arange(k, device=device)
    p = target_probs[index, draft]  # [k]
    q = draft_probs[index, draft]  # [k]
    uniform = torch.rand(k, generator=generator, device=device)
    rejected = uniform * q > p  # [k]: accept iff u < p / q, written without division
    # The first rejection, or k when every draft token is accepted.
    if k == 0:
        first = torch.zeros((), dtype=torch.long, device=device)
    else:
        first = torch.where(rejected.any(), rejected.long().argmax(), torch.full((), k, device=device))
    residual = (target_probs[:k] - draft_probs).clamp_min(0.0)  # [k, vocab]
    total = residual.sum(-1, keepdim=True)  # [k, 1]
    # p == q (up to rounding) leaves no residual mass; then p itself is the right law.
    residual = torch.where(total > 0, residual / total.clamp_min(1e-30), target_probs[:k])
    rows = torch.cat([residual, target_probs[k:]])  # [k + 1, vocab]: row j is the law after a rejection at j
    choices = torch.multinomial(rows, 1, generator=generator).view(-1)  # [k + 1]
    return first, choices[first]


def _verdict(accepted: torch.Tensor, next_token: torch.Tensor, draft: torch.Tensor) -> Verdict:
    """One host read of ``[accepted, next, draft...]`` -> the Verdict, its path the accepted draft."""
    values = to_host(torch.cat([accepted.view(1), next_token.view(1), draft.view(-1)]))
    count = values[0]
    return Verdict(count, values[1], tuple(values[2 : 2 + count]), next_ids=DeviceIds(next_token.view(1)))


class ChainVerifier(Verifier):
    """A draft chain verified in one forward: greedy match or speculative sampling."""

    name = "chain"

    capturable = True  # one fixed-shape forward per draft length

    def verify(self, request: StepRequest, proposal: Proposal) -> Verdict:
        """Forward ``[last, d1..dk]`` at ``position`` and apply the greedy or sampling rule,
        on the device, with one host read."""
        last = request.last_ids if request.last_ids is not None else torch.tensor([request.last_token], dtype=torch.long)
        draft = proposal.ids.to(last.device)  # [k]
        logits = request.forward(torch.cat([last, draft]), request.position)  # [k + 1, vocab]
        return verify_chain(draft.to(logits.device), proposal.probs, logits, request.sampling, request.generator)
