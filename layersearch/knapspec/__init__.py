"""KnapSpec (ICML 2026): draft sub-network selection as a 0/1 knapsack over sub-layers.

Pieces, in pipeline order:

* :mod:`~layersearch.knapspec.weights` -- items (2L decoupled sub-layers, or L bound layers as
  CLaSp does) and their integer latency weights at a context length from a
  :class:`~layersearch.profiling.profile.LatencyProfile` (slower type ``min(round(ratio), 5)``, other 1).
* :mod:`~layersearch.knapspec.sublayers` -- reference windows (last tokens + the target's KV
  cache before them, read-only) and a runner executing single sub-layers on batches of states.
* :mod:`~layersearch.knapspec.dp` -- candidate sets, one mask per budget: the hidden-state DP
  (:func:`candidates_hidden_dp`) and the per-item-value knapsack (:func:`candidates_item_values`,
  by the numba :func:`~layersearch.knapspec.solver.solve_all_budgets`), and draft plans
  (:func:`candidates_plans`: each sub-layer skipped, int4, int8 or full, by the multiple-choice
  knapsack of :mod:`~layersearch.knapspec.mckp`).
* :mod:`~layersearch.knapspec.select` -- alpha by top-1 agreement and the TPT grid search
  (:func:`choose_tpt`), a reusable :class:`KnapSpecSelector`, and :func:`knapsack_masks` /
  :func:`knapsack_plans` for studies.

The runtime mode that re-selects while decoding is :mod:`layersearch.knapspec.controller`
(a controller of the decode loop).
"""

from layersearch.knapspec.dp import (
    TAU, Candidate, DPResult, candidates_hidden_dp, candidates_item_values, candidates_plans, int4_importance, int8_importance, item_importance,
    plan_costs,
)
from layersearch.knapspec.select import (
    PAPER_MAX_DRAFT,
    Choice,
    KnapSpecConfig,
    KnapSpecSelector,
    alphas_from_states,
    choose_tpt,
    knapsack_masks,
    knapsack_plans,
    spread_indices,
)
from layersearch.knapspec.sublayers import (
    PerTokenInt8Linear,
    ReferenceWindow,
    SubLayerRunner,
    mean_cosine,
    window_from_cache,
    window_from_prompt,
)
from layersearch.knapspec.weights import (
    MAX_RATIO,
    Group,
    build_groups,
    default_max_budget,
    integer_weights,
    mask_from_groups,
    mask_weight,
    profile_weights,
)

__all__ = [
    "PAPER_MAX_DRAFT",
    "MAX_RATIO",
    "TAU",
    "Candidate",
    "Choice",
    "DPResult",
    "Group",
    "KnapSpecConfig",
    "KnapSpecSelector",
    "PerTokenInt8Linear",
    "ReferenceWindow",
    "SubLayerRunner",
    "alphas_from_states",
    "build_groups",
    "candidates_hidden_dp",
    "candidates_item_values",
    "candidates_plans",
    "choose_tpt",
    "default_max_budget",
    "int4_importance",
    "int8_importance",
    "integer_weights",
    "item_importance",
    "knapsack_masks",
    "knapsack_plans",
    "mask_from_groups",
    "mask_weight",
    "mean_cosine",
    "plan_costs",
    "profile_weights",
    "spread_indices",
    "window_from_cache",
    "window_from_prompt",
]
