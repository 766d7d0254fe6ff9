"""The search-space convention every strategy and the study module share."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest
from hypothesis import given
from hypothesis import strategies as st
from optuna.distributions import IntDistribution
from optuna.trial import create_trial

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.strategies import mask_from_params, param_names, params_from_mask, search_space, suggest_mask
from layersearch.strategies._sampler import history


def test_names_are_interleaved_and_zero_padded():
    assert param_names(3) == ("attn_00", "mlp_00", "attn_01", "mlp_01", "attn_02", "mlp_02")


def test_three_digits_only_beyond_100_layers():
    assert param_names(100)[-1] == "mlp_99"
    names = param_names(101)
    assert names[0] == "attn_000" and names[-2:] == ("attn_100", "mlp_100")
    assert list(names) == sorted(names, key=lambda n: (int(n.split("_")[1]), n.startswith("mlp")))


def test_search_space_is_binary_for_every_name():
    space = search_space(4)
    assert tuple(space) == param_names(4)
    assert all(d == IntDistribution(0, 1) for d in space.values())


@given(st.lists(st.booleans(), min_size=2, max_size=40).filter(lambda v: len(v) % 2 == 0))
def test_params_round_trip(flat):
    mask = SkipMask.from_flat(flat)
    params = params_from_mask(mask)
    assert list(params) == list(param_names(mask.num_layers))
    assert list(params.values()) == [int(b) for b in flat]
    assert mask_from_params(params, mask.num_layers) == mask


def test_suggest_mask_reads_every_parameter_in_order():
    mask = SkipMask(5, attention=(1, 4), mlp=(0,))
    trial = optuna.trial.FixedTrial(params_from_mask(mask))
    assert suggest_mask(trial, 5) == mask


def test_other_params_are_ignored():
    params = {**params_from_mask(SkipMask(2, attention=(1,))), "temperature": 0.7}
    assert mask_from_params(params, 2) == SkipMask(2, attention=(1,))


def test_missing_or_non_binary_params_raise():
    params = params_from_mask(SkipMask(2))
    with pytest.raises(LayersearchError, match="mlp_01"):
        mask_from_params({k: v for k, v in params.items() if k != "mlp_01"}, 2)
    with pytest.raises(LayersearchError, match="0 or 1"):
        mask_from_params({**params, "attn_00": 2}, 2)


@pytest.mark.parametrize("num_layers", [0, -1, 1.5, True, "8"])
def test_bad_layer_count(num_layers):
    with pytest.raises(LayersearchError):
        param_names(num_layers)


def test_history_negates_minimized_values_and_skips_unusable_trials():
    study = optuna.create_study(direction="minimize")
    space = search_space(2)
    full = params_from_mask(SkipMask(2, attention=(0,)))
    study.add_trial(create_trial(params=full, distributions=space, value=3.0))
    study.add_trial(create_trial(params={"attn_00": 1}, distributions={"attn_00": space["attn_00"]}, value=1.0))
    study.add_trial(create_trial(params=full, distributions=space, value=math.inf))
    x, y = history(study, 2)
    assert x.tolist() == [[1, 0, 0, 0]]
    assert y.tolist() == [-3.0]
    empty_x, empty_y = history(optuna.create_study(), 2)
    assert empty_x.shape == (0, 4) and empty_y.shape == (0,) and empty_x.dtype == np.int8


# ----- the plans space (draft plans: skip, int8, int4 or full per sub-layer; the head int8, int4 or full)
from layersearch.strategies.space import (  # noqa: E402
    PLANS, PLANS_INT8, mask_from_plan_bits, plan_bits, precision_names, space_names, space_of_params, stored_space,
)


def plans(draw_bits):
    """A plan from four bit lists of equal length 2L (skips, int8 and int4 flat) and two head bits."""
    flat, int8, int4, head8, head4 = draw_bits
    return mask_from_plan_bits([*flat, *int8, *int4, head8, head4], len(flat) // 2)


plan_bits_strategy = st.integers(1, 12).flatmap(
    lambda n: st.tuples(*(st.lists(st.booleans(), min_size=2 * n, max_size=2 * n) for _ in range(3)),
                        st.booleans(), st.booleans())
)


def test_plan_space_adds_a_precision_per_sub_layer_and_the_head():
    space = search_space(2, PLANS)
    assert tuple(space) == (*param_names(2), "attn_00_precision", "mlp_00_precision", "attn_01_precision",
                            "mlp_01_precision", "head_precision")
    assert tuple(space) == space_names(2, PLANS)
    assert all(space[name].choices == ("full", "int8", "int4") for name in precision_names(2))
    assert all(search_space(2, PLANS_INT8)[name].choices == ("full", "int8") for name in precision_names(2))
    assert search_space(2) == search_space(2, "skips")  # the skip space is what it always was


@given(plan_bits_strategy)
def test_plan_params_round_trip(bits):
    plan = plans(bits)
    params = params_from_mask(plan, PLANS)
    assert list(params) == list(space_names(plan.num_layers, PLANS))
    assert mask_from_params(params, plan.num_layers, PLANS) == plan
    assert mask_from_params(params, plan.num_layers) == plan  # the space is read from the params
    assert space_of_params(params) == PLANS
    assert mask_from_plan_bits(plan_bits(plan), plan.num_layers) == plan
    trial = optuna.trial.FixedTrial(params)
    assert suggest_mask(trial, plan.num_layers, PLANS) == plan
    if plan.is_skip_only:  # a skip mask is the plan with every precision full
        assert params == {**params_from_mask(plan), **{name: "full" for name in precision_names(plan.num_layers)}}


def test_a_skipped_sub_layer_has_no_precision():
    params = {**params_from_mask(SkipMask(1, attention=(0,)), PLANS), "attn_00_precision": "int8"}
    plan = mask_from_params(params, 1)
    assert plan == SkipMask(1, attention=(0,))  # the int8 of a skipped attention is ignored
    assert params_from_mask(plan, PLANS)["attn_00_precision"] == "full"  # one set of parameters per plan


def test_a_plan_is_outside_the_skip_space():
    plan = SkipMask(2).with_int8((0,), (), False)
    assert params_from_mask(plan) == params_from_mask(plan, PLANS)  # its own space by default
    with pytest.raises(LayersearchError, match="space 'plans'"):
        params_from_mask(plan, "skips")


def test_missing_or_bad_precisions_raise():
    params = params_from_mask(SkipMask(2), PLANS)
    with pytest.raises(LayersearchError, match="mlp_01_precision"):
        mask_from_params({k: v for k, v in params.items() if k != "mlp_01_precision"}, 2, PLANS)
    with pytest.raises(LayersearchError, match="full, int8 or int4"):
        mask_from_params({**params, "attn_00_precision": "int2"}, 2)
    with pytest.raises(LayersearchError, match="search space"):
        search_space(2, "plan")


def test_plan_history_is_the_plan_vector():
    study = optuna.create_study(direction="maximize")
    space = search_space(2, PLANS)
    plan = SkipMask(2, mlp=(1,)).with_int8((0, 1), (0,), True)
    params = {**params_from_mask(plan, PLANS), "mlp_01_precision": "int8"}  # skipped: its int8 reads 0
    study.add_trial(create_trial(params=params, distributions=space, value=2.0))
    x, y = history(study, 2, PLANS)
    # skips, int8 bits, int4 bits (none), the head's int8 and int4 bits: 6L + 2
    assert x.tolist() == [[0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 0]] and y.tolist() == [2.0]
    assert history(study, 2)[0].tolist() == [[0, 0, 0, 1]]  # the skip switches alone, as before


def test_a_plan_vector_holds_two_bits_per_sub_layer_and_int4_wins_a_tie():
    plan = SkipMask(2, (1,), ()).with_int8((0,), (), False).with_int4((), (0, 1), True)
    bits = plan_bits(plan).tolist()
    assert bits == [0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 1]
    assert mask_from_plan_bits(bits, 2) == plan
    both = [0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 1]  # attention 0 and the head have both bits: int4
    assert mask_from_plan_bits(both, 2) == SkipMask(2).with_int4((0,), (), True)
    assert plan_bits(SkipMask(2).with_int8((0,), (), True), ("int8",)).tolist() == [0, 0, 0, 0, 1, 0, 0, 0, 1]


def test_a_plans_study_made_before_int4_keeps_its_two_precisions(tmp_path):
    """Optuna stores each trial's distributions and refuses changed categorical choices: a stored
    plans study with ("full", "int8") resumes in that space, and its sampler keeps to it."""
    from layersearch.strategies import make_sampler

    storage = f"sqlite:///{tmp_path / 'old.db'}"
    old = optuna.create_study(study_name="old", storage=storage, direction="maximize")
    plan = SkipMask(2, mlp=(1,)).with_int8((0, 1), (0,), True)
    old.add_trial(create_trial(params=params_from_mask(plan, PLANS_INT8), distributions=search_space(2, PLANS_INT8), value=1.0))
    assert stored_space(old, PLANS) == PLANS_INT8
    assert stored_space(optuna.create_study(), PLANS) == PLANS  # a new study gains int4
    sampler = make_sampler("random", num_layers=2, seed=1, space=PLANS_INT8)
    resumed = optuna.load_study(study_name="old", storage=storage, sampler=sampler)
    resumed.optimize(lambda trial: float(len(suggest_mask(trial, 2, PLANS_INT8).short_string())), n_trials=6)
    assert len(resumed.trials) == 7 and all(t.state.name == "COMPLETE" for t in resumed.trials)
    assert not any(mask_from_params(t.params, 2).has_int4 for t in resumed.trials)
    with pytest.raises(LayersearchError, match="made before int4"):
        params_from_mask(SkipMask(2).with_int4((0,), (), False), PLANS_INT8)
