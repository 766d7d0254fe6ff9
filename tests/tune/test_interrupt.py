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
