"""The Optuna search space of a skip mask: one binary parameter per sub-layer.

Every strategy, the study module and the dashboard rely on this convention, so it lives in
one place. A decoder with ``L`` layers has ``2L`` parameters in interleaved order
(the same order as :meth:`SkipMask.to_flat`)::

    attn_00, mlp_00, attn_01, mlp_01, ..., attn_{L-1}, mlp_{L-1}

each an ``IntDistribution(0, 1)`` where 1 means "skipped". Indices are zero-padded to two
digits, or to as many as the largest index needs (three when ``L > 100``), so the names sort
in layer order in the dashboard.
"""

from __future__ import annotations

from typing import Mapping

import optuna
from optuna.distributions import BaseDistribution, IntDistribution

from layersearch.checks import check_int
from layersearch.errors import LayersearchError
from layersearch.mask import SkipMask

ATTENTION_PREFIX = "attn"
MLP_PREFIX = "mlp"


def param_names(num_layers: int) -> tuple[str, ...]:
    """The 2L parameter names in interleaved order: ``attn_00, mlp_00, attn_01, ...``."""
    _check_num_layers(num_layers)
    width = max(2, len(str(num_layers - 1)))
    names: list[str] = []
    for layer in range(num_layers):
        names.append(f"{ATTENTION_PREFIX}_{layer:0{width}d}")
        names.append(f"{MLP_PREFIX}_{layer:0{width}d}")
    return tuple(names)


def search_space(num_layers: int) -> dict[str, BaseDistribution]:
    """The full search space: every name of :func:`param_names` mapped to ``IntDistribution(0, 1)``."""
    return {name: IntDistribution(0, 1) for name in param_names(num_layers)}


def suggest_mask(trial: optuna.trial.BaseTrial, num_layers: int) -> SkipMask:
    """Ask ``trial`` for every sub-layer in interleaved order and return the mask it chose."""
    flat = [trial.suggest_int(name, 0, 1) for name in param_names(num_layers)]
    return SkipMask.from_flat(flat)


def mask_from_params(params: Mapping[str, int], num_layers: int) -> SkipMask:
    """The mask that a trial's ``params`` describe (other parameters are ignored)."""
    return SkipMask.from_flat(flat_from_params(params, num_layers))


def flat_from_params(params: Mapping[str, int], num_layers: int) -> tuple[int, ...]:
    """The interleaved 0/1 vector of length 2L held in ``params``; raises if one is missing or not 0/1."""
    names = param_names(num_layers)
    missing = [name for name in names if name not in params]
    if missing:
        raise LayersearchError(
            f"trial parameters lack {len(missing)} of the {len(names)} mask parameters (first: {missing[0]})"
        )
    flat = []
    for name in names:
        value = params[name]
        if isinstance(value, bool) or value not in (0, 1):
            raise LayersearchError(f"mask parameter {name} must be 0 or 1, got {value!r}")
        flat.append(int(value))
    return tuple(flat)


def params_from_mask(mask: SkipMask) -> dict[str, int]:
    """Trial parameters for ``mask`` (what ``study.enqueue_trial`` takes), in interleaved order."""
    return {name: int(skip) for name, skip in zip(param_names(mask.num_layers), mask.to_flat())}


def _check_num_layers(num_layers: int) -> None:
    check_int(num_layers, "num_layers")
