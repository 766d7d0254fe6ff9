"""Ctrl-C during a tune search: the trial it stops is failed quietly, no traceback."""

from __future__ import annotations

import io
import logging

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
        run_trials(study, objective, 60.0, lambda s, t: None)
    assert optuna_log.getvalue() == ""
    assert study.trials[0].state == optuna.trial.TrialState.FAIL  # resumable: the trial is closed, not left RUNNING


def test_other_failures_are_still_logged(optuna_log):
    study = optuna.create_study()

    def objective(trial):
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        run_trials(study, objective, 60.0, lambda s, t: None)
    assert "a bug" in optuna_log.getvalue()
