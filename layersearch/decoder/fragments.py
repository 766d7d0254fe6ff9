"""Spec fragments: the parts of a :class:`~layersearch.decoder.spec.DecoderSpec` that a bench row, a study
trial or a command-line item names, and the ``KIND:MODEL@QUANT`` grammar of those items.

A bench row or a method's benchmark holds its model already, so its spec is :func:`loaded_spec`:
a placeholder model reference and the parts that decide what the decoder does; it goes to
:func:`layersearch.decoder.build.assemble` with the model. The item grammar (bench's ``drafters``
and ``peers``)::

    NAME               a registered drafter that needs no draft model (prompt-lookup, hybrid, ...)
    KIND:MODEL         a drafter with an independent draft model (model: the default drafter's
                       place taken by it; hybrid: lookup, else the model; any registered drafter
                       that takes one); a peer with one (assisted)
    KIND:MODEL@int8    the same, the draft model's weights quantized

Names come from the registry (:data:`layersearch.runtime.drafters.DRAFTERS`), and what each
drafter takes from its entry. Errors name the argument the items came in (``drafters``, ``peers``). This module imports no torch at its top level.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DecoderSpec, DrafterSpec, LookaheadSpec, MaskSourceSpec, ModelRef, ModelSpec

#: The model reference of a spec whose model the caller holds already (never loaded by name).
LOADED = "loaded-model"
#: The item kind of an independent draft model in the default drafter's place (``model:MODEL``).
MODEL_KIND = "model"


def loaded_spec(**parts: Any) -> DecoderSpec:
    """A spec for a model already loaded here, with ``parts`` (drafter, mask_source, lookahead,
    verifier, sampling): what :func:`layersearch.decoder.build.assemble` builds on that model."""
    return DecoderSpec(model=ModelSpec(ModelRef(LOADED)), **parts)


def mask_source(mask: Any) -> MaskSourceSpec:
    """The mask source of one fixed mask given inline (None: no mask)."""
    return MaskSourceSpec("none") if mask is None else MaskSourceSpec("mask", mask=mask)


def mask_spec(mask: Any, policy: Any = None, **parts: Any) -> DecoderSpec:
    """Self-SD's spec for a loaded model: the layer-skip drafter with the one fixed ``mask`` and
    the DraftPolicy's rule (None: the default confidence rule); ``parts`` replace others."""
    lookahead = LookaheadSpec() if policy is None else policy_lookahead(policy)
    return loaded_spec(mask_source=mask_source(mask), **{"lookahead": lookahead, **parts})


def policy_lookahead(policy: Any, name: str | None = None) -> LookaheadSpec:
    """The lookahead of a DraftPolicy: rule ``name`` with its cap and threshold, by default the
    policy's own rule (confidence, or adaptive with ``adaptive_threshold``)."""
    default = "adaptive" if getattr(policy, "adaptive_threshold", False) else "confidence"
    return LookaheadSpec(name or default, policy.max_draft, policy.threshold)


def split_named(item: str) -> tuple[str, str | None]:
    """``"assisted:small"`` -> ``("assisted", "small")``; ``"hybrid"`` -> ``("hybrid", None)``."""
    kind, sep, name = item.partition(":")
    return kind, (name if sep else None)


def split_quant(name: str) -> tuple[str, str | None]:
    """``"small@int8"`` -> ``("small", "int8")`` (a draft model with quantized weights); ``"small"`` -> ``("small", None)``."""
    import os
    import re

    from layersearch.common.checks import QUANT_SCHEMES

    ref, sep, quant = name.rpartition("@")
    if sep and ref and quant not in QUANT_SCHEMES and re.fullmatch(r"(?i)(u?int|fp|float|bf|bfloat|nf|q)[0-9]+", quant) \
            and not os.path.exists(os.path.expanduser(name)):  # a precision we lack: refused before any model loads
        raise LayersearchError(f"unknown precision {quant!r} in {name!r} (a draft model's weights: "
                               f"{', '.join(QUANT_SCHEMES)}; none for its own)")
    return (ref, quant) if sep and ref and quant in QUANT_SCHEMES else (name, None)


def parse_items(text: str, what: str, plain: tuple[str, ...], with_model: tuple[str, ...]) -> tuple[str, ...]:
    """The comma-separated items of the argument ``what``: each a name of ``plain`` or ``KIND:MODEL``
    for a kind of ``with_model``; an unknown one is one error naming the choices."""
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    for item in items:
        kind, model = split_named(item)
        if model is None and kind not in plain or model is not None and (kind not in with_model or not model.strip()):
            choices = ", ".join((*plain, *(f"{k}:MODEL" for k in with_model)))
            raise LayersearchError(f"{what}: unknown item {item!r} (choose from {choices})", fields=what)
    return items


def drafter_kinds() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(plain, with_model): the ``drafters`` names without a model (the registry's drafters that
    need no draft model, but the default one: bench's mask rows draft with it) and the kinds that
    take ``:MODEL`` (``model``: the default drafter with one, and the other drafters taking one)."""
    from layersearch.runtime.drafters import DEFAULT_DRAFTER, DRAFTERS

    others = {name: entry for name, entry in DRAFTERS.items() if name != DEFAULT_DRAFTER}
    plain = tuple(name for name, entry in others.items() if not entry.needs_draft_model)
    with_model = (MODEL_KIND, *(name for name, entry in others.items() if entry.takes_draft_model))
    return plain, with_model


def parse_drafters(text: str, what: str = "drafters") -> tuple[str, ...]:
    """The items of a drafters argument, each checked against the registries."""
    return parse_items(text, what, *drafter_kinds())


def drafter_spec(item: str, vocab: int = 0) -> DrafterSpec:
    """The DrafterSpec of one drafters item (``vocab``: FR-Spec's reduced head, 0 for the full one)."""
    kind, name = split_named(item)
    if name is None:
        return DrafterSpec(kind, vocab=vocab)
    ref, quant = split_quant(name)
    return DrafterSpec(DrafterSpec.name if kind == MODEL_KIND else kind, ModelRef(ref), vocab, quant)


def draft_model_item(text: str) -> tuple[ModelRef, str | None]:
    """A draft model's ``MODEL`` or ``MODEL@int8``: its reference (a path when it exists
    here, taken whole even if its name ends in ``@int8``) and the quantization it names."""
    import os

    if os.path.exists(os.path.expanduser(text)):
        return ModelRef(text, True), None
    ref, quant = split_quant(text)
    return ModelRef.given(ref), quant


def model_names(items: Any) -> list[str]:
    """The ``MODEL`` (with any ``@QUANT``) of each ``KIND:MODEL`` item, once each, in order."""
    return list(dict.fromkeys(name for name in (split_named(item)[1] for item in items) if name is not None))


@contextmanager
def named_spec(path: str | None) -> Iterator[None]:
    """Errors inside prefixed with the spec file ``path`` (none without one: then the caller's
    arguments said it, and the errors keep their fields)."""
    try:
        yield
    except LayersearchError as exc:
        if path is None or str(exc).startswith(f"{path}: "):
            raise
        raise LayersearchError(f"{path}: {exc}") from None


__all__ = ["LOADED", "MODEL_KIND", "draft_model_item", "drafter_kinds", "drafter_spec", "loaded_spec",
           "mask_source", "mask_spec", "model_names", "named_spec", "parse_drafters", "parse_items", "policy_lookahead",
           "split_named", "split_quant"]
