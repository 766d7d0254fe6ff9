"""``layersearch generate --mask SOURCE`` -> the spec's :class:`~layersearch.decoder.spec.MaskSourceSpec`:
a mask file, ``uniform:R``, ``router:FILE``, a dynamic source (``knapsack``) or an on-the-fly one
(``swift``, ``swift:R``), checked before the model loads; errors name the option. No torch at the
top level (the parsers are built for ``--help``)."""

from __future__ import annotations

from typing import Any

from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import MaskSourceSpec, registry_names


def mask_source(options: Any) -> MaskSourceSpec:
    """Where the mask comes from (``--mask SOURCE``; see :func:`parse_mask_option`), or the default."""
    from dataclasses import asdict

    from layersearch.masks.mask import SkipMask
    from layersearch.commands.args import swift_config

    if not options.mask:
        return MaskSourceSpec("default")
    kind, value = parse_mask_option(options.mask)
    if kind == "mask":
        return MaskSourceSpec("mask", mask=SkipMask.load(options.mask), file=options.mask)  # the text names the file
    if kind == "uniform":
        return MaskSourceSpec("uniform", skip_ratio=_ratio(value or "", options.mask))  # uniform:R always has an R
    if kind == "router":
        return MaskSourceSpec("router", file=value)
    if kind in registry_names()["on_the_fly"]:
        ratio = None if value is None else _ratio(value, options.mask)
        return MaskSourceSpec(kind, swift=asdict(swift_config(options, skip_ratio=ratio)))
    return MaskSourceSpec(kind, reselect_every=options.reselect_every)  # a dynamic source


def parse_mask_option(text: str) -> tuple[str, str | None]:
    """``generate --mask SOURCE`` -> (mask source kind, its value): ``uniform:R``, ``router:FILE``,
    a dynamic source (``knapsack``), an on-the-fly one (``swift``, ``swift:R``), else a mask file.

    A source's name wins over a file of that name (``./knapsack`` names the file)."""
    names = registry_names()
    kind, sep, value = text.partition(":")
    if kind in ("uniform", "router"):
        if not value.strip():
            example = "uniform:0.2" if kind == "uniform" else "router:router.json"
            raise LayersearchError(f"--mask {kind}: needs a value, e.g. --mask {example}")
        return kind, value
    if kind in names["dynamic"]:
        if sep:
            raise LayersearchError(f"--mask {kind} takes no value (got {text!r}; --reselect-every and --profile set it)")
        return kind, None
    if kind in names["on_the_fly"]:
        if sep and not value.strip():
            raise LayersearchError(f"--mask {kind}: needs a skip ratio after the colon, e.g. --mask {kind}:0.45")
        return kind, (value if sep else None)
    return "mask", text


def _ratio(text: str, option: str) -> float:
    """The skip ratio R of ``--mask uniform:R`` / ``swift:R``: a number in [0, 1]."""
    from layersearch.common.checks import check_real

    try:
        value = float(text)
    except ValueError:
        raise LayersearchError(f"--mask {option}: the skip ratio must be a number, got {text!r}") from None
    return check_real(value, f"--mask {option} (the skip ratio)", low=0.0, high=1.0)
