"""Drafters: where draft tokens come from (one module each; see ``base`` for the protocol).

:data:`DRAFTERS` is the registry of the drafters that need no extra model: name -> factory
``(branching) -> Drafter``; a new drafter is its module plus one line there. This package stays
light (no torch until a class is used): the CLI's ``--drafter`` choices come from the registry,
and its parsers are built for ``--help`` too. The classes below load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from layersearch.common.errors import LayersearchError


def _layer_skip(branching=None, head=None, quant=None) -> Any:
    from layersearch.runtime.drafters.layer_skip import LayerSkipDrafter

    return LayerSkipDrafter(branching, head=head, quant=quant)


def _prompt_lookup(branching=None, head=None, quant=None) -> Any:
    from layersearch.runtime.drafters.prompt_lookup import PromptLookupDrafter

    if head is not None:
        raise LayersearchError("prompt lookup runs no model, so a reduced draft vocabulary has nothing to restrict")
    if quant is not None:
        raise LayersearchError("prompt lookup runs no model, so it has nothing to quantize")
    return PromptLookupDrafter()


def _hybrid(branching=None, head=None, quant=None) -> Any:
    from layersearch.runtime.drafters.hybrid import HybridDrafter

    return HybridDrafter(fallback=_layer_skip(branching, head, quant))


#: Drafters that need no extra model: name -> factory(branching, head, quant) (``branching``
#: widens layer-skip drafts into token trees; ``head``, a DraftHead such as FR-Spec's, gives the draft a
#: reduced head; ``quant="int8"`` runs every sub-layer the plan keeps, and the head, in int8).
#: The independent draft model (:class:`ModelDrafter`) takes its model instead: it is the
#: spec's ``drafter.model``.
DRAFTERS: dict[str, Callable[..., Any]] = {
    "layer-skip": _layer_skip,
    "prompt-lookup": _prompt_lookup,
    "hybrid": _hybrid,
}
DRAFTER_NAMES = tuple(DRAFTERS)


def _model(model, head=None) -> Any:
    from layersearch.runtime.drafters.model import ModelDrafter

    return ModelDrafter(model, head=head)


def _hybrid_model(model, head=None) -> Any:
    from layersearch.runtime.drafters.hybrid import HybridDrafter

    return HybridDrafter(fallback=_model(model, head))


#: Drafters that run an independent draft model (the spec's ``drafter.model``): name ->
#: factory(model, head) -> Drafter. ``layer-skip`` is replaced by the model; ``hybrid``
#: looks the continuation up in the context first and falls back to the model.
MODEL_DRAFTERS: dict[str, Callable[..., Any]] = {
    "layer-skip": _model,
    "hybrid": _hybrid_model,
}


def drafter_with_model(name: str, model: Any, *, head=None) -> Any:
    """The drafter ``name`` (one of :data:`MODEL_DRAFTERS`) drafting with the independent ``model``."""
    factory = MODEL_DRAFTERS.get(name)
    if factory is None:
        raise LayersearchError(f"drafter {name!r} takes no draft model (choose from {', '.join(MODEL_DRAFTERS)})")
    return factory(model, head)


def drafter_named(name: str, branching=None, *, head=None, quant=None) -> Any:
    """A drafter that needs no extra model, by its CLI name (one of :data:`DRAFTER_NAMES`);
    ``branching`` widens the layer-skip drafts into token trees; ``head`` (a DraftHead, e.g.
    FR-Spec's) gives the draft a reduced head; ``quant`` ("int8") runs the plan's kept sub-layers and the
    head in int8 (prompt lookup runs neither: it refuses both)."""
    factory = DRAFTERS.get(name)
    if factory is None:
        raise LayersearchError(f"unknown drafter {name!r} (choose from {', '.join(DRAFTER_NAMES)})")
    return factory(branching, head, quant)


# Public name -> the module defining it, imported on first access (PEP 562).
_LAZY = {
    "DraftHead": "base",
    "DraftRequest": "base",
    "Drafter": "base",
    "Proposal": "base",
    "StatelessDrafter": "base",
    "draft_chain": "base",
    "HybridDrafter": "hybrid",
    "LayerSkipDrafter": "layer_skip",
    "ModelDrafter": "model",
    "PromptLookupDrafter": "prompt_lookup",
    "lookup_continuation": "prompt_lookup",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = ["DRAFTERS", "DRAFTER_NAMES", "MODEL_DRAFTERS", "drafter_named", "drafter_with_model", *sorted(_LAZY)]
