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
    hidden_layers: tuple[int, ...] = (),
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Logits ``[keep or n, vocab]`` for ``tokens`` placed at positions ``start..start+n-1``
    (or at ``positions`` [n], with a prepared 4-D ``attention_mask`` [1, 1, n, cached + n]
    for a token tree). With ``hidden_layers``, also the outputs of those decoder layers:
    ``(logits, hidden [n, len(hidden_layers), hidden_size])`` from the same forward."""
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
        output_hidden_states=bool(hidden_layers),
    )
    if not hidden_layers:
        return out.logits[0]
    # hidden_states[0] is the embedding output; [i + 1] is decoder layer i's output.
    hidden = torch.stack([out.hidden_states[i + 1][0] for i in hidden_layers], dim=1)  # [n, layers, hidden]
    return out.logits[0], hidden

