"""ModelRuntime on a tiny Llama: matchness in one forward per prompt, decoding pooled into DecodeStats."""

from __future__ import annotations

import pytest
import torch

from layersearch.masks.mask import SkipMask
from layersearch.models.loading import describe_model
from layersearch.objectives import TRIAL_ATTRS, ModelRuntime, make_objective

GAMMA = 12


@pytest.fixture(scope="module")
def runtime(tiny_llama) -> ModelRuntime:
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 128, (n,), generator=generator).tolist() for n in (12, 20, 7)]
    info = describe_model(tiny_llama, "tiny-llama")
    return ModelRuntime(tiny_llama, info, prompts, max_new_tokens=10, draft_threshold=0.0)


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


def test_time_per_token_runs_the_decoder_and_records_the_trial_attrs(runtime):
    objective = make_objective("time-per-token")
    assert objective.direction == "minimize"
    score = objective.evaluate(runtime, SkipMask(4, (1,), (2,)))
    assert set(TRIAL_ATTRS) <= set(score.attrs)
    assert score.value > 0
    assert score.attrs["tokens_per_second"] == pytest.approx(1 / score.value)
    assert score.attrs["skip_ratio"] == 0.25 and score.attrs["M"] >= 1
    assert 0 <= score.attrs["alpha"] <= 1


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
