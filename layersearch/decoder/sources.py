"""Mask sources: where the draft's skip mask comes from, one registry, name -> :class:`MaskSource`.

A mask source is either a fixed mask or a controller (:mod:`layersearch.runtime.control`) of
its method (KnapSpec, KNN-SSD, SWIFT on the fly). Each entry names the fields of
:class:`~layersearch.decoder.spec.MaskSourceSpec` it takes and a builder that imports its method only
when called, so this module stays light (the names ``mask_source``
takes come from here). A new source is its module plus one line in :data:`MASK_SOURCES`.

A builder gets a :class:`SourceInputs` and returns the decoder's keyword arguments: ``{"mask":
SkipMask}`` or ``{"controller": Controller}`` (``{}``: no mask, the drafter drafts without one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from layersearch.common.errors import LayersearchError


@dataclass(frozen=True)
class SourceInputs:
    """What a builder may use: the loaded model, the source's spec, the draft policy, the
    latency profile path, and the mask a steering or DISCO file brings (None without one)."""

    loaded: Any
    source: Any  # MaskSourceSpec
    policy: Any  # DraftPolicy
    profile: str | None
    file_mask: Any = None  # SkipMask
    router: Any = None  # a loaded Router for kind "router"


@dataclass(frozen=True)
class MaskSource:
    """One registry entry: the spec fields it requires and may take, and its builder."""

    required: tuple[str, ...]
    optional: tuple[str, ...]
    build: Callable[[SourceInputs], dict[str, Any]]
    #: checks a MaskSourceSpec's settings without a model (raises LayersearchError); None: nothing beyond the fields
    check: Callable[[Any], None] | None = None


def _fixed(inputs: SourceInputs) -> dict[str, Any]:
    mask = inputs.source.mask
    try:
        mask.check_model(inputs.loaded.info)
    except LayersearchError as exc:
        # the spec holds the mask itself: the spec's field is to blame, not the file it was copied from
        copied = f" (copied from {inputs.source.file})" if inputs.source.file else ""
        raise LayersearchError(f"mask_source.mask{copied}: {exc}") from None
    return {"mask": mask}


def _uniform(inputs: SourceInputs) -> dict[str, Any]:
    from layersearch.masks.mask import SkipMask

    info = inputs.loaded.info
    return {"mask": SkipMask.uniform(info.num_layers, inputs.source.skip_ratio, model=info)}


def _default(inputs: SourceInputs) -> dict[str, Any]:
    """The steering or DISCO file's mask, else an evenly spread mask skipping a quarter."""
    from layersearch.masks.mask import SkipMask

    info = inputs.loaded.info
    if inputs.file_mask is not None:  # the file itself was checked against the model
        return {"mask": inputs.file_mask}
    return {"mask": SkipMask.uniform(info.num_layers, DEFAULT_SKIP_RATIO, model=info)}


def _none(inputs: SourceInputs) -> dict[str, Any]:
    return {}


def _knapsack(inputs: SourceInputs) -> dict[str, Any]:
    from layersearch.knapspec.controller import KnapSpecController

    max_draft = inputs.policy.max_draft
    profile = load_or_measure_profile(inputs.profile, inputs.loaded, max_verify=max_draft + 1)
    interval = inputs.source.reselect_every
    return {"controller": KnapSpecController(inputs.loaded.model, profile, max_draft=max_draft, interval=interval)}


def _router(inputs: SourceInputs) -> dict[str, Any]:
    from layersearch.knn.controller import KnnController

    return {"controller": KnnController(inputs.router)}


def _swift(inputs: SourceInputs) -> dict[str, Any]:
    from layersearch.common.extras import require_extras
    from layersearch.models.skipping import decoder_layers
    from layersearch.runtime.cache import sliding_windows
    from layersearch.swift import SwiftConfig
    from layersearch.swift.controller import SwiftController

    model = inputs.loaded.model
    if any(w is not None for w in sliding_windows(model)):  # the check of swift.controller.swift_decoder
        raise LayersearchError(
            "SWIFT's on-the-fly matchness hides generated positions with a full-attention mask; this model uses "
            "sliding-window attention: use a fixed mask (e.g. from a study with the swift strategy)"
        )
    require_extras("search")  # its BO steps fit BoTorch's GP: say so before decoding, not at the first one
    return {"controller": SwiftController(len(decoder_layers(model)), SwiftConfig(**dict(inputs.source.swift)))}


def _check_swift(source: Any) -> None:
    """The spec's SWIFT settings must be SwiftConfig's fields with valid values."""
    from dataclasses import fields

    from layersearch.swift import SwiftConfig

    known = [f.name for f in fields(SwiftConfig)]
    unknown = sorted(set(source.swift) - set(known))
    if unknown:
        raise LayersearchError(f"unknown SWIFT setting {', '.join(map(repr, unknown))} (known: {', '.join(known)})")
    SwiftConfig(**dict(source.swift))


def load_or_measure_profile(path: str | None, loaded: Any, *, max_verify: int = 12, stream: Any = None) -> Any:
    """The profile at ``path`` (checked against the model), or a quick one measured now (said on ``stream``)."""
    import sys

    from layersearch.profiling.profile import LatencyProfile
    from layersearch.profiling.profiler import quick_profile

    stream = stream or sys.stderr
    if path:
        return LatencyProfile.load(path, model=loaded.info)
    print(
        "layersearch: no profile given; measuring a quick latency profile "
        "(save one with `layersearch profile` and give it, for better numbers)",
        file=stream,
        flush=True,
    )
    return quick_profile(loaded.model, loaded.info, max_verify=max_verify)


#: Skip ratio of the evenly spread mask used when nothing names a mask.
DEFAULT_SKIP_RATIO = 0.25

#: The mask sources, by the name a spec's ``mask_source.kind`` gives.
MASK_SOURCES: dict[str, MaskSource] = {
    "default": MaskSource((), (), _default),  # the steering / DISCO file's mask, else uniform 0.25
    "mask": MaskSource(("mask",), ("file",), _fixed),  # one mask, inline (and the file it came from)
    "uniform": MaskSource(("skip_ratio",), (), _uniform),  # an evenly spread mask
    "none": MaskSource((), (), _none),  # no mask: an independent drafter, or plain decoding
    "knapsack": MaskSource(("reselect_every",), (), _knapsack),  # KnapSpec re-selection while decoding
    "router": MaskSource(("file",), (), _router),  # KNN-SSD: each prompt's mask by nearest neighbour
    "swift": MaskSource(("swift",), (), _swift, _check_swift),  # SWIFT's on-the-fly optimisation
}
#: The sources that choose the mask while decoding: ``mask_source.kind`` ``knapsack`` re-selects it
#: (dynamic), ``swift`` optimises it (on the fly).
DYNAMIC_SOURCES = ("knapsack",)
ON_THE_FLY_SOURCES = ("swift",)
