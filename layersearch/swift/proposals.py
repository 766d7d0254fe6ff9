"""Proposals of 0/1 mask vectors without Optuna: random fixed-count subsets, and the
Gaussian-process maths (BoTorch/GPyTorch) behind ``selfsd-bo`` and SWIFT's BO steps.

It sits below both users: the Optuna strategies (:mod:`layersearch.strategies`) and SWIFT's
on-the-fly optimiser (:mod:`layersearch.swift.controller`), which must not pull Optuna in.

One function, :func:`propose_bits`, takes the evaluated masks as 0/1 rows and their values
(to maximize) and returns the next 0/1 mask:

1. Fit a GP to the observations. Values are standardized and observed with a fixed noise
   variance ``alpha = 1e-2``, Self-SD's setting for ``bayes_opt`` (whose GP also adds alpha to
   the diagonal of the kernel on normalized values). The kernel is BoTorch's default for
   ``SingleTaskGP`` (RBF with one lengthscale per sub-layer and a dimension-scaled prior), which
   stays well-behaved with 2L = 50..160 inputs and few observations.
2. Maximize the acquisition (log expected improvement or UCB) over the continuous relaxation
   ``[0, 1]^d`` with a few L-BFGS restarts, as Self-SD and SWIFT do.
3. Map each restart's optimum to a mask: skip where ``x > 0.5`` (Self-SD), or skip the ``count``
   largest coordinates when the strategy promises an exact count (SWIFT's top-k).
4. Refine on the discrete space: score those masks and their one-move neighbours (one flip,
   or one swap of a skipped and a kept sub-layer under a count) with the acquisition and keep
   the best one not yet evaluated. Without this step the rounded optimum is often a mask
   already in the history, and re-measuring it wastes a trial.

Draft plans are 0/1 vectors too: :func:`plan_bits` lays a plan out as ``6L + 2``
bits (the 2L skips, 2L int8 bits, 2L int4 bits, the head's int8 and int4 bits; ``4L + 1``
without int4, for studies made before it) and :func:`mask_from_plan_bits` reads
one back; every such vector is a plan, so the same maths proposes them.

Imports of torch and BoTorch stay inside the functions: importing a strategy module must be
cheap for the CLI and for strategies that never fit a GP.
"""

from __future__ import annotations

import math
import threading
import warnings
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

from layersearch.masks.mask import SkipMask

#: Observation noise variance on standardized values (Self-SD's GP ``alpha``).
NOISE_ALPHA = 1e-2
#: L-BFGS restarts and the random points screened to start them, per proposal.
NUM_RESTARTS = 4
RAW_SAMPLES = 128
ACQUISITIONS = ("logei", "ucb")
#: ``rbf``: BoTorch's default (one lengthscale per input); ``matern-2.5``: bayes_opt's GP
#: (sklearn's isotropic Matern, nu = 2.5, on standardized values), what Self-SD's code used.
KERNELS = ("rbf", "matern-2.5")
_CHUNK = 1024  # pool rows scored per posterior (bounds the lazy covariance's memory)
_TORCH_THREADS_LOCK = threading.Lock()


def propose_bits(
    x: np.ndarray,
    y: np.ndarray,
    *,
    acquisition: str,
    seed: int,
    count: int | None = None,
    kappa: float = 2.5,
    kernel: str = "rbf",
    free: int = 0,
) -> np.ndarray:
    """The next 0/1 vector to evaluate given rows ``x`` [n, d] with values ``y`` [n] (maximized).

    ``acquisition`` is ``"logei"`` or ``"ucb"`` (mean + kappa * std); with ``count`` the result has
    exactly ``count`` ones among its first ``d - free`` coordinates (the last ``free`` ones, a
    draft plan's precisions, are rounded at 0.5 and flipped alone); ``kernel`` one of
    :data:`KERNELS`. Deterministic for a seed. Needs at least two observations.
    """
    import torch

    from layersearch.common.extras import require_extras

    require_extras("search")  # BoTorch and GPyTorch: one line naming the install when missing
    from botorch.utils.sampling import manual_seed

    if acquisition not in ACQUISITIONS:
        raise ValueError(f"acquisition must be one of {ACQUISITIONS}, got {acquisition!r}")
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if len(x) < 2:
        raise ValueError("a GP proposal needs at least two observations")
    d = x.shape[1]
    if not 0 <= free <= d:
        raise ValueError(f"free must be in 0..{d}, got {free}")
    if count is not None and not 0 <= count <= d - free:
        raise ValueError(f"count must be in 0..{d - free}, got {count}")
    with _autograd_on(), _single_thread(), manual_seed(seed), warnings.catch_warnings():
        train_x = torch.as_tensor(x, dtype=torch.float64)
        train_y = torch.as_tensor(standardize(y), dtype=torch.float64).unsqueeze(-1)  # [n, 1]
        best_f = float(train_y.max())
        # BoTorch warns about routine numerical jitter and optimizer restarts; they are not
        # actionable for a user of the search.
        warnings.simplefilter("ignore")
        model = fit_gp(train_x, train_y, kernel)
        acq = make_acquisition(model, acquisition, best_f=best_f, kappa=kappa)
        optima = continuous_optima(acq, d)  # [restarts, d]
        starts = np.stack([discretize(row, count, free) for row in optima.numpy()])
        pool = np.unique(np.concatenate([starts, neighbours(starts, count, free)]), axis=0)
        unseen = _drop_seen(pool, x)
        if len(unseen):
            pool = unseen
        # else every candidate was measured already: a repeat beats no proposal at all
        scores = acquisition_scores(model, pool, acquisition, best_f=best_f, kappa=kappa)
    return pool[int(np.argmax(scores))].astype(np.int8)


def standardize(y: np.ndarray) -> np.ndarray:
    """Zero mean, unit variance (a constant history maps to zeros)."""
    y = np.asarray(y, dtype=np.float64)
    std = y.std(ddof=1) if len(y) > 1 else 0.0  # ddof=1: what BoTorch checks
    return (y - y.mean()) / (std if std > 1e-12 else 1.0)


def fit_gp(train_x: Any, train_y: Any, kernel: str = "rbf") -> Any:
    """A ``SingleTaskGP`` with fixed noise ``NOISE_ALPHA``, hyperparameters fitted by marginal likelihood."""
    import torch
    from botorch.exceptions import ModelFittingError
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from gpytorch.mlls import ExactMarginalLogLikelihood

    noise = torch.full_like(train_y, NOISE_ALPHA)
    # Values are already standardized here, so no outcome transform (it would rescale alpha).
    covar = None
    if kernel == "matern-2.5":
        from gpytorch.kernels import MaternKernel

        covar = MaternKernel(nu=2.5)  # one lengthscale, unit amplitude: sklearn's Matern(nu=2.5)
    model = SingleTaskGP(train_x, train_y, train_Yvar=noise, covar_module=covar, outcome_transform=None)
    try:
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    except ModelFittingError:
        pass  # keep the prior's hyperparameters: a rough GP still ranks candidates usefully
    model.eval()
    return model


def make_acquisition(model: Any, name: str, *, best_f: float, kappa: float) -> Any:
    """Analytic log-EI (``"logei"``) or UCB with ``beta = kappa**2`` (``"ucb"``)."""
    from botorch.acquisition.analytic import LogExpectedImprovement, UpperConfidenceBound

    if name == "logei":
        return LogExpectedImprovement(model, best_f=best_f)
    # BoTorch's UCB is mean + sqrt(beta) * std; bayes_opt's kappa multiplies the std directly.
    return UpperConfidenceBound(model, beta=kappa**2)


def continuous_optima(acq: Any, d: int) -> Any:
    """Local maxima of ``acq`` over ``[0, 1]^d``, one per restart: tensor [restarts, d]."""
    import torch
    from botorch.optim import optimize_acqf

    bounds = torch.stack([torch.zeros(d, dtype=torch.float64), torch.ones(d, dtype=torch.float64)])
    candidates, _ = optimize_acqf(
        acq, bounds=bounds, q=1, num_restarts=NUM_RESTARTS, raw_samples=RAW_SAMPLES, return_best_only=False
    )
    return candidates.detach().reshape(-1, d)


def acquisition_scores(model: Any, pool: np.ndarray, name: str, *, best_f: float, kappa: float) -> np.ndarray:
    """The acquisition of each 0/1 row of ``pool`` [m, d] (same values as :func:`make_acquisition`'s).

    Computed from one joint posterior per chunk: BoTorch's analytic acquisitions take one
    t-batch per point, ten times slower for the thousands of swap neighbours of a large model.
    """
    import torch

    scores = []
    with torch.no_grad():
        for chunk in np.array_split(pool, max(1, -(-len(pool) // _CHUNK))):
            posterior = model.posterior(torch.as_tensor(chunk, dtype=torch.float64))
            mean = posterior.mean.squeeze(-1)  # [chunk]
            sigma = posterior.variance.squeeze(-1).clamp_min(1e-18).sqrt()  # [chunk]
            scores.append(_ucb(mean, sigma, kappa) if name == "ucb" else _log_ei(mean, sigma, best_f))
    return torch.cat(scores).numpy()


def _ucb(mean: Any, sigma: Any, kappa: float) -> Any:
    return mean + kappa * sigma


def _log_ei(mean: Any, sigma: Any, best_f: float) -> Any:
    """log E[max(f - best_f, 0)] = log sigma + log h(u), h(u) = u Phi(u) + phi(u), u = (mean - best_f) / sigma.

    Below the incumbent h(u) is a difference of nearly equal terms; there it is computed as
    phi(u) * (1 + u * Mills(u)) with the scaled complementary error function, which keeps the
    ranking of unlikely candidates (what BoTorch's LogEI does with its own expansion).
    """
    import torch

    u = (mean - best_f) / sigma
    log_phi = -0.5 * u**2 - 0.5 * math.log(2 * math.pi)
    direct = torch.log(u * torch.special.ndtr(u) + torch.exp(log_phi))
    mills = math.sqrt(math.pi / 2) * torch.special.erfcx(-u / math.sqrt(2))  # Phi(u) / phi(u)
    tail = log_phi + torch.log1p(u * mills)
    return torch.log(sigma) + torch.where(u > -1.0, direct, tail)


def discretize(point: np.ndarray, count: int | None, free: int = 0) -> np.ndarray:
    """Skip where ``x > 0.5``, or the ``count`` largest coordinates (ties to the lower index); under
    a count the last ``free`` coordinates are outside it and rounded at 0.5."""
    bits = np.zeros(len(point), dtype=np.int8)
    if count is None:
        bits[point > 0.5] = 1
    else:
        counted = len(point) - free
        bits[np.argsort(-point[:counted], kind="stable")[:count]] = 1
        bits[counted:] = point[counted:] > 0.5
    return bits


def neighbours(rows: np.ndarray, count: int | None, free: int = 0) -> np.ndarray:
    """Every one-move neighbour of each row: single flips, or count-keeping swaps under ``count``
    (among the first ``len - free`` coordinates; the last ``free`` are single flips)."""
    out = []
    for row in rows:
        if count is None:
            flips = np.tile(row, (len(row), 1))
            flips[np.arange(len(row)), np.arange(len(row))] ^= 1
            out.append(flips)
            continue
        counted = len(row) - free
        if free:
            flips = np.tile(row, (free, 1))
            flips[np.arange(free), counted + np.arange(free)] ^= 1
            out.append(flips)
        on, off = np.flatnonzero(row[:counted]), np.flatnonzero(row[:counted] == 0)
        for i in on:
            swaps = np.tile(row, (len(off), 1))
            swaps[:, i] = 0
            swaps[np.arange(len(off)), off] = 1
            out.append(swaps)
    width = rows.shape[1]
    return np.concatenate(out) if out else np.empty((0, width), dtype=np.int8)


@contextmanager
def _autograd_on() -> Iterator[None]:
    """Autograd on for the GP fit, also when the caller is a decode loop running under
    ``torch.inference_mode`` (SWIFT's on-the-fly optimizer); tensors made inside are normal ones."""
    import torch

    with torch.inference_mode(False), torch.enable_grad():
        yield


@contextmanager
def _single_thread() -> Iterator[None]:
    """Run torch on one thread, then restore the previous setting; one GP proposal at a time.

    The GP's matrices are tiny (n trials x 2L); intra-op threads only add synchronisation,
    and on a busy machine they made a fit 20x slower than one thread. The thread count is
    process-wide, so the lock keeps parallel workers (``n_jobs > 1``) from restoring it
    out of order.
    """
    import torch

    with _TORCH_THREADS_LOCK:
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(before)


def _drop_seen(pool: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """Rows of ``pool`` that are not rows of ``seen``."""
    measured = {row.tobytes() for row in np.asarray(seen, dtype=np.int8)}
    keep = [i for i, row in enumerate(pool.astype(np.int8)) if row.tobytes() not in measured]
    return pool[keep]


# ----- random steps --------------------------------------------------------------------------------
def random_bits(size: int, count: int | None, rng: np.random.Generator) -> np.ndarray:
    """A 0/1 vector of ``size``: exactly ``count`` ones at uniformly random places, or fair coin flips."""
    from layersearch.common.errors import LayersearchError

    if count is None:
        return rng.integers(0, 2, size=size).astype(np.int8)
    if not 0 <= count <= size:
        raise LayersearchError(f"cannot skip {count} of {size} sub-layers")
    bits = np.zeros(size, dtype=np.int8)
    bits[rng.choice(size, size=count, replace=False)] = 1
    return bits


def trial_seed(rng: np.random.Generator) -> int:
    """A 31-bit seed for torch drawn from ``rng`` (keeps torch's draws tied to the trial)."""
    return int(rng.integers(0, 2**31 - 1))


# ----- draft plans as 0/1 vectors ------------------------------------------------------------------
#: The low-bit precisions a plan vector holds bits for, in order (:func:`plan_bits`).
PLAN_QUANTS = ("int8", "int4")
#: The low-bit precisions of each search space (:mod:`layersearch.strategies.space`): the plans
#: space, and the plans space of studies made before int4.
SPACE_QUANTS = {"skips": (), "plans": PLAN_QUANTS, "plans-int8": ("int8",)}


def plan_width(num_layers: int, quants: tuple[str, ...] = PLAN_QUANTS) -> int:
    """Length of a plan vector: 2L skip bits, 2L bits per low-bit precision, a head bit per precision."""
    return 2 * num_layers + len(quants) * (2 * num_layers + 1)


def plan_bits(mask: SkipMask, quants: tuple[str, ...] = PLAN_QUANTS) -> np.ndarray:
    """The plan's :func:`plan_width` bits: 2L skip bits (interleaved, as :meth:`SkipMask.to_flat`),
    then for each precision of ``quants`` (int8, then int4) 2L bits in the same order (0 where
    skipped), then the head's bit for each. ``quants=("int8",)`` is the ``4L + 1`` layout of
    plan studies made before int4."""
    L = mask.num_layers
    bits = np.zeros(plan_width(L, quants), dtype=np.int8)
    bits[: 2 * L] = mask.to_flat()
    for k, quant in enumerate(quants):
        start = 2 * L * (k + 1)
        for i in mask.quantized(quant, "attention"):
            bits[start + 2 * i] = 1
        for i in mask.quantized(quant, "mlp"):
            bits[start + 2 * i + 1] = 1
        bits[2 * L * (len(quants) + 1) + k] = int(getattr(mask, f"{quant}_head"))
    return bits


def mask_from_plan_bits(bits: Any, num_layers: int, quants: tuple[str, ...] = PLAN_QUANTS) -> SkipMask:
    """The plan of a :func:`plan_bits` vector. Every vector is a plan: a skipped sub-layer's
    precision bits are ignored, and where several precisions' bits are set the last of
    ``quants`` wins (int4 over int8: the cheaper twin), for sub-layers and head alike."""
    from layersearch.common.errors import LayersearchError

    bits = [int(b) for b in bits]
    L = num_layers
    if len(bits) != plan_width(L, quants):
        raise LayersearchError(f"a plan vector for {L} layers has {plan_width(L, quants)} bits, got {len(bits)}")
    skips = bits[: 2 * L]
    chosen: dict[str, dict[str, list[int]]] = {quant: {"attention": [], "mlp": []} for quant in quants}
    for item in range(2 * L):
        if skips[item]:
            continue
        set_ = [quant for k, quant in enumerate(quants) if bits[2 * L * (k + 1) + item]]
        if set_:
            chosen[set_[-1]]["mlp" if item % 2 else "attention"].append(item // 2)
    heads = [quant for k, quant in enumerate(quants) if bits[2 * L * (len(quants) + 1) + k]]
    plan = SkipMask.from_flat(skips)
    for quant in quants:
        plan = getattr(plan, f"with_{quant}")(chosen[quant]["attention"], chosen[quant]["mlp"], bool(heads) and heads[-1] == quant)
    return plan
