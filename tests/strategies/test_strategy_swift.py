"""SWIFT-specific rules: the skip count, the kept first/last layers, BO every beta-th step, early stop."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.strategies import (
    PROPOSAL_ATTR,
    StopRule,
    SwiftSampler,
    initial_masks,
    mask_from_params,
    params_from_mask,
    should_stop,
    stop_reason,
    suggest_mask,
)
from layersearch.strategies import swift

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.mark.parametrize(
    ("num_layers", "ratio", "count"),
    [(40, 0.45, 34), (32, 0.45, 27), (80, 0.5, 78), (6, 0.45, 3), (3, 1.0, 2), (8, 0.0, 0)],
)
def test_skip_count_is_swifts_truncation(num_layers, ratio, count):
    assert swift.skip_count(num_layers, ratio) == count == int((num_layers - 2) * 2 * ratio)


def test_first_and_last_layers_are_never_allowed():
    assert swift.allowed_positions(5) == (2, 3, 4, 5, 6, 7)


@pytest.mark.parametrize("num_layers", [1, 2])
def test_needs_three_layers(num_layers):
    with pytest.raises(LayersearchError, match="at least 3 layers"):
        SwiftSampler(num_layers=num_layers)


@pytest.mark.parametrize("num_layers", [3, 6, 8, 32, 40, 80])
@pytest.mark.parametrize("ratio", [0.2, 0.45, 0.5, 1.0])
def test_initial_mask_spreads_the_count_over_inner_layers(num_layers, ratio):
    mask = swift.initial_mask(num_layers, ratio)
    assert mask.num_skipped == swift.skip_count(num_layers, ratio)
    assert {0, num_layers - 1}.isdisjoint(mask.attention + mask.mlp)
    assert initial_masks("swift", num_layers=num_layers, skip_ratio=ratio) == (mask,)


def test_initial_mask_for_40_layers_skips_whole_layers_evenly():
    mask = swift.initial_mask(40, 0.45)  # 34 sub-layers: 17 attention, 17 MLP, on the same layers
    assert mask.attention == mask.mlp
    gaps = [b - a for a, b in zip(mask.attention, mask.attention[1:])]
    assert set(gaps) <= {2, 3}


def test_bo_step_schedule():
    assert [n for n in range(100) if swift.is_bo_step(n)] == [24, 49, 74, 99]
    assert [n for n in range(9) if swift.is_bo_step(n, 3)] == [2, 5, 8]


def test_bo_runs_at_every_beta_th_trial_and_keeps_the_count():
    num_layers = 8
    sampler = SwiftSampler(num_layers=num_layers, skip_ratio=0.45, seed=0, bo_interval=3)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.enqueue_trial(params_from_mask(swift.initial_mask(num_layers)))
    weights = [(-1) ** j * (j % 5) for j in range(2 * num_layers)]
    study.optimize(lambda t: sum(w * s for w, s in zip(weights, suggest_mask(t, num_layers).to_flat())), n_trials=9)

    origins = [t.system_attrs.get(PROPOSAL_ATTR) for t in study.trials]
    assert origins == [None, "random", "bo", "random", "random", "bo", "random", "random", "bo"]
    for trial in study.trials:
        mask = mask_from_params(trial.params, num_layers)
        assert mask.num_skipped == sampler.count == 5
        assert {0, num_layers - 1}.isdisjoint(mask.attention + mask.mlp)


def test_bo_step_without_history_falls_back_to_random():
    sampler = SwiftSampler(num_layers=6, seed=0, bo_interval=1)
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: float(suggest_mask(t, 6).num_skipped), n_trials=3)
    assert [t.system_attrs[PROPOSAL_ATTR] for t in study.trials] == ["random", "random", "bo"]


def study_with(values, direction="maximize"):
    """A study whose finished trials have ``values`` in order (None: a failed trial)."""
    study = optuna.create_study(direction=direction)
    for value in values:
        if value is None:
            study.add_trial(create_trial(state=TrialState.FAIL))
        else:
            study.add_trial(create_trial(value=value))
    return study


def test_stops_at_matchness_095():
    assert not should_stop("swift", study_with([0.5, 0.94]))
    assert should_stop("swift", study_with([0.5, 0.95]))
    assert "target" in stop_reason("swift", study_with([0.97, 0.5]))


def test_target_follows_the_study_direction():
    assert should_stop("swift", study_with([1.2, 0.9], direction="minimize"))
    assert not should_stop("swift", study_with([1.2, 0.96], direction="minimize"))


def test_stops_after_the_no_improvement_window():
    rule = StopRule(patience=3)
    assert not should_stop("swift", study_with([0.5, 0.6, 0.6, 0.55]), rule=rule)
    assert should_stop("swift", study_with([0.5, 0.6, 0.6, 0.55, None]), rule=rule)
    assert not should_stop("swift", study_with([0.5, 0.6, 0.6, 0.55, 0.61]), rule=rule)
    assert "no improvement in the last 3" in stop_reason("swift", study_with([0.6, 0.1, 0.2, 0.3]), rule=rule)


def test_default_window_is_300_trials():
    values = [0.5] + [0.4] * 299
    assert not should_stop("swift", study_with(values))
    assert should_stop("swift", study_with(values + [0.4]))


def test_stops_at_max_trials_and_criteria_can_be_switched_off():
    rule = StopRule(target=None, patience=None, max_trials=4)
    assert not should_stop("swift", study_with([0.1, 0.2, 0.99]), rule=rule)
    assert "4 trials" in stop_reason("swift", study_with([0.1, 0.2, 0.99, 0.3]), rule=rule)


def test_empty_study_goes_on():
    assert stop_reason("swift", optuna.create_study()) is None


def test_uniform_stops_after_one_trial_and_the_others_never_stop():
    study = study_with([0.99] * 3)
    assert should_stop("uniform", study)
    assert not should_stop("uniform", optuna.create_study())
    for name in ("selfsd-bo", "random", "tpe"):
        assert not should_stop(name, study)


def test_uniform_always_proposes_the_uniform_mask():
    from layersearch.strategies import make_sampler

    study = optuna.create_study(sampler=make_sampler("uniform", num_layers=8, skip_ratio=0.25))
    study.optimize(lambda t: float(suggest_mask(t, 8).num_skipped), n_trials=3)
    assert {mask_from_params(t.params, 8) for t in study.trials} == {SkipMask.uniform(8, 0.25)}


def test_plans_keep_swifts_count_of_skips_and_search_the_precisions():
    num_layers = 8
    sampler = SwiftSampler(num_layers=num_layers, skip_ratio=0.45, seed=0, bo_interval=3, space="plans")
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for mask in swift.initial_masks(num_layers, space="plans"):
        study.enqueue_trial(params_from_mask(mask, "plans"))
    # Rewards int4 sub-layers: the BO steps must find them through the precision coordinates.
    study.optimize(lambda t: float(suggest_mask(t, num_layers, "plans").num_int4), n_trials=9)
    origins = [t.system_attrs.get(PROPOSAL_ATTR) for t in study.trials]
    assert origins == [None, None, None, "random", "random", "bo", "random", "random", "bo"]
    plans = [mask_from_params(t.params, num_layers) for t in study.trials]
    assert plans[0] == swift.initial_mask(num_layers) and plans[1] == plans[0].kept_in_int8(head=True)
    assert plans[2] == plans[0].kept_in_int4(head=True)
    for plan in plans:
        assert plan.num_skipped == sampler.count == 5
        assert {0, num_layers - 1}.isdisjoint(plan.attention + plan.mlp)
    assert any(plan.has_int4 for plan in plans[3:])
