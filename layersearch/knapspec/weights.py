"""KnapSpec's items and their integer latency weights.

The items are the 2L sub-layers in KnapSpec's flat interleaved order (attention of layer i
at ``2i``, its MLP at ``2i + 1``, as :meth:`SkipMask.from_flat`). A *group* is what the
dynamic programme decides on at once: one sub-layer when attention and MLP are decoupled
(KnapSpec), or a whole layer when they are bound together (CLaSp's items), the ablation of
KnapSpec's "decoupling vs binding" table.

Weights are latencies at the current context length ``n`` normalized to small integers
(KnapSpec §4.2): with ``delta = min(t_attn(n), t_mlp)``, each type weighs
``round(t / delta)``, so the faster type weighs 1 and the slower one ``round(ratio)``, capped at
:data:`MAX_RATIO` (5), which keeps the DP table at most ``6L`` wide. Rounding is half up (the
paper's nearest-integer bracket), not Python's half-to-even.

Sliding-window layers (a profile with ``attention_windows``): attention cost stops growing at
the window, so at long contexts a sliding layer's attention is cheaper than a full layer's and
the weights are per layer: ``delta`` is the fastest item's time and every item weighs
``min(round(t / delta), MAX_RATIO)``. ``w_attn`` is then a tuple of L weights (an int whenever
all layers weigh the same, which is exactly KnapSpec's rule).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from layersearch.common.checks import check_fraction, check_int
from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask

MAX_RATIO = 5


def integer_weights(attention_seconds: float, mlp_seconds: float, *, max_ratio: int = MAX_RATIO) -> tuple[int, int]:
    """``(w_attn, w_mlp)``: the slower sub-layer type gets ``min(round(ratio), max_ratio)``, the other 1.

    Equal times give ``(1, 1)``; a zero time makes the other type ``max_ratio`` (an infinite
    ratio); both zero gives ``(1, 1)``.
    """
    for what, value in (("attention", attention_seconds), ("mlp", mlp_seconds)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise LayersearchError(f"{what} seconds must be a finite number >= 0, got {value!r}")
    check_int(max_ratio, "max_ratio")
    slow, fast = max(attention_seconds, mlp_seconds), min(attention_seconds, mlp_seconds)
    if slow == 0:
        return 1, 1
    ratio = math.inf if fast == 0 else slow / fast
    heavy = max_ratio if ratio == math.inf else min(int(math.floor(ratio + 0.5)), max_ratio)
    return (heavy, 1) if attention_seconds >= mlp_seconds else (1, heavy)


def profile_weights(profile, context: int, *, max_ratio: int = MAX_RATIO) -> tuple[int | tuple[int, ...], int]:
    """``(w_attn, w_mlp)`` of a :class:`~layersearch.profiling.profile.LatencyProfile` at ``context`` tokens.

    ``w_attn`` is one int (:func:`integer_weights`) unless sliding windows give layers
    different attention weights; then it is a tuple with one weight per layer.
    """
    if not getattr(profile, "attention_windows", ()):
        return integer_weights(profile.attention_seconds(context), profile.mlp_seconds, max_ratio=max_ratio)
    attention = [profile.attention_seconds(context, i) for i in range(profile.num_layers)]
    *per_layer, w_mlp = _relative_weights([*attention, profile.mlp_seconds], max_ratio)
    return (per_layer[0] if len(set(per_layer)) == 1 else tuple(per_layer)), w_mlp


def _relative_weights(seconds: Sequence[float], max_ratio: int) -> list[int]:
    """Each time in units of the fastest, rounded half up, between 1 and ``max_ratio``.

    For one attention and one MLP time this is :func:`integer_weights`.
    """
    positive = [t for t in seconds if t > 0]
    if not positive:
        return [1] * len(seconds)
    delta = min(seconds)
    if delta == 0:  # a free item: everything that costs something is infinitely heavier
        return [max_ratio if t > 0 else 1 for t in seconds]
    return [max(1, min(int(math.floor(t / delta + 0.5)), max_ratio)) for t in seconds]


def attention_weight(w_attn: int | Sequence[int], layer: int) -> int:
    """Layer ``layer``'s attention weight from an int (all layers alike) or a per-layer sequence."""
    return w_attn if isinstance(w_attn, int) else int(w_attn[layer])


@dataclass(frozen=True)
class Group:
    """One DP item: the flat sub-layer indices it covers (in order), its weight, whether it may be skipped."""

    items: tuple[int, ...]
    weight: int
    skippable: bool = True


def build_groups(
    num_layers: int, w_attn: int | Sequence[int], w_mlp: int, *, bound: bool = False, keep_last_layers: int = 1
) -> tuple[Group, ...]:
    """The DP items in depth order: 2L sub-layers (decoupled) or L whole layers (``bound``).

    ``w_attn`` is one weight for every layer or one per layer (sliding windows). The last
    ``keep_last_layers`` decoder layers are always executed (KnapSpec, like SWIFT, never drops
    the final block: the LM head reads its output directly).
    """
    check_int(num_layers, "num_layers")
    if not isinstance(w_attn, int):
        w_attn = tuple(w_attn)
        if len(w_attn) != num_layers:
            raise LayersearchError(f"w_attn has {len(w_attn)} per-layer weights but there are {num_layers} layers")
    attention = [w_attn] * num_layers if isinstance(w_attn, int) else list(w_attn)
    for i, w in enumerate(attention):
        check_int(w, f"w_attn[{i}]" if not isinstance(w_attn, int) else "w_attn")
    check_int(w_mlp, "w_mlp")
    check_int(keep_last_layers, "keep_last_layers", minimum=0, maximum=num_layers)
    first_kept = num_layers - keep_last_layers
    groups: list[Group] = []
    for layer in range(num_layers):
        skippable = layer < first_kept
        if bound:
            groups.append(Group((2 * layer, 2 * layer + 1), attention[layer] + w_mlp, skippable))
        else:
            groups.append(Group((2 * layer,), attention[layer], skippable))
            groups.append(Group((2 * layer + 1,), w_mlp, skippable))
    return tuple(groups)


def skippable_weight(groups: Sequence[Group]) -> int:
    """Total weight of the groups that may be skipped (the largest possible skipped weight)."""
    return sum(g.weight for g in groups if g.skippable)


def default_max_budget(groups: Sequence[Group], fraction: float = 0.5) -> int:
    """KnapSpec's cap on the skipped weight: ``floor(fraction * K)``, K the skippable weight (K/2)."""
    check_fraction(fraction, "max skip fraction")
    return int(math.floor(fraction * skippable_weight(groups)))


def mask_from_groups(num_layers: int, groups: Sequence[Group], skipped: Sequence[bool], model=None) -> SkipMask:
    """The SkipMask skipping every sub-layer of each group flagged in ``skipped``."""
    flat = [False] * (2 * num_layers)
    for group, skip in zip(groups, skipped):
        if skip:
            for item in group.items:
                flat[item] = True
    return SkipMask.from_flat(flat, model)


def mask_weight(mask: SkipMask, w_attn: int | Sequence[int], w_mlp: int) -> int:
    """Skipped weight of ``mask`` in integer units (``w_attn``: one weight or one per layer)."""
    return sum(attention_weight(w_attn, i) for i in mask.attention) + len(mask.mlp) * w_mlp
