"""The one numeric-argument check: what passes, what is refused and how the message reads."""

from __future__ import annotations

import math

import pytest

from layersearch.common.checks import MAX_SEED, check_draft_length, check_fraction, check_int, check_positive, check_real, check_seed
from layersearch.common.errors import LayersearchError


def test_check_int_passes_integers_in_range():
    assert check_int(3, "n") == 3
    assert check_int(0, "n", minimum=0) == 0
    assert check_int(5, "n", minimum=0, maximum=5) == 5


@pytest.mark.parametrize("value", [0, -1, 2.0, True, "3", None])
def test_check_int_refuses_and_names_the_argument(value):
    with pytest.raises(LayersearchError, match=r"trials must be an integer >= 1, got"):
        check_int(value, "trials")


def test_check_int_upper_bound():
    with pytest.raises(LayersearchError, match=r"keep must be an integer in \[0, 4\], got 5"):
        check_int(5, "keep", minimum=0, maximum=4)


@pytest.mark.parametrize("value", [-0.1, 1.5, math.nan, True, "0.4"])
def test_check_fraction_refuses(value):
    with pytest.raises(LayersearchError, match=r"skip ratio must be in \[0, 1\]"):
        check_fraction(value, "skip ratio")


def test_check_fraction_and_positive_return_floats():
    assert check_fraction(1, "r") == 1.0 and isinstance(check_fraction(0, "r"), float)
    assert check_positive(2, "t") == 2.0


@pytest.mark.parametrize("value", [0, -1.0, math.inf, math.nan, False])
def test_check_positive_refuses(value):
    with pytest.raises(LayersearchError, match="budget must be > 0 seconds"):
        check_positive(value, "budget", unit="seconds")


@pytest.mark.parametrize("value", [-1, MAX_SEED + 1, 2**80, 1.0, True, "3"])
def test_check_seed_refuses(value):
    with pytest.raises(LayersearchError, match=r"seed must be an integer in \[0, 4294967295\]"):
        check_seed(value)


def test_check_seed_and_draft_length_pass_their_range():
    assert check_seed(0) == 0 and check_seed(MAX_SEED) == MAX_SEED
    assert check_draft_length(1) == 1 and check_draft_length(64) == 64
    with pytest.raises(LayersearchError, match=r"max_draft must be an integer in \[1, 64\], got 100000"):
        check_draft_length(100000)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 0.0, 1.5, True, "0.1", None])
def test_check_real_refuses_non_finite_and_out_of_range(value):
    with pytest.raises(LayersearchError, match=r"lr must be a finite number in \(0, 1\], got"):
        check_real(value, "lr", low=0.0, high=1.0, low_open=True)


def test_check_real_one_sided_bounds():
    assert check_real(1e30, "x", low=0.0) == 1e30
    with pytest.raises(LayersearchError, match="x must be a finite number >= 0, got inf"):
        check_real(math.inf, "x", low=0.0)
    with pytest.raises(LayersearchError, match="x must be a finite number < 2, got 2"):
        check_real(2, "x", high=2.0, high_open=True)
