"""The one numeric-argument check: what passes, what is refused and how the message reads."""

from __future__ import annotations

import math

import pytest

from layersearch.checks import check_fraction, check_int, check_positive
from layersearch.errors import LayersearchError


def test_check_int_passes_integers_in_range():
    assert check_int(3, "n") == 3
    assert check_int(0, "n", minimum=0) == 0
    assert check_int(5, "n", minimum=0, maximum=5) == 5


@pytest.mark.parametrize("value", [0, -1, 2.0, True, "3", None])
def test_check_int_refuses_and_names_the_argument(value):
    with pytest.raises(LayersearchError, match=r"--trials must be an integer >= 1, got"):
        check_int(value, "--trials")


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
    with pytest.raises(LayersearchError, match="--budget must be > 0 seconds"):
        check_positive(value, "--budget", unit="seconds")
