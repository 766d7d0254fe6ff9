"""Teacher forcing: the target's greedy continuation of a prompt, then the masked draft's
predictions for every position of it in one parallel forward that reuses the prompt cache.

SWIFT's matchness objective (offline, and on the fly over a decode loop's cache) and DISCO's
training data read these. Given the target's tokens t_0..t_n (t_0 from the prefill), the draft
sees the target's own prefix at every position: its logits at row j-1 predict t_j, exactly
what a greedy draft would see at that position after an accepted prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence, cast

import torch
from transformers import Cache, PreTrainedModel

from layersearch.masks.mask import SkipMask
from layersearch.runtime.cache import cache_length, is_static_cache, new_cache, seat_static_cache, truncate_cache
from layersearch.runtime.forward import forward_tokens


@dataclass(frozen=True)
class TargetRun:
    """The target's greedy continuation of one prompt, with its prompt cache (``length`` entries)."""

    cache: Cache
    length: int  # prompt tokens (the cache holds exactly these after every call)
    tokens: tuple[int, ...]  # t_0..t_n
    logits: torch.Tensor | None  # [n + 1, vocab] target logits that chose t_0..t_n, when kept


@torch.inference_mode()
def target_continuation(
    model: PreTrainedModel, prompt: Sequence[int], count: int, stop: frozenset[int] = frozenset(), *, keep_logits: bool = False
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


def _logits(model: PreTrainedModel, tokens: list[int], start: int, cache: Cache, **options: Any) -> torch.Tensor:
    """:func:`forward_tokens`'s logits (no hidden states are asked for here)."""
    return cast(torch.Tensor, forward_tokens(model, tokens, start, cache, **options))


@torch.inference_mode()
def draft_logits(model: PreTrainedModel, mask: SkipMask, run: TargetRun) -> torch.Tensor:
    """The masked draft's logits ``[n, vocab]`` over inputs t_0..t_{n-1}: row j-1 predicts t_j.
    One forward in the prompt cache; the draft's entries are cut away afterwards."""
    inputs = list(run.tokens[:-1])
    if not inputs:
        return torch.empty(0, 0)
    return draft_logits_in_cache(model, mask, run.cache, inputs, run.length)


@torch.inference_mode()
def draft_logits_in_cache(
    model: PreTrainedModel, mask: SkipMask, cache: Cache, inputs: Sequence[int], start: int, *, valid: int | None = None
) -> torch.Tensor:
    """The masked draft's logits ``[n, vocab]`` for ``inputs`` at positions ``start..start+n-1``,
    attending to the cache's first ``start`` positions and causally to each other.

    The cache may hold more than ``start`` positions (a decode loop's cache holds every
    generated token): the draft's entries are then stored after them with explicit positions
    and a 4-D attention mask that hides positions ``start..`` of the cache, the way a token tree
    is verified (:mod:`layersearch.runtime.tree`). Either way one forward reuses the cached
    prefix (full-attention models only when ``start`` is short of the cache's length: a sliding
    window would need its own mask). A plan with int8 parts runs one forward per token instead
    (per-token activation scales, as drafting has them), with its low-bit head where it has one
    (int4 is weight-only: one call serves).
    The plan runs as a plan view, never patched into the model.

    A dynamic cache is cut back to exactly what it held. A static cache (a captured decode
    loop's) holds ``valid`` positions in tensors of its whole capacity: the draft's entries go
    after them, where the loop's next forward writes over them and its causal mask hides them
    until then, so nothing is cut.
    """
    from layersearch.models.plan_view import plan_view

    static = is_static_cache(cache)
    if static and valid is None:
        raise ValueError("a static cache needs the number of its valid positions")
    cached = valid if static else cache_length(cache)
    assert cached is not None
    n = len(inputs)
    if not 0 <= start <= cached or (static and cached + n > cache.get_max_length()):
        raise ValueError(f"start {start} and {n} draft tokens do not fit the cache's {cached} positions")
    view = plan_view(model, mask)
    head: dict[str, Any] = {}
    if mask.head_precision != "full":  # a plan's low-bit head drafts here as in the decode loop (its drafter passes the same)
        from layersearch.models.precision import plan_head

        head = {"head": plan_head(model, mask)}
    dtype = next(model.parameters()).dtype
    # One call over all n tokens, or (int8 parts: torch's int8 Linears quantize activations with
    # one scale per call, which no draft step ever sees) one per token; a call's first token is
    # stored at slot cached + first.
    calls = [(j, list(inputs[j : j + 1])) for j in range(n)] if mask.has_int8 else [(0, list(inputs))]
    rows: list[torch.Tensor] = []
    try:
        for first, tokens in calls:
            options: dict[str, Any] = {}
            if static:
                seat_static_cache(cache, cached + first)
            if static or start < cached:
                width = cache.get_max_length() if static else cached + first + len(tokens)
                options = dict(positions=torch.arange(start + first, start + first + len(tokens)),  # [k]
                               attention_mask=draft_span_mask(start, cached, first, len(tokens), width, dtype))
            rows.append(_logits(view, tokens, start + first, cache, **options, **head))
    finally:
        if not static:
            truncate_cache(cache, cached)  # the cache stays exact for the next call (or the decode loop)
    return torch.cat(rows) if rows else torch.empty(0, 0)  # [n, vocab]


def draft_span_mask(start: int, cached: int, first: int, k: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask ``[1, 1, k, width]`` for draft tokens first..first+k-1 of a span stored from
    cache slot ``cached``: each sees cache positions ``0..start-1`` and the span up to itself;
    positions ``start..cached-1`` and everything after it are hidden."""
    allowed = torch.zeros(k, width, dtype=torch.bool)
    allowed[:, :start] = True
    for i in range(k):
        allowed[i, cached : cached + first + i + 1] = True
    mask = torch.zeros(k, width, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return mask.view(1, 1, k, width)


def matched_tokens(logits: torch.Tensor, targets: Sequence[int]) -> int:
    """How many rows of ``logits`` [n, vocab] have ``targets[j]`` as their argmax (SWIFT's matchness count)."""
    predicted = logits.argmax(-1).tolist()  # [n]
    return sum(int(p == t) for p, t in zip(predicted, targets))
