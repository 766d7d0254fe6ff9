"""Strategy ``knapsack``: KnapSpec's knapsack candidates, measured one by one, no search.

KnapSpec's knapsack DP (:func:`layersearch.knapspec.knapsack_masks`) proposes its best
candidate masks (by predicted tokens-per-time on the study's prompts and latency profile, at
the prompts' mean length plus half the generated tokens). The study enqueues them at creation,
measures each with its objective and stops when the queue is empty; random masks only fill
unexpected gaps. The candidates need the model, so this strategy has ``needs_model``; the
KnapSpec package is imported only when they are made.

In the ``plans`` space the candidates are plans: KnapSpec's knapsack becomes a multiple-choice
knapsack, each sub-layer full, int8, int4 or skipped at its profiled cost
(:func:`layersearch.knapspec.knapsack_plans`); the profile must hold int8 timings (int4 is a
choice where it holds int4 timings too).
"""

from __future__ import annotations

from optuna.study import Study

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.strategies.base import Strategy, StrategyInputs
from layersearch.strategies.fixed_ratio_random import RandomMaskSampler
from layersearch.strategies.queue import MEASURED, candidates_left


def candidate_masks(inputs: StrategyInputs) -> tuple[SkipMask, ...]:
    """KnapSpec's candidate masks for the study's model, prompts and profile, best first."""
    if inputs.loaded is None or inputs.profile is None or not inputs.texts:
        raise LayersearchError("strategy 'knapsack' needs the model, prompts and latency profile of a study")
    from layersearch.knapspec import knapsack_masks, knapsack_plans

    tokenizer = inputs.loaded.tokenizer
    ids = [tokenizer(text, return_tensors="pt").input_ids[0] for text in inputs.texts]
    context = int(sum(len(i) for i in ids) / len(ids) + inputs.max_new_tokens / 2)
    make = knapsack_masks if inputs.space == "skips" else knapsack_plans
    return tuple(row[0] for row in make(inputs.loaded.model, inputs.profile, ids, context=context))


def queue_stop_reason(study: Study, rule: object = None) -> str | None:
    """Stop once every enqueued candidate was measured (a COMPLETE or PRUNED trial): a trial
    that failed (an interrupt, a killed worker) measured nothing, and a resumed run enqueues its
    candidate again (:func:`~layersearch.strategies.queue.requeue_unmeasured`)."""
    if candidates_left(study):
        return None
    if study.get_trials(deepcopy=False, states=MEASURED):
        return "every enqueued candidate mask was measured"
    return "the strategy proposed no candidate mask"


STRATEGY = Strategy(
    name="knapsack",
    summary="KnapSpec knapsack candidates, each measured once; skip count free",
    sampler=lambda *, num_layers, skip_ratio, seed, space="skips": RandomMaskSampler(
        num_layers=num_layers, seed=seed, space=space
    ),
    initial_masks=candidate_masks,
    stop_reason=queue_stop_reason,
    needs_model=True,
    objective="tpt",
)
