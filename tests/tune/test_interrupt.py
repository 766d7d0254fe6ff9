"""Ctrl-C during a tune search: the trial it stops is failed quietly, no traceback; and the search
ends within its deadline."""

from __future__ import annotations

import io
import logging
import time

import optuna
import pytest

from layersearch.tune.study import run_trials


@pytest.fixture
def optuna_log():
    """What Optuna logs, as text (its own handler holds the stderr of the moment it was made)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("optuna")
    logger.addHandler(handler)
    yield stream
    logger.removeHandler(handler)


def test_an_interrupted_trial_logs_no_traceback(optuna_log):
    study = optuna.create_study()

    def objective(trial):
        trial.suggest_float("x", 0.0, 1.0)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_trials(study, objective, time.monotonic() + 60.0, lambda s, t: None)
    assert optuna_log.getvalue() == ""
    assert study.trials[0].state == optuna.trial.TrialState.FAIL  # resumable: the trial is closed, not left RUNNING


def test_other_failures_are_still_logged(optuna_log):
    study = optuna.create_study()

    def objective(trial):
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        run_trials(study, objective, time.monotonic() + 60.0, lambda s, t: None)
    assert "a bug" in optuna_log.getvalue()


def test_no_trial_starts_that_the_time_left_cannot_hold():
    """A trial of 0.3 s leaves 0.2 s of a 0.5 s budget: Optuna's timeout would start another and
    end past the budget; the search stops after the one."""
    study = optuna.create_study()

    def objective(trial):
        time.sleep(0.3)
        return trial.suggest_float("x", 0.0, 1.0)

    run_trials(study, objective, time.monotonic() + 0.5, lambda s, t: None)
    assert len(study.trials) == 1


def test_a_batch_interrupted_while_measuring_fails_its_trials_for_the_resumed_study():
    """Ctrl-C while the first batch decodes: every trial it asked is failed (not left RUNNING)
    and enqueued again, so a resumed study measures them."""
    from layersearch.tune.study import run_batch

    study = optuna.create_study(direction="maximize")
    for x in (0.1, 0.2, 0.3):
        study.enqueue_trial({"x": x})

    def spec_of(trial):
        return trial.suggest_float("x", 0.0, 1.0)

    def measure_all(specs):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_batch(study, 2, spec_of, measure_all, lambda trial, result: result, lambda s, t: None)
    states = [t.state for t in study.trials]
    waiting = optuna.trial.TrialState.WAITING
    assert states == [optuna.trial.TrialState.FAIL] * 2 + [waiting] * 3
    seen = []
    assert run_batch(study, 5, spec_of, lambda specs: [2 * s for s in specs], lambda trial, result: result,
                     lambda s, t: seen.append(t.number)) == 3  # the one never asked, and the two interrupted
    assert sorted(t.params["x"] for t in study.trials if t.value is not None) == [0.1, 0.2, 0.3]
    assert seen == [2, 3, 4]
