"""Drafters: where draft tokens come from (one module each; see ``base`` for the protocol)."""

from layersearch.errors import LayersearchError
from layersearch.runtime.drafters.base import DraftRequest, Drafter, Proposal, StatelessDrafter, draft_chain
from layersearch.runtime.drafters.hybrid import HybridDrafter
from layersearch.runtime.drafters.layer_skip import LayerSkipDrafter
from layersearch.runtime.drafters.model import ModelDrafter
from layersearch.runtime.drafters.prompt_lookup import PromptLookupDrafter, lookup_continuation
from layersearch.runtime.vocab_head import VocabSubset

DRAFTER_NAMES = ("layer-skip", "prompt-lookup", "hybrid")


def drafter_named(name: str, branching=None, *, vocab: VocabSubset | None = None) -> Drafter:
    """A drafter that needs no extra model, by its CLI name (one of :data:`DRAFTER_NAMES`);
    ``branching`` widens the layer-skip drafts into token trees; ``vocab`` gives the
    layer-skip draft a reduced head (prompt lookup runs no head: it refuses one)."""
    if name == "layer-skip":
        return LayerSkipDrafter(branching, vocab=vocab)
    if name == "prompt-lookup":
        if vocab is not None:
            raise LayersearchError("prompt lookup runs no model, so a reduced draft vocabulary has nothing to restrict")
        return PromptLookupDrafter()
    if name == "hybrid":
        return HybridDrafter(fallback=LayerSkipDrafter(branching, vocab=vocab))
    raise LayersearchError(f"unknown drafter {name!r} (choose from {', '.join(DRAFTER_NAMES)})")


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
