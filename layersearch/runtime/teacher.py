"""Teacher forcing: the target's greedy continuation of a prompt, then the masked draft's
predictions for every position of it in one parallel forward that reuses the prompt cache.

SWIFT's matchness objective and DISCO's training data both read these. Given the target's
tokens t_0..t_n (t_0 from the prefill), the draft sees the target's own prefix at every
position: its logits at row j-1 predict t_j, exactly what a greedy draft would see at that
position after an accepted prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from layersearch.mask import SkipMask
from layersearch.models.skipping import skipping
from layersearch.runtime.cache import new_cache, truncate_cache
from layersearch.runtime.forward import forward_tokens


@dataclass(frozen=True)
class TargetRun:
    """The target's greedy continuation of one prompt, with its prompt cache (``length`` entries)."""

    cache: object
    length: int  # prompt tokens (the cache holds exactly these after every call)
    tokens: tuple[int, ...]  # t_0..t_n
    logits: torch.Tensor | None  # [n + 1, vocab] target logits that chose t_0..t_n, when kept


@torch.inference_mode()
def target_continuation(
    model: torch.nn.Module, prompt: Sequence[int], count: int, stop: frozenset[int] = frozenset(), *, keep_logits: bool = False
) -> TargetRun:
    """Greedy t_0..t_{count-1} after ``prompt`` (ends early after a ``stop`` token); the cache is
    cut back to the prompt, ready for :func:`draft_logits`."""
    cache = new_cache(model)
    logits = forward_tokens(model, list(prompt), 0, cache, keep=1)[-1]  # prefill: [vocab]
    kept = [logits.float()] if keep_logits else []
    tokens = [int(logits.argmax())]
    while len(tokens) < count and tokens[-1] not in stop:
        logits = forward_tokens(model, [tokens[-1]], len(prompt) + len(tokens) - 1, cache)[-1]
        tokens.append(int(logits.argmax()))
        if keep_logits:
            kept.append(logits.float())
    truncate_cache(cache, len(prompt))
    return TargetRun(cache, len(prompt), tuple(tokens), torch.stack(kept) if keep_logits else None)


@torch.inference_mode()
def draft_logits(model: torch.nn.Module, mask: SkipMask, run: TargetRun) -> torch.Tensor:
    """The masked draft's logits ``[n, vocab]`` over inputs t_0..t_{n-1}: row j-1 predicts t_j.
    One forward in the prompt cache; the draft's entries are cut away afterwards."""
    inputs = list(run.tokens[:-1])
    if not inputs:
        return torch.empty(0, 0)
    try:
        with skipping(model, mask):
            return forward_tokens(model, inputs, run.length, run.cache)  # [n, vocab]
    finally:
        truncate_cache(run.cache, run.length)  # the prompt cache stays exact for the next call
