"""Tests of the study's prompt choice: train for searches, test for comparisons, two seeds."""

from __future__ import annotations

import pytest

from layersearch.data import split_of
from layersearch.common.errors import LayersearchError
from layersearch.study.rebuild import prompt_texts
from layersearch.study.settings import StudySettings


def _settings(**extra) -> StudySettings:
    return StudySettings(model="m", domain="summarization", strategy="random", objective="matchness", samples=3, **extra)


def test_searches_use_train_and_comparisons_test():
    from layersearch.data import load_prompts

    settings = _settings()
    for asked, split in ((False, "train"), ("test", "test")):
        prompts = load_prompts("summarization", 3, seed=0, split=split)
        assert prompt_texts(settings, asked) == [p.text for p in prompts]
        assert {split_of(p.id) for p in prompts} == {split}


def test_sampler_seed_does_not_change_the_prompts_and_prompt_seed_does():
    base = prompt_texts(_settings())
    assert prompt_texts(_settings(seed=5)) == base
    assert prompt_texts(_settings(prompt_seed=5)) != base


def test_settings_round_trip_keeps_both_seeds_and_the_split():
    settings = _settings(seed=3, prompt_seed=4, prompt_split="validation")
    assert StudySettings.from_dict(settings.to_dict()) == settings


def test_old_settings_load_with_one_seed_for_both_and_no_split():
    old = {"version": 1, "model": "m", "domain": "summarization", "strategy": "random",
           "objective": "matchness", "samples": 3, "seed": 7}
    settings = StudySettings.from_dict(old)
    assert (settings.seed, settings.prompt_seed, settings.prompt_split) == (7, 7, None)
    # An old study resumes on the very prompts it was created with (all items, seed 7).
    from layersearch.data import load_prompts

    assert prompt_texts(settings) == [p.text for p in load_prompts("summarization", 3, seed=7)]


def test_bad_prompt_seed_or_split_is_rejected():
    with pytest.raises(LayersearchError, match=r"prompt-seed must be an integer in \[0, 4294967295\]"):
        _settings(prompt_seed=-1).validated()
    with pytest.raises(LayersearchError, match="unknown prompt split"):
        _settings(prompt_split="dev").validated()
