"""The draft plans a tune study chooses among, made before the search.

Uniform masks at several ratios, plus the best masks of a short matchness search by the
registry's strategies (SWIFT's random-subset + GP-UCB sampler at two skip ratios) on the
train prompts; and, where the latency profile timed int8 sub-layers (CPU, float32), the int8
self-draft plans: the whole model in int8 (:data:`INT8_RATIOS` 0) and the uniform masks with
every kept sub-layer and the head in int8; likewise in int4 where it timed int4 twins
(:data:`INT4_RATIOS`). The latency profile then prices each one: a mask whose draft is too slow to pay
even when every draft token is accepted is dropped before anything is decoded, and the rest
are ranked by the speedup the profile predicts at their matchness (SWIFT's stand-in for the
acceptance rate). Matchness runs one teacher-forced forward per prompt, so the pre-search
costs a small share of the budget; with a ``deadline`` (the tune budget's end) no mask is scored
after it, and a pool cut short holds the masks scored by then.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from layersearch.masks.mask import SkipMask

UNIFORM_RATIOS = (0.1, 0.15, 0.2, 0.3, 0.45)
#: Skip ratios of the int8 self-draft plans (0: nothing skipped, every sub-layer int8).
INT8_RATIOS = (0.0, 0.1)
#: Skip ratios of the int4 self-draft plans, where the profile costs int4 twins (a GPU's profile:
#: tinygemm; on a CPU the emulation costs more than a forward, so the profile prunes them).
INT4_RATIOS = (0.0, 0.25)
#: (strategy, skip ratio) of each short matchness search; the time is shared equally.
PRESEARCH = (("swift", 0.15), ("swift", 0.3))
BEST_PER_SEARCH = 3
POOL_SIZE = 8
#: The least speedup a mask must promise at acceptance 1 to be decoded at all (below it the gain
#: would drown in the measurement noise of a shared machine even if every draft were accepted).
MIN_CEILING = 1.05


@dataclass(frozen=True)
class Candidate:
    """One mask of the pool with what was known of it before any decoding."""

    label: str
    mask: SkipMask
    matchness: float  # share of the target's next tokens the masked draft predicts (train prompts)
    ceiling: float  # the profile's speedup at acceptance 1 (best draft length)
    predicted: float  # the profile's speedup at acceptance = matchness (best draft length)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (a study attribute, so a resumed study chooses among the same masks)."""
        return {"label": self.label, "mask": self.mask.to_dict(), "matchness": self.matchness,
                "ceiling": self.ceiling, "predicted": self.predicted}

    @classmethod
    def from_dict(cls, data: Any) -> "Candidate":
        """The candidate :meth:`to_dict` wrote."""
        return cls(data["label"], SkipMask.from_dict(data["mask"]), float(data["matchness"]),
                   float(data["ceiling"]), float(data["predicted"]))


def predicted_speedup(profile: Any, mask: SkipMask, acceptance: float, context: int) -> float:
    """The profile's best speedup over plain decoding for ``mask`` at ``acceptance``: KnapSpec's
    tokens per second at the best draft length, in units of plain decoding's tokens per second."""
    tokens_per_second, _ = profile.best_tpt(min(max(acceptance, 0.0), 1.0), mask, context, max_draft=16)
    return tokens_per_second * profile.target_seconds(context)


def candidate_pool(
    loaded: Any, texts: Sequence[str], profile: Any, context: int, seconds: float, *, seed: int = 0,
    size: int = POOL_SIZE, say: Callable[[str], None] = lambda message: None, deadline: float | None = None,
) -> tuple[Candidate, ...]:
    """At most ``size`` distinct masks worth decoding, best predicted first (empty when none can pay).
    ``seconds``: the pre-searches' time; ``deadline`` (``time.monotonic()``): none scores a mask after it.

    The profile prices a mask before anything runs: a uniform mask whose ceiling (its speedup at
    acceptance 1) is below :data:`MIN_CEILING` is dropped unscored, and a pre-search is skipped
    when the uniform mask at its skip ratio cannot pay (the profile costs sub-layer counts, so that
    mask stands for every mask the search would propose at that ratio)."""
    from layersearch.objectives import Matchness, ModelRuntime

    info = loaded.info
    runtime = ModelRuntime.from_texts(loaded, texts, warm_up=False)
    objective = Matchness()
    pays = lambda mask: not mask.is_empty and predicted_speedup(profile, mask, 1.0, context) >= MIN_CEILING  # noqa: E731
    found: dict[str, SkipMask] = {}
    for ratio in UNIFORM_RATIOS:
        _add(found, f"uniform {ratio:g}", SkipMask.uniform(info.num_layers, ratio, info))
    if getattr(profile, "has_int8", False):  # the profile can cost int8 plans: the model drafts for itself in int8
        for ratio in INT8_RATIOS:
            _add(found, f"int8 uniform {ratio:g}", SkipMask.uniform(info.num_layers, ratio, info).kept_in_int8())
    if getattr(profile, "has_int4", False):  # and in int4, in the groups the model's widths take
        from layersearch.models.int4 import fit_group_size

        for ratio in INT4_RATIOS:
            plan = SkipMask.uniform(info.num_layers, ratio, info).kept_in_int4()
            _add(found, f"int4 uniform {ratio:g}", fit_group_size(plan, loaded.model))
    left = (lambda: float("inf")) if deadline is None else (lambda: deadline - time.monotonic())  # noqa: E731
    paying = [label for label, mask in found.items() if pays(mask)]
    scores: dict[str, float] = {}
    for label in paying:
        if left() <= 0:
            break  # the budget is spent: the rest stay unscored, out of the pool
        scores[label] = objective.evaluate(runtime, found[label]).value
    unscored = len(paying) - len(scores)
    searches = [(s, r) for s, r in PRESEARCH if pays(SkipMask.uniform(info.num_layers, r, info))]
    spent = left() <= 0
    share = min(seconds, left())
    for strategy, ratio in searches if not spent else ():
        for label, mask, value in _search(runtime, objective, strategy, ratio, share / len(searches), seed):
            if _add(found, label, mask) and pays(mask):
                scores[label] = value
    kept = sorted((Candidate(label, found[label].with_provenance(label=label), value,
                             predicted_speedup(profile, found[label], 1.0, context),
                             predicted_speedup(profile, found[label], value, context))
                   for label, value in scores.items()), key=lambda c: -c.predicted)[:size]
    say(f"mask pool: {len(found)} masks, {len(found) - len(scores) - unscored} pruned by the profile "
        f"(< {MIN_CEILING:g}x even at acceptance 1), {len(kept)} kept"
        + (f"; the budget ran out before {unscored} were scored" if unscored else "")
        + ("; no pre-search (the budget was spent)" if searches and spent else ""))
    return tuple(kept)


def _add(found: dict[str, SkipMask], label: str, mask: SkipMask) -> bool:
    """Add ``mask`` under ``label`` unless an equal plan is there already; whether it was added."""
    if any(_sublayers(mask) == _sublayers(other) for other in found.values()):
        return False
    found[label] = mask
    return True


def _sublayers(mask: SkipMask) -> tuple:
    """What a plan does with each sub-layer and the head (its model and provenance aside)."""
    return (mask.attention, mask.mlp, mask.int8_attention, mask.int8_mlp, mask.int8_head,
            mask.int4_attention, mask.int4_mlp, mask.int4_head, mask.int4_group_size if mask.has_int4 else None)


def _search(runtime: Any, objective: Any, strategy: str, ratio: float, seconds: float, seed: int) -> list[tuple[str, SkipMask, float]]:
    """The best masks of a short in-memory matchness study by ``strategy`` at ``ratio``."""
    import optuna

    from layersearch.strategies import initial_masks, make_sampler, mask_from_params, params_from_mask, suggest_mask
    from layersearch.study.interrupts import no_interrupt_tracebacks

    layers = runtime.info.num_layers
    study = optuna.create_study(direction="maximize", sampler=make_sampler(strategy, num_layers=layers, skip_ratio=ratio, seed=seed))
    for mask in initial_masks(strategy, num_layers=layers, skip_ratio=ratio):
        study.enqueue_trial(params_from_mask(mask))
    deadline = time.monotonic() + seconds
    # At least one mask (the strategy's start, where it has one), however short the budget.
    with no_interrupt_tracebacks():  # Ctrl-C here too: "interrupted", not Optuna's traceback of the trial it stopped
        while not study.trials or time.monotonic() < deadline:
            study.optimize(lambda trial: objective.evaluate(runtime, suggest_mask(trial, layers)).value, n_trials=1)
    done = sorted(((t.value, t) for t in study.trials if t.value is not None), key=lambda pair: -pair[0])
    best: list[tuple[str, SkipMask, float]] = []
    for value, trial in done:
        found = mask_from_params(trial.params, layers)
        mask = SkipMask(layers, found.attention, found.mlp, runtime.info)
        if all(mask.to_flat() != m.to_flat() for _, m, _ in best):
            best.append((f"{strategy} r{ratio:g} #{trial.number}", mask, float(value)))
        if len(best) == BEST_PER_SEARCH:
            break
    return best

