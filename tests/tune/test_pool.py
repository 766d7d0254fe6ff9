"""The mask pool: scored by matchness, pruned and ranked by the latency profile's prediction."""

from __future__ import annotations

import pytest
import torch

from layersearch.profiling.profile import LatencyProfile
from layersearch.tune.pool import candidate_pool, predicted_speedup


def _profile(info, base):
    return LatencyProfile(model=info, device="cpu", dtype="float32", torch_version="test", attention_slope=0.0,
                          attention_intercept=1e-3, mlp_seconds=1e-3, base_seconds=base, verify_ratios=(1.0, 1.0, 1.0, 1.0))


@pytest.fixture
def loaded(tiny_model_dir):
    from layersearch.models.loading import load_model

    return load_model(str(tiny_model_dir))


TEXTS = ["def add(a, b):\n    return a + b\n\ndef add(a, b):", "x = 1\ny = 2\nx = 1\n"]


def test_masks_that_cannot_pay_are_pruned_before_decoding(loaded):
    # Every forward costs its fixed base, so no draft is cheaper than a verification: nothing can pay.
    assert candidate_pool(loaded, TEXTS, _profile(loaded.info, base=10.0), 32, 0.5) == ()


def test_the_pool_is_ranked_by_the_prediction_at_matchness(loaded):
    profile = _profile(loaded.info, base=0.0)
    pool = candidate_pool(loaded, TEXTS, profile, 32, 0.5, size=4)
    assert 1 <= len(pool) <= 4
    assert [c.predicted for c in pool] == sorted((c.predicted for c in pool), reverse=True)
    for c in pool:
        assert c.ceiling > 1.0 and 0.0 <= c.matchness <= 1.0 and c.mask.provenance["label"] == c.label
        assert c.predicted == pytest.approx(predicted_speedup(profile, c.mask, c.matchness, 32))
    assert len({c.mask.to_flat() for c in pool}) == len(pool)  # distinct masks


def test_a_profile_with_int8_timings_puts_int8_self_drafts_in_the_pool(loaded):
    from dataclasses import replace

    profile = replace(_profile(loaded.info, base=0.0), int8_attention_slope=0.0, int8_attention_intercept=2.5e-4,
                      int8_mlp_seconds=2.5e-4, int8_head_saving=0.0)
    pool = candidate_pool(loaded, TEXTS, profile, 32, 0.5, size=8)
    whole = next(c for c in pool if c.label == "int8 uniform 0")  # the whole model in int8
    assert whole.mask.num_skipped == 0 and whole.mask.num_int8 == 2 * loaded.info.num_layers and whole.mask.int8_head
    assert whole.matchness > 0.5 and whole is pool[0]  # it agrees most, at a quarter of the cost: predicted best
    assert not any(c.label.startswith("int8") for c in candidate_pool(loaded, TEXTS, _profile(loaded.info, base=0.0), 32, 0.5, size=8))


def test_a_profile_with_int4_timings_puts_int4_self_drafts_in_the_pool(loaded):
    """A GPU's profile prices int4 twins below int8 ones: tune then considers the int4 self-draft,
    in groups the model's widths take."""
    from dataclasses import replace

    profile = replace(_profile(loaded.info, base=0.0), int4_attention_slope=0.0, int4_attention_intercept=1.5e-4,
                      int4_mlp_seconds=1.5e-4, int4_head_saving=0.0)
    pool = candidate_pool(loaded, TEXTS, profile, 32, 0.5, size=8)
    whole = next(c for c in pool if c.label == "int4 uniform 0")  # the whole model in int4
    assert whole.mask.num_skipped == 0 and whole.mask.num_int4 == 2 * loaded.info.num_layers and whole.mask.int4_head
    widths = {m.in_features for m in loaded.model.modules() if isinstance(m, torch.nn.Linear)}
    assert all(width % whole.mask.int4_group_size == 0 for width in widths)
    assert whole.matchness > 0.5
    assert not any(c.label.startswith("int4") for c in candidate_pool(loaded, TEXTS, _profile(loaded.info, base=0.0), 32, 0.5, size=8))
