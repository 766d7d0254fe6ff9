"""The GP maths' old module name: it is :mod:`layersearch.proposals` now (below both the Optuna
strategies and SWIFT's on-the-fly optimiser); the names stay importable from here."""

from layersearch.proposals import (  # noqa: F401
    ACQUISITIONS, KERNELS, NOISE_ALPHA, acquisition_scores, continuous_optima, discretize, fit_gp, make_acquisition,
    neighbours, propose_bits, standardize,
)
