"""Draft-length policy: Self-SD's adaptive threshold moves the way the reference describes."""

from __future__ import annotations

import pytest

from layersearch.common.errors import LayersearchError
from layersearch.runtime.draft_policy import DraftPolicy
from layersearch.runtime.lookahead import AdaptiveThreshold


def test_threshold_rises_when_drafts_are_rejected():
    state = AdaptiveThreshold.start(0.8)
    for _ in range(5):
        state = state.update(accepted=0, drafted=4)
    assert state.raw == pytest.approx(0.85)
    assert 0.8 < state.value < state.raw  # smoothed (EMA 0.9) lags behind the raw threshold


def test_threshold_falls_when_drafts_are_accepted():
    state = AdaptiveThreshold.start(0.8)
    for _ in range(3):
        state = state.update(accepted=4, drafted=4)
    assert state.raw == pytest.approx(0.77)
    assert state.raw < state.value < 0.8


def test_no_draft_leaves_state_unchanged():
    state = AdaptiveThreshold.start(0.5)
    assert state.update(0, 0) == state


def test_threshold_is_clamped():
    state = AdaptiveThreshold.start(1.0)
    for _ in range(3):
        state = state.update(0, 3)
    assert state.raw == 1.0


@pytest.mark.parametrize("kwargs", [dict(max_draft=0), dict(threshold=1.5)])
def test_bad_policy_is_an_error(kwargs):
    with pytest.raises(LayersearchError):
        DraftPolicy(**kwargs)
