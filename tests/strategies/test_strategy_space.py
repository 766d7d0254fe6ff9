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


# ----- the plans space (draft plans: skip, int8 or full per sub-layer; the head int8 or full) -------
from layersearch.strategies.space import (  # noqa: E402
    PLANS, mask_from_plan_bits, plan_bits, precision_names, space_names, space_of_params,
)


def plans(draw_bits):
    """A plan from three bit lists of equal length L (skip attention/MLP as flat, int8 flat) and a head bit."""
    flat, int8, head = draw_bits
    return mask_from_plan_bits([*flat, *int8, head], len(flat) // 2)


plan_bits_strategy = st.integers(1, 12).flatmap(
    lambda n: st.tuples(st.lists(st.booleans(), min_size=2 * n, max_size=2 * n),
                        st.lists(st.booleans(), min_size=2 * n, max_size=2 * n), st.booleans())
)


def test_plan_space_adds_a_precision_per_sub_layer_and_the_head():
    space = search_space(2, PLANS)
    assert tuple(space) == (*param_names(2), "attn_00_precision", "mlp_00_precision", "attn_01_precision",
                            "mlp_01_precision", "head_precision")
    assert tuple(space) == space_names(2, PLANS)
    assert all(space[name].choices == ("full", "int8") for name in precision_names(2))
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
    with pytest.raises(LayersearchError, match="full or int8"):
        mask_from_params({**params, "attn_00_precision": "int4"}, 2)
    with pytest.raises(LayersearchError, match="search space"):
        search_space(2, "plan")


def test_plan_history_is_the_plan_vector():
    study = optuna.create_study(direction="maximize")
    space = search_space(2, PLANS)
    plan = SkipMask(2, mlp=(1,)).with_int8((0, 1), (0,), True)
    params = {**params_from_mask(plan, PLANS), "mlp_01_precision": "int8"}  # skipped: its int8 reads 0
    study.add_trial(create_trial(params=params, distributions=space, value=2.0))
    x, y = history(study, 2, PLANS)
    assert x.tolist() == [[0, 0, 0, 1, 1, 1, 1, 0, 1]] and y.tolist() == [2.0]
    assert history(study, 2)[0].tolist() == [[0, 0, 0, 1]]  # the skip switches alone, as before
