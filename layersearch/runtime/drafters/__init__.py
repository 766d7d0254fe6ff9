"""Drafters: where draft tokens come from (one module each; see ``base`` for the protocol)."""

from layersearch.errors import LayersearchError
from layersearch.runtime.drafters.base import DraftRequest, Drafter, Proposal, StatelessDrafter, draft_chain
from layersearch.runtime.drafters.hybrid import HybridDrafter
from layersearch.runtime.drafters.layer_skip import LayerSkipDrafter
from layersearch.runtime.drafters.model import ModelDrafter
from layersearch.runtime.drafters.prompt_lookup import PromptLookupDrafter, lookup_continuation

DRAFTER_NAMES = ("layer-skip", "prompt-lookup", "hybrid")


def drafter_named(name: str) -> Drafter:
    """A drafter that needs no extra model, by its CLI name (one of :data:`DRAFTER_NAMES`)."""
    makers = {"layer-skip": LayerSkipDrafter, "prompt-lookup": PromptLookupDrafter, "hybrid": HybridDrafter}
    if name not in makers:
        raise LayersearchError(f"unknown drafter {name!r} (choose from {', '.join(DRAFTER_NAMES)})")
    return makers[name]()


__all__ = [
    "DRAFTER_NAMES",
    "DraftRequest",
    "Drafter",
    "HybridDrafter",
    "LayerSkipDrafter",
    "ModelDrafter",
    "PromptLookupDrafter",
    "Proposal",
    "StatelessDrafter",
    "draft_chain",
    "drafter_named",
    "lookup_continuation",
]
