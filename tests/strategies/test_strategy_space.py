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

from layersearch.errors import LayersearchError
from layersearch.mask import SkipMask
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
