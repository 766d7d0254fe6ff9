"""Objectives: how a study scores one skip mask on a domain's representative prompts.

An objective is a small class with a name, a direction and one method,
:meth:`Objective.evaluate`, which returns a :class:`Score`: the value the study optimizes and
the trial attributes it records (``mask``, ``M``, ``alpha``, ``skip_ratio``,
``tokens_per_second``, plus what the objective adds). Two modules:

* :mod:`~layersearch.objectives.scoring` -- the scoring rules, pure functions of measured
  statistics (:class:`~layersearch.runtime.stats.DecodeStats`: its M and alpha are the only
  definitions) and a latency profile, and the objective classes applying them;
* :mod:`~layersearch.objectives.measuring` -- the :class:`Runtime` interface objectives reach
  the model through (``decode(mask)``: pooled DecodeStats of the speculative decoder over the
  prompts; ``matchness(mask, gamma)``: SWIFT's parallel draft check) and
  :class:`ModelRuntime`, its implementation on a loaded model; tests can pass a fake.

==================  =========  ===================================================================
name                direction  value
==================  =========  ===================================================================
time-per-token      minimize   wall seconds per generated token of the speculative decoder
                               (Self-SD, swift.txt Eq. 1), pooled over the K prompts
matchness           maximize   share of gamma target tokens the masked draft predicts in one
                               teacher-forced forward (SWIFT, swift.txt Eq. 3-4)
expected-speedup    maximize   the profile's cost of the run's own steps against plain decoding
                               (LatencyProfile.predicted_speedup_of_steps, what bench checks)
tpt                 maximize   KnapSpec tokens per second: LatencyProfile.best_tpt over gamma,
                               alpha from a measured run
==================  =========  ===================================================================

``matchness`` runs no decoding (that is its point: one parallel forward per prompt), so its
trials record ``M``, ``alpha`` and ``tokens_per_second`` as ``None`` unless it is built with
``decode_stats=True``; ``study compare`` measures them for the best mask.
"""

from __future__ import annotations

from layersearch.objectives.measuring import DEFAULT_MAX_NEW_TOKENS, ModelRuntime, Runtime
from layersearch.objectives.scoring import (
    DEFAULT_GAMMA,
    NEEDS_PROFILE,
    OBJECTIVES,
    TRIAL_ATTRS,
    ExpectedSpeedup,
    MatchMeasurement,
    Matchness,
    Objective,
    Score,
    TimePerToken,
    TokensPerTime,
    check_objective,
    make_objective,
    objective_direction,
)

#: Representative prompts per study unless told otherwise.
DEFAULT_SAMPLES = 8

__all__ = [
    "DEFAULT_GAMMA",
    "DEFAULT_MAX_NEW_TOKENS",
    "DEFAULT_SAMPLES",
    "ExpectedSpeedup",
    "MatchMeasurement",
    "Matchness",
    "ModelRuntime",
    "NEEDS_PROFILE",
    "OBJECTIVES",
    "Objective",
    "Runtime",
    "Score",
    "TRIAL_ATTRS",
    "TimePerToken",
    "TokensPerTime",
    "check_objective",
    "make_objective",
    "objective_direction",
]
