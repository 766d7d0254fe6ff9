"""Hybrid drafting: prompt lookup when the last n-gram occurred before, layer skip otherwise.

A lookup draft costs no forward, so it is tried first; only when it finds nothing does the
masked model draft. Each step's statistics say which of the two drafted it.
"""

from __future__ import annotations

from layersearch.runtime.drafters.base import DraftRequest, Proposal, StatelessDrafter
from layersearch.runtime.drafters.layer_skip import LayerSkipDrafter
from layersearch.runtime.drafters.prompt_lookup import PromptLookupDrafter


class HybridDrafter(StatelessDrafter):
    """Prompt lookup first, then the layer-skip draft (with the controller's mask)."""

    name = "hybrid"

    def __init__(self, lookup: PromptLookupDrafter | None = None, fallback: LayerSkipDrafter | None = None) -> None:
        self.lookup = lookup or PromptLookupDrafter()
        self.fallback = fallback or LayerSkipDrafter()

    def propose(self, request: DraftRequest) -> Proposal:
        """The lookup's proposal when it has one, else the masked model's."""
        proposal = self.lookup.propose(request)
        return proposal if proposal.tokens else self.fallback.propose(request)
