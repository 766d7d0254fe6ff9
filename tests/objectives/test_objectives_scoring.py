"""Scoring rules and objectives on fixed measurements (a fake runtime), and the objective names."""

from __future__ import annotations

import pytest

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.objectives import (
    OBJECTIVES,
    MatchMeasurement,
    make_objective,
    objective_direction,
)
from layersearch.objectives.scoring import drafts_per_cycle, seconds_per_token
from layersearch.profiling.profile import LatencyProfile
from layersearch.runtime.stats import DecodeStats

GAMMA = 12


def pooled(*, new_tokens, seconds, target_forwards, drafted, accepted, prompts, draft_forwards=0) -> DecodeStats:
    """Decode statistics pooled over ``prompts`` generations (each prefill makes one token)."""
    return DecodeStats(
        new_tokens=new_tokens, target_forwards=target_forwards, drafted=drafted, accepted=accepted,
        prefill_seconds=0.0, draft_seconds=0.0, verify_seconds=0.0, total_seconds=seconds,
        generations=prompts, draft_forwards=draft_forwards,
    )


@pytest.fixture(scope="module")
def info() -> ModelInfo:
    """The model the fake measurements are for (nothing runs it)."""
    return ModelInfo("tiny-llama", 4, 64, "fp-tiny")


@pytest.fixture(scope="module")
def profile(info) -> LatencyProfile:
    return LatencyProfile(
        model=info, device="cpu", dtype="float32", torch_version="test",
        attention_slope=1e-7, attention_intercept=2e-4, mlp_seconds=3e-4, base_seconds=4e-4,
        verify_ratios=(1.0, 1.2, 1.4, 1.6),
    )


class FakeRuntime:
    """A Runtime that returns fixed measurements (the interface objectives depend on)."""

    def __init__(self, info, run: DecodeStats, context: int = 100) -> None:
        self.info = info
        self.context_length = context
        self.run = run
        self.calls: list[str] = []

    def decode(self, mask):
        self.calls.append("decode")
        return self.run

    def matchness(self, mask, gamma):
        self.calls.append("matchness")
        return MatchMeasurement(3, 4)


def test_expected_speedup_uses_measured_m_alpha_and_the_profile(info, profile):
    run = pooled(new_tokens=40, seconds=1.0, target_forwards=12, drafted=30, accepted=24, prompts=4)
    fake = FakeRuntime(info, run)
    mask = SkipMask(4, (0, 1), (3,))
    score = make_objective("expected-speedup", profile=profile).evaluate(fake, mask)
    assert score.value == pytest.approx(profile.expected_speedup(3.0, 0.8, mask, 100))
    assert score.attrs["M"] == 3.0 and score.attrs["alpha"] == 0.8 and score.attrs["tokens_per_second"] == 40.0
    assert fake.calls == ["decode"]
    empty = make_objective("expected-speedup", profile=profile).evaluate(fake, SkipMask.none(4))
    assert empty.value == 1.0
    counted = pooled(new_tokens=40, seconds=1.0, target_forwards=12, drafted=30, accepted=24,
                     prompts=4, draft_forwards=36)  # 3 per cycle, stops included
    score = make_objective("expected-speedup", profile=profile).evaluate(FakeRuntime(info, counted), mask)
    assert score.value == pytest.approx(profile.expected_speedup(3.0, 0.8, mask, 100, drafts=3.0))


def test_tpt_maximizes_over_gamma_with_the_measured_alpha(info, profile):
    run = pooled(new_tokens=40, seconds=1.0, target_forwards=12, drafted=30, accepted=24, prompts=4)
    mask = SkipMask(4, (0, 1), (3,))
    score = make_objective("tpt", profile=profile).evaluate(FakeRuntime(info, run), mask)
    value, gamma = profile.best_tpt(0.8, mask, 100)
    assert score.value == pytest.approx(value) and score.attrs["best_gamma"] == gamma
    assert objective_direction("tpt") == "maximize"


def test_matchness_records_no_decode_stats_unless_asked(info):
    run = pooled(new_tokens=10, seconds=0.5, target_forwards=5, drafted=8, accepted=4, prompts=1)
    fake = FakeRuntime(info, run)
    plain = make_objective("matchness").evaluate(fake, SkipMask(4, (1,)))
    assert plain.value == 0.75 and plain.attrs["M"] is None and fake.calls == ["matchness"]
    full = make_objective("matchness", decode_stats=True).evaluate(fake, SkipMask(4, (1,)))
    assert full.attrs["M"] == 1.8 and full.attrs["alpha"] == 0.5


def test_unknown_objective_lists_the_known_ones():
    with pytest.raises(LayersearchError) as info:
        make_objective("speed")
    assert all(name in str(info.value) for name in OBJECTIVES)


def test_profile_objectives_need_a_profile():
    for name in ("expected-speedup", "tpt"):
        with pytest.raises(LayersearchError, match="latency profile"):
            make_objective(name)


def test_rules_read_m_and_alpha_from_decode_stats():
    run = pooled(new_tokens=40, seconds=2.0, target_forwards=12, drafted=30, accepted=24, prompts=4, draft_forwards=24)
    assert (run.mean_accepted_length, run.acceptance_rate) == (3.0, 0.8)
    assert seconds_per_token(run) == 0.05 and drafts_per_cycle(run) == 2.0
    silent = pooled(new_tokens=0, seconds=1.0, target_forwards=0, drafted=0, accepted=0, prompts=1)
    assert seconds_per_token(silent) == float("inf") and drafts_per_cycle(silent) is None


def test_expected_speedup_costs_the_runs_own_steps_when_recorded(info, profile):
    from dataclasses import replace

    from layersearch.runtime.step import StepOutcome

    mask = SkipMask(4, (0, 1), (3,))
    steps = (StepOutcome(0, 100, 4, 3, 4, "layer-skip", mask, draft_forwards=4),
             StepOutcome(1, 104, 2, 0, 1, "layer-skip", mask, draft_forwards=3))
    run = replace(pooled(new_tokens=5, seconds=1.0, target_forwards=2, drafted=6, accepted=3, prompts=1), steps=steps)
    score = make_objective("expected-speedup", profile=profile).evaluate(FakeRuntime(info, run), mask)
    # The same prediction bench compares with measurement, not Eq. 6 from M and alpha.
    assert score.value == pytest.approx(profile.predicted_speedup_of_steps(steps))
    assert score.value != pytest.approx(profile.expected_speedup(2.5, 0.5, mask, 100, drafts=3.5))
