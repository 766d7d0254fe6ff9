"""Checks of numeric arguments, one wording everywhere: each returns the value or raises
:class:`~layersearch.errors.LayersearchError` naming ``what`` and the value it got.

``bool`` is refused where a number is expected (``True`` is an ``int`` to Python, never a
count or a ratio to a user).
"""

from __future__ import annotations

import math
from typing import Any

from layersearch.errors import LayersearchError


def check_int(value: Any, what: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` if it is an integer in ``[minimum, maximum]`` (no upper bound when None)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise LayersearchError(f"{what} must be an integer {bound}, got {value!r}")
    return value


def check_fraction(value: Any, what: str) -> float:
    """``value`` as a float if it is a real number in ``[0, 1]`` (NaN refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise LayersearchError(f"{what} must be in [0, 1], got {value!r}")
    return float(value)


def check_positive(value: Any, what: str, *, unit: str = "") -> float:
    """``value`` as a float if it is a finite real number > 0 (``unit`` only words the message)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < math.inf:
        raise LayersearchError(f"{what} must be > 0{' ' + unit if unit else ''}, got {value!r}")
    return float(value)
