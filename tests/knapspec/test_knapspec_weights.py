"""KnapSpec's integer latency weights and DP items."""

from __future__ import annotations

import pytest

from layersearch.common.errors import LayersearchError
from layersearch.knapspec import build_groups, default_max_budget, integer_weights, mask_from_groups, mask_weight, profile_weights
from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.profiling.profile import LatencyProfile


@pytest.mark.parametrize(
    "attention, mlp, expected",
    [
        (1.0, 1.0, (1, 1)),
        (2.0, 1.0, (2, 1)),
        (1.0, 3.1, (1, 3)),
        (2.49, 1.0, (2, 1)),
        (2.5, 1.0, (3, 1)),  # half up, as the paper's nearest-integer bracket (not half-to-even)
        (3.5, 1.0, (4, 1)),
        (4.6, 1.0, (5, 1)),
        (40.0, 1.0, (5, 1)),  # capped at 5
        (1.0, 40.0, (1, 5)),
        (0.0, 1.0, (1, 5)),  # a free sub-layer: infinite ratio, capped
        (0.0, 0.0, (1, 1)),
        (1.4, 1.0, (1, 1)),
    ],
)
def test_integer_weights(attention, mlp, expected):
    assert integer_weights(attention, mlp) == expected


def test_integer_weights_cap_is_a_parameter():
    assert integer_weights(9.0, 1.0, max_ratio=8) == (8, 1)
    with pytest.raises(LayersearchError):
        integer_weights(-1.0, 1.0)
    with pytest.raises(LayersearchError):
        integer_weights(1.0, 1.0, max_ratio=0)


def test_profile_weights_grow_with_context():
    info = ModelInfo("m", 4, 64, "fp")
    profile = LatencyProfile(info, "cpu", "float32", "x", 1e-6, 1e-4, 2e-4, 1e-4, (1.0,))
    # t_attn(n) = 1e-6 n + 1e-4 against t_mlp = 2e-4
    assert profile_weights(profile, 0) == (1, 2)
    assert profile_weights(profile, 100) == (1, 1)
    assert profile_weights(profile, 500) == (3, 1)
    assert profile_weights(profile, 100_000) == (5, 1)


def test_groups_decoupled_and_bound():
    groups = build_groups(3, 3, 1)
    assert [g.items for g in groups] == [(0,), (1,), (2,), (3,), (4,), (5,)]
    assert [g.weight for g in groups] == [3, 1, 3, 1, 3, 1]
    assert [g.skippable for g in groups] == [True, True, True, True, False, False]  # last block kept
    bound = build_groups(3, 3, 1, bound=True, keep_last_layers=0)
    assert [g.items for g in bound] == [(0, 1), (2, 3), (4, 5)]
    assert [g.weight for g in bound] == [4, 4, 4] and all(g.skippable for g in bound)
    assert default_max_budget(groups) == 4  # K/2 of the skippable weight 8
    mask = mask_from_groups(3, bound, [True, False, True])
    assert mask.attention == (0, 2) and mask.mlp == (0, 2)
    assert mask_weight(mask, 3, 1) == 8
    with pytest.raises(LayersearchError):
        build_groups(3, 0, 1)


def test_sliding_windows_give_per_layer_attention_weights():
    # Layers 0 and 2 slide with a window of 65 tokens (64 cached positions), 1 and 3 are full.
    info = ModelInfo("m", 4, 64, "fp")
    profile = LatencyProfile(info, "cpu", "float32", "x", 1e-6, 1e-4, 2e-4, 1e-4, (1.0,), attention_windows=(65, None, 65, None))
    # Inside the window every layer costs the same: KnapSpec's rule, one int.
    assert profile_weights(profile, 10) == integer_weights(profile.attention_seconds(10), 2e-4) == (1, 2)
    # Far past it a sliding layer's attention (1.64e-4) stays the cheapest item, the full ones grow.
    w_attn, w_mlp = profile_weights(profile, 1000)  # full layers: 1.1e-3 = 6.7 sliding -> capped at 5
    assert w_attn == (1, 5, 1, 5) and w_mlp == 1
    groups = build_groups(4, w_attn, w_mlp)
    assert [g.weight for g in groups] == [1, 1, 5, 1, 1, 1, 5, 1]
    assert mask_weight(SkipMask(4, (0, 1), (2,)), w_attn, w_mlp) == 1 + 5 + 1
    assert [g.weight for g in build_groups(4, w_attn, w_mlp, bound=True)] == [2, 6, 2, 6]
    with pytest.raises(LayersearchError, match="3 per-layer weights"):
        build_groups(4, (1, 2, 3), 1)
