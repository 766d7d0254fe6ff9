"""Strategy ``tpe``: Optuna's Tree-structured Parzen Estimator over the 2L binary switches.

A plain ``TPESampler(seed=seed)`` with Optuna's defaults (10 random startup trials, independent
per-parameter densities). There is no skip-ratio constraint: the skipped count is whatever TPE
finds worth it, so the objective has to price the draft's cost (e.g. tokens/s, not matchness).
Note that Optuna's startup draws come from a stream seeded at construction: a study resumed
within its first 10 trials with the same seed repeats the startup masks of its first trials.
In the ``plans`` space TPE models the precision categoricals with its categorical kernel;
the study's objective asks for them (:func:`~layersearch.strategies.space.suggest_mask`), so
the sampler itself needs no space.
"""

from __future__ import annotations

import optuna

from layersearch.strategies.base import Strategy


def make_tpe_sampler(*, seed: int | None = None) -> optuna.samplers.TPESampler:
    """Optuna's TPE sampler with its defaults."""
    return optuna.samplers.TPESampler(seed=seed)


STRATEGY = Strategy(
    name="tpe",
    summary="Optuna's TPESampler; skip count free",
    sampler=lambda *, num_layers, skip_ratio, seed, space="skips": make_tpe_sampler(seed=seed),
    stream_seeded=True,
)
