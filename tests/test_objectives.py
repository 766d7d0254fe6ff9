"""Objectives on a tiny Llama: matchness in one forward, time per token, the profile-based ones."""

from __future__ import annotations

import pytest
import torch

from layersearch.errors import LayersearchError
from layersearch.mask import SkipMask
from layersearch.models.loading import describe_model
from layersearch.objectives import (
    OBJECTIVES,
    TRIAL_ATTRS,
    DecodeMeasurement,
    MatchMeasurement,
    ModelRuntime,
    make_objective,
    objective_direction,
)
from layersearch.profile import LatencyProfile

GAMMA = 12


@pytest.fixture(scope="module")
def runtime(tiny_llama) -> ModelRuntime:
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 128, (n,), generator=generator).tolist() for n in (12, 20, 7)]
    info = describe_model(tiny_llama, "tiny-llama")
    return ModelRuntime(tiny_llama, info, prompts, max_new_tokens=10, draft_threshold=0.0)


@pytest.fixture(scope="module")
def profile(runtime) -> LatencyProfile:
    return LatencyProfile(
        model=runtime.info, device="cpu", dtype="float32", torch_version="test",
        attention_slope=1e-7, attention_intercept=2e-4, mlp_seconds=3e-4, base_seconds=4e-4,
        verify_ratios=(1.0, 1.2, 1.4, 1.6),
    )


class FakeRuntime:
    """A Runtime that returns fixed measurements (the interface objectives depend on)."""

    def __init__(self, info, run: DecodeMeasurement, context: int = 100) -> None:
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


def test_matchness_of_the_empty_mask_is_one(runtime):
    score = make_objective("matchness", gamma=GAMMA).evaluate(runtime, SkipMask.none(4))
    assert score.value == 1.0
    assert score.attrs["matchness"] == 1.0 and score.attrs["mask"] == "A:- M:-"


def test_matchness_drops_when_sub_layers_are_skipped(runtime):
    objective = make_objective("matchness", gamma=GAMMA)
    values = [objective.evaluate(runtime, mask).value
              for mask in (SkipMask.everything(4), SkipMask(4, (0, 1, 2), (1, 2, 3)))]
    assert all(0.0 <= v < 1.0 for v in values)


def test_matchness_is_one_masked_forward_per_prompt_on_the_cached_prompt(runtime, tiny_llama):
    objective = make_objective("matchness", gamma=GAMMA)
    mask = SkipMask(4, (1, 2), (0,))
    first = objective.evaluate(runtime, mask).value  # may compute the target's tokens (cached after)
    calls = []
    handle = tiny_llama.register_forward_pre_hook(lambda module, args, kwargs: calls.append(kwargs["input_ids"].shape),
                                                  with_kwargs=True)
    try:
        again = objective.evaluate(runtime, mask).value
    finally:
        handle.remove()
    assert len(calls) == len(runtime.prompts)  # one forward per prompt, the target's tokens cached
    assert all(shape == (1, GAMMA) for shape in calls)  # all gamma positions in parallel
    assert again == first  # the prompt cache was cut back exactly after the first call


def test_matchness_counts_agree_with_a_fresh_recomputation(runtime, tiny_llama):
    """Targets are generate()'s greedy tokens; the counts match a from-scratch computation."""
    from transformers import DynamicCache

    from layersearch.models.skipping import skipping
    from layersearch.runtime.forward import forward_tokens

    mask = SkipMask(4, (3,), (2,))
    measured = runtime.matchness(mask, GAMMA)
    matched = compared = 0
    with torch.inference_mode():
        for prompt in runtime.prompts:
            ids = torch.tensor([prompt])
            target = tiny_llama.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=GAMMA + 1,
                                         do_sample=False)[0, len(prompt):].tolist()
            cache = DynamicCache(config=tiny_llama.config)
            forward_tokens(tiny_llama, prompt, 0, cache)  # the full model's prompt cache
            with skipping(tiny_llama, mask):
                predicted = forward_tokens(tiny_llama, target[:-1], len(prompt), cache).argmax(-1).tolist()
            matched += sum(p == t for p, t in zip(predicted, target[1:]))
            compared += GAMMA
    assert (measured.matched, measured.compared) == (matched, compared)


@pytest.mark.parametrize("family", ["mistral", "gemma3"])
def test_matchness_on_a_sliding_window_model_rolls_back_exactly(family):
    """Prompts and gamma several windows long: every mask's matchness equals a fresh computation."""
    from transformers import DynamicCache

    from layersearch.models.skipping import skipping
    from layersearch.models.tiny import build_tiny_model
    from layersearch.runtime.forward import forward_tokens

    model = build_tiny_model(family, num_layers=4, sliding_window=3, seed=6)
    model.generation_config.eos_token_id = None
    prompts = [torch.randint(3, 128, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (11, 7)]
    sliding = ModelRuntime(model, describe_model(model, family), prompts, max_new_tokens=4, draft_threshold=0.0)
    for mask in (SkipMask(4, (0, 1), ()), SkipMask(4, (), (2,)), SkipMask(4, (1, 2), (1, 2))):
        measured = sliding.matchness(mask, GAMMA)
        matched = 0
        with torch.inference_mode():
            for prompt in prompts:
                ids = torch.tensor([prompt])
                target = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=GAMMA + 1,
                                        do_sample=False)[0, len(prompt):].tolist()
                cache = DynamicCache(config=model.config)  # fresh: nothing to roll back
                forward_tokens(model, prompt, 0, cache)
                with skipping(model, mask):
                    predicted = forward_tokens(model, target[:-1], len(prompt), cache).argmax(-1).tolist()
                matched += sum(p == t for p, t in zip(predicted, target[1:]))
        assert (measured.matched, measured.compared) == (matched, GAMMA * len(prompts))


def test_time_per_token_runs_the_decoder_and_records_the_trial_attrs(runtime):
    objective = make_objective("time-per-token")
    assert objective.direction == "minimize"
    score = objective.evaluate(runtime, SkipMask(4, (1,), (2,)))
    assert set(TRIAL_ATTRS) <= set(score.attrs)
    assert score.value > 0
    assert score.attrs["tokens_per_second"] == pytest.approx(1 / score.value)
    assert score.attrs["skip_ratio"] == 0.25 and score.attrs["M"] >= 1
    assert 0 <= score.attrs["alpha"] <= 1


def test_expected_speedup_uses_measured_m_alpha_and_the_profile(runtime, profile):
    run = DecodeMeasurement(new_tokens=40, seconds=1.0, target_forwards=12, drafted=30, accepted=24, decode_tokens=36)
    fake = FakeRuntime(runtime.info, run)
    mask = SkipMask(4, (0, 1), (3,))
    score = make_objective("expected-speedup", profile=profile).evaluate(fake, mask)
    assert score.value == pytest.approx(profile.expected_speedup(3.0, 0.8, mask, 100))
    assert score.attrs["M"] == 3.0 and score.attrs["alpha"] == 0.8 and score.attrs["tokens_per_second"] == 40.0
    assert fake.calls == ["decode"]
    empty = make_objective("expected-speedup", profile=profile).evaluate(fake, SkipMask.none(4))
    assert empty.value == 1.0
    counted = DecodeMeasurement(new_tokens=40, seconds=1.0, target_forwards=12, drafted=30, accepted=24,
                                decode_tokens=36, draft_forwards=36)  # 3 per cycle, stops included
    score = make_objective("expected-speedup", profile=profile).evaluate(FakeRuntime(runtime.info, counted), mask)
    assert score.value == pytest.approx(profile.expected_speedup(3.0, 0.8, mask, 100, drafts=3.0))


def test_tpt_maximizes_over_gamma_with_the_measured_alpha(runtime, profile):
    run = DecodeMeasurement(new_tokens=40, seconds=1.0, target_forwards=12, drafted=30, accepted=24, decode_tokens=36)
    mask = SkipMask(4, (0, 1), (3,))
    score = make_objective("tpt", profile=profile).evaluate(FakeRuntime(runtime.info, run), mask)
    value, gamma = profile.best_tpt(0.8, mask, 100)
    assert score.value == pytest.approx(value) and score.attrs["best_gamma"] == gamma
    assert objective_direction("tpt") == "maximize"


def test_matchness_records_no_decode_stats_unless_asked(runtime):
    run = DecodeMeasurement(new_tokens=10, seconds=0.5, target_forwards=5, drafted=8, accepted=4, decode_tokens=9)
    fake = FakeRuntime(runtime.info, run)
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
