"""Hybrid drafting: prompt lookup when the last n-gram occurred before, layer skip otherwise.

A lookup draft costs no forward, so it is tried first; only when it finds nothing does the
masked model draft. Each step's statistics say which of the two drafted it. The lookup part
copies at most 4 tokens (its own cap): the lookahead's cap and confidence rule are set for the
masked model's drafts, and long copies of weak matches cost more to verify than they save.
"""

from __future__ import annotations

from layersearch.runtime.drafters.base import DraftRequest, Proposal, StatelessDrafter
from layersearch.runtime.drafters.layer_skip import LayerSkipDrafter
from layersearch.runtime.drafters.prompt_lookup import PromptLookupDrafter


class HybridDrafter(StatelessDrafter):
    """Prompt lookup first, then the layer-skip draft (with the controller's mask)."""

    name = "hybrid"

    def __init__(self, lookup: PromptLookupDrafter | None = None, fallback: LayerSkipDrafter | None = None) -> None:
        self.lookup = lookup or PromptLookupDrafter(max_tokens=4)
        self.fallback = fallback or LayerSkipDrafter()

    def propose(self, request: DraftRequest) -> Proposal:
        """The lookup's proposal when it has one, else the masked model's."""
        proposal = self.lookup.propose(request)
        return proposal if proposal.tokens else self.fallback.propose(request)
