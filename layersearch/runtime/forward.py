"""One forward pass of a causal LM over a few new tokens at explicit positions.

Positions are passed explicitly because while drafting the cache layers hold different
lengths, so the model must not infer them from the cache.
"""

from __future__ import annotations

import torch
from transformers import Cache


def forward_tokens(
    model: torch.nn.Module,
    tokens: list[int] | torch.Tensor,
    start: int,
    cache: Cache,
    keep: int | None = None,
    *,
    positions: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logits ``[keep or n, vocab]`` for ``tokens`` placed at positions ``start..start+n-1``
    (or at ``positions`` [n], with a prepared 4-D ``attention_mask`` [1, 1, n, cached + n]
    for a token tree)."""
    device = model.device
    ids = torch.as_tensor(tokens, device=device).view(1, -1)  # [1, n]
    n = ids.shape[1]
    if positions is None:
        positions = torch.arange(start, start + n, device=device)
    out = model(
        input_ids=ids,
        position_ids=positions.to(device).view(1, -1),  # [1, n]
        attention_mask=None if attention_mask is None else attention_mask.to(device),
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=n if keep is None else keep,
    )
    return out.logits[0]


def prefill_with_hidden(model: torch.nn.Module, tokens: torch.Tensor, cache: Cache) -> tuple[torch.Tensor, torch.Tensor]:
    """Prefill ``tokens`` ([n]) at positions 0..n-1: last-position logits ``[1, vocab]`` and the
    last layer's hidden states ``[n, hidden]`` (after the final norm), from the same forward."""
    ids = tokens.to(model.device).view(1, -1)  # [1, n]
    positions = torch.arange(ids.shape[1], device=model.device).unsqueeze(0)  # [1, n]
    out = model(
        input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=True,
        logits_to_keep=1, output_hidden_states=True,
    )
    return out.logits[0], out.hidden_states[-1][0]
