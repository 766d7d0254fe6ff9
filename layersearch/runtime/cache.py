"""KV-cache bookkeeping for draft-then-verify on a transformers cache.

The draft appends entries only in the layers whose attention it executes, so after drafting
the layers hold different lengths. Cutting every layer back to the committed length before
verification, and to the accepted prefix after it, keeps the target's cache exact without
ever copying it (cropping a cache layer is a slice view).

Sliding-window layers (Mistral, Qwen2 with ``use_sliding_window``, Gemma 2/3, Phi-3) normally
keep only their last ``window - 1`` entries, so a rollback past the window would need entries
already evicted. transformers' own remedy is *past recording*
(``DynamicSlidingWindowLayer.activate_past_recording``): ``update`` keeps every new entry
until the next ``crop``, which rolls back and trims the layer to its window again. Every
cache made here records the past, so rollback is exact at any context length, and
:func:`truncate_cache` (or :func:`commit_cache`) is where a sliding layer drops what it no
longer needs: memory stays bounded by ``window - 1`` plus the tokens added since the last cut.

While drafting, the layers whose attention is skipped keep a stale length. transformers sizes
each attention mask from one reference layer per kind (the first full-attention or the first
sliding layer), which would then be a stale one; :class:`SkipAwareCache` sizes the mask from the
longest layer of the same kind instead, which is always one that runs (all layers that run
attention have seen the same tokens).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Cache, DynamicCache, PreTrainedModel


class SkipAwareCache(DynamicCache):
    """A :class:`DynamicCache` whose attention masks follow the layers that actually run.

    Layers of one kind (full attention, or sliding attention with one window) that execute
    attention all hold the same, largest length; skipped ones lag behind. Mask sizes and query
    offsets are therefore read from the longest layer of the asked layer's kind.
    """

    # Planned once per cache (:func:`new_cache`, or on first use): per layer, the indices of
    # the layers of its kind, and each layer's window for :func:`truncate_cache`.
    _alike_groups: dict[int, tuple[int, ...]]
    _cut_windows: tuple[int | None, ...]

    def get_mask_sizes(self, query_length: int, layer_idx: int) -> tuple[int, int]:
        return super().get_mask_sizes(query_length, self._longest_alike(layer_idx))

    def get_query_offset(self, layer_idx: int = 0) -> int:
        return super().get_query_offset(self._longest_alike(layer_idx))

    def _longest_alike(self, layer_idx: int) -> int:
        # Runs twice per forward: the groups are made once, the lengths read in a plain loop.
        groups = self.__dict__.get("_alike_groups")
        if groups is None or len(groups) != len(self.layers):
            groups = self._alike()
        longest, length = layer_idx, -1
        layer: Any
        for index in groups.get(layer_idx, ()):  # a layer index past the cache's layers: itself
            layer = self.layers[index]
            held = layer.get_seq_length()
            if held > length:  # the first of the longest
                longest, length = index, held
        return longest

    def _alike(self) -> dict[int, tuple[int, ...]]:
        # Layer kinds never change once the cache exists: group the indices once.
        by_kind: dict[tuple, list[int]] = {}
        for index, layer in enumerate(self.layers):
            by_kind.setdefault(_kind(layer), []).append(index)
        groups = {index: tuple(indices) for indices in by_kind.values() for index in indices}
        self._alike_groups = groups
        return groups


def new_cache(model: PreTrainedModel) -> Cache:
    """An empty KV cache for ``model`` (the one place the runtime creates caches).

    Sliding-window layers record their past, so :func:`truncate_cache` can roll them back.
    """
    cache = SkipAwareCache(config=model.config)
    cache.activate_past_recording()
    cache._alike()  # the layer kinds and windows are known now: plan the mask sizing and the cut once
    cache._cut_windows = tuple(_window(layer) for layer in cache.layers)
    return cache


def truncate_cache(cache: Cache, length: int) -> None:
    """Cut every layer of ``cache`` back to its first ``length`` positions, which become final.

    Positions before ``length`` can never be rolled back afterwards: sliding-window layers
    drop the entries they kept for a rollback. Raises ``RuntimeError`` (a bug, never user
    input) if a layer no longer holds what the cut needs.

    The decode loop cuts twice per step, so the layers' windows are read once per cache (the
    cut plan) and a full-attention layer costs one length read and at most one crop.
    """
    windows = cache.__dict__.get("_cut_windows")
    if windows is None or len(windows) != len(cache.layers):
        windows = cache.__dict__["_cut_windows"] = tuple(_window(layer) for layer in cache.layers)
    layer: Any
    for layer, window in zip(cache.layers, windows):
        excess = layer.get_seq_length() - length
        # Full attention (window None) keeps every entry: only sliding layers are checked and trimmed.
        if window is not None and excess > 0 and not _can_truncate_layer(layer, length):
            raise RuntimeError(
                f"cannot roll a sliding-window cache layer back to {length} positions: "
                "its older entries were already committed and evicted"
            )
        if excess > 0:
            layer.crop(-excess)  # transformers 5: a negative count removes that many tokens
        elif window is not None and _holds_history(layer):
            layer.crop(0)  # a sliding layer with nothing to remove: trim it back to its window


def commit_cache(cache: Cache) -> None:
    """Make every cached position final (after a forward that needs no rollback, e.g. plain decoding).

    Only sliding-window layers change: they drop the entries past recording kept beyond
    their window. Call it when all layers hold the same length.
    """
    layer: Any
    for layer in cache.layers:
        if _holds_history(layer):
            layer.crop(0)


def can_truncate(cache: Cache, length: int) -> bool:
    """Whether every layer of ``cache`` still holds what cutting it back to ``length`` needs."""
    return all(_can_truncate_layer(layer, length) for layer in cache.layers)


def _can_truncate_layer(layer, length: int) -> bool:
    """Whether one cache layer can be cut back to ``length`` positions exactly."""
    window = _window(layer)
    if window is None or not getattr(layer, "is_initialized", False) or length >= layer.get_seq_length():
        return True
    held = layer.keys.shape[-2]  # entries stored, the newest at position get_seq_length() - 1
    oldest = layer.get_seq_length() - held
    # After the cut the layer needs positions max(0, length - (window - 1)) .. length - 1.
    return oldest <= max(0, length - (window - 1))


def cache_length(cache: Cache) -> int:
    """Positions held by the longest layer (layers differ only while a draft is running)."""
    layers: list[Any] = list(cache.layers)
    return max((layer.get_seq_length() for layer in layers), default=0)


def sliding_windows(model: PreTrainedModel) -> tuple[int | None, ...]:
    """Per decoder layer, the attention window (``None`` = full attention), as the cache sees it."""
    return tuple(_window(layer) for layer in SkipAwareCache(config=model.config).layers)


def _window(layer) -> int | None:
    return getattr(layer, "sliding_window", None) if getattr(layer, "is_sliding", False) else None


def _kind(layer) -> tuple[type, int | None]:
    return type(layer), _window(layer)


def _holds_history(layer) -> bool:
    # Past recording keeps more than window - 1 entries until the next crop.
    window = _window(layer)
    return window is not None and getattr(layer, "is_initialized", False) and layer.keys.shape[-2] > window - 1


def new_static_cache(model: PreTrainedModel, capacity: int) -> Cache:
    """transformers' :class:`~transformers.StaticCache` for ``model`` holding ``capacity``
    positions, allocated at once (a captured step needs fixed addresses).

    A static layer writes at its ``cumulative_length``, and the causal mask reads its queries'
    offset from it; :func:`seat_static_cache` sets every layer's to the forward's first
    position, so rolling back after a rejected draft moves nothing: the next forward writes
    over the stale entries, which the causal mask already hides."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=capacity)
    parameter = next(model.parameters())
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    probe = torch.zeros(1, heads, 1, head_dim, dtype=parameter.dtype, device=parameter.device)
    layer: Any
    for layer in cache.layers:
        layer.lazy_initialization(probe, probe)
    return cache


def is_static_cache(cache: Any) -> bool:
    """Whether ``cache`` is a static cache (:func:`new_static_cache`): tensors of its whole
    capacity, entries past the valid positions stale and hidden by the causal mask."""
    from transformers import StaticCache

    return isinstance(cache, StaticCache)


def seat_static_cache(cache: Cache, start: torch.Tensor | int) -> None:
    """Make every layer of a static ``cache`` write its next entries from position ``start``
    (a 0-d device tensor inside a captured step, where it is a graph op; an int eagerly)."""
    layer: Any
    for layer in cache.layers:
        if isinstance(start, int):
            layer.cumulative_length.fill_(start)
        else:
            layer.cumulative_length.copy_(start)


def has_sliding_window(model: PreTrainedModel) -> bool:
    """Whether any of ``model``'s layers attends over a sliding window (a static cache would
    keep it as a ring, which cannot roll back)."""
    return any(window is not None for window in sliding_windows(model))
