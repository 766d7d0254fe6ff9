"""The tune budget holds: no trial, and no batch, starts once the time left cannot hold it.

Every run of a configuration is slowed by a fixed sleep per prompt, so a trial's least time is
known (plain generate and one candidate, each on every train prompt) however fast the tiny
model decodes."""

from __future__ import annotations

from dataclasses import replace

import optuna
import pytest

TRAIN_PROMPTS = 2


def _slow(monkeypatch, seconds: float) -> None:
    """Every configuration tune's trials run (plain generate and each candidate) sleeps ``seconds`` per prompt."""
    import time

    from layersearch.tune import objective

    def slowed(config):
        def generate(ids, n, inner=config.generate):
            time.sleep(seconds)
            return inner(ids, n)
        return replace(config, generate=generate)

    plain, candidate = objective.plain_config, objective.spec_config
    monkeypatch.setattr(objective, "plain_config", lambda *a, **k: slowed(plain(*a, **k)))
    monkeypatch.setattr(objective, "spec_config", lambda *a, **k: slowed(candidate(*a, **k)))


def _tune(prompt_file, model_dir, tmp_path, budget: float):
    from layersearch.commands.common import load
    from layersearch.commands.demo import tune_args
    from layersearch.commands.tune_options import tune_from_options

    args = tune_args("--prompts", str(prompt_file), "--model", str(model_dir), "--out", str(tmp_path / "spec.json"),
                     "--storage", str(tmp_path / "tune.db"), "--name", "budget", "--budget", str(budget), "--threads", "1",
                     "--max-new-tokens", "4", "--train-prompts", str(TRAIN_PROMPTS), "--test-prompts", "1", "--repeats", "1",
                     "--finalists", "1", "--quiet", "--kernels", "stock")
    return tune_from_options(args, lambda: load(args), lambda message: None)


def test_a_budget_too_short_for_the_first_batch_starts_none(prompt_file, tiny_model_dir, tmp_path, monkeypatch):
    sleep = 0.5
    _slow(monkeypatch, sleep)
    result = _tune(prompt_file, tiny_model_dir, tmp_path, budget=1.0)
    assert result.new_trials == 0 and result.selection.plain_chosen
    # Before, the first batch (plain and three candidates on every train prompt: 4 s of sleeps at
    # least) started whatever was left. What ran instead (pricing plain generate) stays below that
    # with room for a loaded machine's overhead: the bound separates the two, it does not time tune.
    first_batch = 4 * TRAIN_PROMPTS * sleep
    assert result.search_seconds < first_batch, result.search_seconds


def test_the_search_ends_within_its_budget_but_for_one_trial(prompt_file, tiny_model_dir, tmp_path, monkeypatch):
    budget = 5.0
    _slow(monkeypatch, 0.1)
    result = _tune(prompt_file, tiny_model_dir, tmp_path, budget)
    assert result.new_trials >= 1  # a budget with room measures
    study = optuna.load_study(study_name="budget", storage=f"sqlite:///{tmp_path / 'tune.db'}")
    longest = max((t.datetime_complete - t.datetime_start).total_seconds() for t in study.trials if t.datetime_complete)
    assert result.search_seconds <= budget + longest + 0.25, (result.search_seconds, longest)
