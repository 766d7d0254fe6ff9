"""The Optuna search spaces of a draft: skip masks (``skips``) and draft plans (``plans``).

Every strategy, the study module and the dashboard rely on this convention, so it lives in
one place. A decoder with ``L`` layers has ``2L`` skip parameters in interleaved order
(the same order as :meth:`SkipMask.to_flat`)::

    attn_00, mlp_00, attn_01, mlp_01, ..., attn_{L-1}, mlp_{L-1}

each an ``IntDistribution(0, 1)`` where 1 means "skipped". Indices are zero-padded to two
digits, or to as many as the largest index needs (three when ``L > 100``), so the names sort
in layer order in the dashboard. That is the whole ``skips`` space, every paper's space.

The ``plans`` space (:data:`PLANS`, opt-in per study: ``space="plans"``) adds
what a draft plan gives a sub-layer it keeps, and the LM head::

    attn_00_precision, mlp_00_precision, ..., head_precision

each a ``CategoricalDistribution(("full", "int8", "int4"))``. A plan is the 2L skip switches, then a
precision for each sub-layer (read only where the sub-layer is kept: a skipped sub-layer has no
precision), then the head's. Why this encoding and not one three-way categorical per sub-layer
or a skip set plus one precision level:

* The skip parameters keep their names and meaning, so a skip mask is the plan whose
  precisions are all ``full``: a skip-only study's trials read the same in either space, the
  papers' presets keep exactly their space, and dashboards and plots of the skip switches
  stay as they are.
* Every combination of values is a valid plan (there is no "skipped and int8" to exclude), so
  a sampler needs no constraint: the GP strategies relax the whole vector to ``[0, 1]^d`` as
  Self-SD does, and SWIFT keeps its exact skip count on the skip switches alone.
* A precision per sub-layer, not one level for all kept ones: the measured gain of a plan over
  the uniform int8 self-draft comes from keeping in full precision the few sub-layers whose
  int8 twin costs agreement (the MLP down projections: 0.969 -> 0.990), which one
  level cannot express.

Numeric encoding (what the GP strategies fit, :func:`plan_bits`): a vector of ``6L + 2``
bits, the 2L skip bits, then 2L int8 bits (1 = int8), 2L int4 bits (1 = int4), then the head's
int8 and int4 bits: two bits per kept sub-layer, one per low-bit precision, so the GP sees int8
and int4 as two directions rather than one ordered level. A plan sets at most one of them
(a skipped sub-layer none: :func:`params_from_mask` writes ``full`` there), so equal plans have
equal vectors; a relaxed vector with both set reads as int4 (every vector is a plan).

Studies made before int4 (:data:`PLANS_INT8`). Optuna stores each trial's distributions, and a
categorical's choices may not change within a study, so a ``plans`` study whose trials hold
``("full", "int8")`` precisions keeps that space when it resumes: :func:`stored_space` reads
it from the trials, and such a study searches int8 plans (``4L + 1`` bits) as it always did.
New ``plans`` studies search full, int8 and int4.
"""

from __future__ import annotations

from typing import Any, Mapping

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from layersearch.common.checks import check_int
from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.swift.proposals import SPACE_QUANTS as _SPACE_QUANTS
from layersearch.swift.proposals import mask_from_plan_bits, plan_bits, plan_width  # noqa: F401  (the space's vectors; also named here)

ATTENTION_PREFIX = "attn"
MLP_PREFIX = "mlp"
#: The two search spaces: ``skips`` (skip masks, every paper's) and ``plans`` (draft plans).
SKIPS, PLANS = "skips", "plans"
SPACES = (SKIPS, PLANS)
#: The ``plans`` space of studies made before int4 (precisions full and int8): never chosen, read from a study's trials.
PLANS_INT8 = "plans-int8"
#: The low-bit precisions each space gives a kept sub-layer and the head (SWIFT's search reads them too).
SPACE_QUANTS = _SPACE_QUANTS
#: Suffix of a sub-layer's precision parameter, and the head's parameter (``plans`` only).
PRECISION_SUFFIX = "_precision"
HEAD_PARAM = "head_precision"
#: A kept sub-layer's (and the head's) precisions in the ``plans`` space, in index order.
PRECISION_CHOICES = ("full", "int8", "int4")


def check_space(space: Any) -> str:
    """``space`` if it is one of :data:`SPACES` (or a resumed study's :data:`PLANS_INT8`); a
    LayersearchError naming them otherwise."""
    if space not in SPACE_QUANTS:
        raise LayersearchError(f"search space must be one of {', '.join(SPACES)}, got {space!r}")
    return space


def is_plan_space(space: str) -> bool:
    """True for a space of draft plans (``plans``, or a study's older ``plans-int8``)."""
    return bool(SPACE_QUANTS[check_space(space)])


def precision_choices(space: str = PLANS) -> tuple[str, ...]:
    """The precision categoricals' choices in ``space``: ``full`` and its low-bit precisions."""
    return ("full", *SPACE_QUANTS[check_space(space)])


def space_bits(mask: SkipMask, space: str) -> Any:
    """``mask``'s numeric vector in ``space``: its flat skips (``skips``) or its plan vector."""
    if not is_plan_space(space):
        return mask.to_flat()
    return plan_bits(mask, SPACE_QUANTS[space])


def mask_from_space_bits(bits: Any, num_layers: int, space: str) -> SkipMask:
    """Inverse of :func:`space_bits` (every vector of the right width is a mask)."""
    if not is_plan_space(space):
        return SkipMask.from_flat([int(b) for b in bits])
    return mask_from_plan_bits(bits, num_layers, SPACE_QUANTS[space])


def stored_space(study: Any, space: str) -> str:
    """The space a stored study searches: ``space`` from its settings, except a ``plans`` study
    whose trials hold the two-precision categoricals of studies made before int4 (``plans-int8``)."""
    if space != PLANS:
        return space
    for trial in study.get_trials(deepcopy=False):
        distribution = trial.distributions.get(HEAD_PARAM)
        if isinstance(distribution, CategoricalDistribution):
            return PLANS if tuple(distribution.choices) == PRECISION_CHOICES else PLANS_INT8
    return PLANS


def param_names(num_layers: int) -> tuple[str, ...]:
    """The 2L skip parameter names in interleaved order: ``attn_00, mlp_00, attn_01, ...``."""
    _check_num_layers(num_layers)
    width = max(2, len(str(num_layers - 1)))
    names: list[str] = []
    for layer in range(num_layers):
        names.append(f"{ATTENTION_PREFIX}_{layer:0{width}d}")
        names.append(f"{MLP_PREFIX}_{layer:0{width}d}")
    return tuple(names)


def precision_names(num_layers: int) -> tuple[str, ...]:
    """The 2L precision parameter names of the plan space (``attn_00_precision, ...``), then the head's."""
    return (*(name + PRECISION_SUFFIX for name in param_names(num_layers)), HEAD_PARAM)


def space_names(num_layers: int, space: str = SKIPS) -> tuple[str, ...]:
    """Every parameter name of ``space``: the skip switches, and for plans the precisions."""
    if not is_plan_space(space):
        return param_names(num_layers)
    return (*param_names(num_layers), *precision_names(num_layers))


def search_space(num_layers: int, space: str = SKIPS) -> dict[str, BaseDistribution]:
    """The full search space: each skip switch an ``IntDistribution(0, 1)``; for ``plans`` also each
    precision a ``CategoricalDistribution(("full", "int8", "int4"))`` (``plans-int8``: full, int8)."""
    distributions: dict[str, BaseDistribution] = {name: IntDistribution(0, 1) for name in param_names(num_layers)}
    if is_plan_space(space):
        choices = precision_choices(space)
        distributions.update({name: CategoricalDistribution(choices) for name in precision_names(num_layers)})
    return distributions


def space_of_params(params: Mapping[str, Any]) -> str:
    """The space a trial's ``params`` were drawn from: ``plans`` when they hold precisions."""
    return PLANS if HEAD_PARAM in params else SKIPS


def suggest_mask(trial: optuna.trial.BaseTrial, num_layers: int, space: str = SKIPS) -> SkipMask:
    """Ask ``trial`` for every parameter of ``space`` in order and return the mask (plan) it chose."""
    params: dict[str, Any] = {name: trial.suggest_int(name, 0, 1) for name in param_names(num_layers)}
    if is_plan_space(space):
        choices = precision_choices(space)
        params.update({name: trial.suggest_categorical(name, choices) for name in precision_names(num_layers)})
    return mask_from_params(params, num_layers, space)


def mask_from_params(params: Mapping[str, Any], num_layers: int, space: str | None = None) -> SkipMask:
    """The mask (plan) that a trial's ``params`` describe (other parameters are ignored).

    ``space`` None reads the space from the parameters (:func:`space_of_params`), so a trial
    of either kind of study exports as what it measured."""
    space = space_of_params(params) if space is None else check_space(space)
    flat = flat_from_params(params, num_layers)
    if space == SKIPS:
        return SkipMask.from_flat(flat)
    return mask_from_params_precisions(flat, _precisions(params, num_layers), num_layers)


def mask_from_params_precisions(flat: tuple[int, ...], precisions: tuple[str, ...], num_layers: int) -> SkipMask:
    """The plan of 2L skip switches and the 2L + 1 precision names (a skipped sub-layer's ignored)."""
    chosen = {quant: [(item // 2, item % 2) for item in range(2 * num_layers)
                      if not flat[item] and precisions[item] == quant] for quant in ("int8", "int4")}
    plan = SkipMask.from_flat(flat)
    for quant, items in chosen.items():
        plan = getattr(plan, f"with_{quant}")([i for i, mlp in items if not mlp], [i for i, mlp in items if mlp],
                                               precisions[-1] == quant)
    return plan


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


def _precisions(params: Mapping[str, Any], num_layers: int) -> tuple[str, ...]:
    """The 2L + 1 precision names of a plan's precision parameters; raises on a missing or bad one."""
    names = precision_names(num_layers)
    missing = [name for name in names if name not in params]
    if missing:
        raise LayersearchError(
            f"trial parameters lack {len(missing)} of the {len(names)} precision parameters (first: {missing[0]})"
        )
    bits = []
    for name in names:
        value = params[name]
        if not isinstance(value, str) or value not in PRECISION_CHOICES:
            raise LayersearchError(f"precision parameter {name} must be full, int8 or int4, got {value!r}")
        bits.append(value)
    return tuple(bits)


def params_from_mask(mask: SkipMask, space: str | None = None) -> dict[str, Any]:
    """Trial parameters for ``mask`` in ``space`` (what ``study.enqueue_trial`` takes), in order.

    ``space`` None: ``plans`` for a plan with low-bit parts, ``skips`` for a skip mask. A skipped
    sub-layer's precision is ``full`` (it has none), so every plan has one set of parameters."""
    space = (SKIPS if mask.is_skip_only else PLANS) if space is None else check_space(space)
    params: dict[str, Any] = {name: int(skip) for name, skip in zip(param_names(mask.num_layers), mask.to_flat())}
    if space == SKIPS:
        if not mask.is_skip_only:
            raise LayersearchError("a plan with int8 or int4 sub-layers or head is outside the skip-mask search space "
                                   "(create the study with space 'plans')", fields="space")
        return params
    if space == PLANS_INT8 and mask.has_int4:
        raise LayersearchError("this study's plans space was made before int4 (precisions full and int8): "
                               "a plan with int4 parts is outside it", fields="space")
    kinds = [("attention", i // 2) if i % 2 == 0 else ("mlp", i // 2) for i in range(2 * mask.num_layers)]
    names = precision_names(mask.num_layers)
    values = [("full" if mask.precision(kind, i) == "skip" else mask.precision(kind, i)) for kind, i in kinds]
    params.update({name: value for name, value in zip(names, [*values, mask.head_precision])})
    return params


def vector_width(num_layers: int, space: str = SKIPS) -> int:
    """Length of a mask's numeric vector in ``space``: 2L, or 6L + 2 for plans (4L + 1 for ``plans-int8``)."""
    if not is_plan_space(space):
        return 2 * num_layers
    return plan_width(num_layers, SPACE_QUANTS[space])


def _check_num_layers(num_layers: int) -> None:
    check_int(num_layers, "num_layers")
