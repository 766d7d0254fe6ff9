"""One forward pass of a causal LM over a few new tokens at explicit positions.

Positions are passed explicitly because while drafting the cache layers hold different
lengths, so the model must not infer them from the cache.
"""

from __future__ import annotations

from typing import Protocol

import torch
from transformers import Cache, PreTrainedModel


class Head(Protocol):
    """A reduced LM head (FR-Spec's, :mod:`layersearch.frspec.head`): final-norm states -> logits."""

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary logits ``[n, vocab]`` from ``hidden`` [n, hidden_size]."""
        ...


def forward_tokens(
    model: PreTrainedModel,
    tokens: list[int] | torch.Tensor,
    start: int,
    cache: Cache,
    keep: int | None = None,
    *,
    positions: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    hidden_layers: tuple[int, ...] = (),
    head: Head | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Logits ``[keep or n, vocab]`` for ``tokens`` placed at positions ``start..start+n-1``
    (or at ``positions`` [n], with a prepared 4-D ``attention_mask`` [1, 1, n, cached + n]
    for a token tree). With ``hidden_layers``, also the outputs of those decoder layers:
    ``(logits, hidden [n, len(hidden_layers), hidden_size])`` from the same forward.
    With ``head`` (a reduced draft head) the logits come from it, not the model's LM head:
    ``-inf`` outside its subset."""
    device = model.device
    ids = torch.as_tensor(tokens, device=device).view(1, -1)  # [1, n]
    n = ids.shape[1]
    if positions is None:
        positions = torch.arange(start, start + n, device=device)
    inputs = dict(
        input_ids=ids,
        position_ids=positions.to(device).view(1, -1),  # [1, n]
        attention_mask=None if attention_mask is None else attention_mask.to(device),
        cache=cache,  # transformers 5.x: past_key_values is deprecated
        use_cache=True,
        output_hidden_states=bool(hidden_layers),
    )
    if head is None:
        out = model(**inputs, logits_to_keep=n if keep is None else keep)
        logits = out.logits[0]  # [keep or n, vocab]
    else:
        # The decoder alone (its output is after the final norm), then only the subset's rows.
        out = model.get_decoder()(**inputs)
        logits = head.logits(out.last_hidden_state[0, -(n if keep is None else keep):])  # [keep or n, vocab]
    if not hidden_layers:
        return logits
    # hidden_states[0] is the embedding output; [i + 1] is decoder layer i's output.
    hidden = torch.stack([out.hidden_states[i + 1][0] for i in hidden_layers], dim=1)  # [n, layers, hidden]
    return logits, hidden

