"""KV-cache bookkeeping for draft-then-verify on a transformers cache.

The draft appends entries only in the layers whose attention it executes, so after drafting
the layers hold different lengths. Cutting every layer back to the committed length before
verification, and to the accepted prefix after it, keeps the target's cache exact without
ever copying it (cropping a DynamicLayer is a slice view).
"""

from __future__ import annotations

import torch
from transformers import Cache, DynamicCache


def new_cache(model: torch.nn.Module) -> Cache:
    """An empty KV cache for ``model`` (the one place the runtime creates caches)."""
    return DynamicCache(config=model.config)


def truncate_cache(cache: Cache, length: int) -> None:
    """Cut every layer of ``cache`` back to its first ``length`` positions."""
    for layer in cache.layers:
        excess = layer.get_seq_length() - length
        if excess > 0:
            layer.crop(-excess)  # transformers 5: a negative count removes that many tokens


def cache_length(cache: Cache) -> int:
    """Positions held by the longest layer (layers differ only while a draft is running)."""
    return max((layer.get_seq_length() for layer in cache.layers), default=0)
