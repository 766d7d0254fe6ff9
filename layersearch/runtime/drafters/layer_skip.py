"""Self-speculative drafting: the target model with the controller's mask applied.

The masked model runs in the target's own KV cache: layers whose attention it executes
append entries for the draft positions, which the loop cuts away before verification, so
there is no copy of the cache. An empty mask means the draft would *be* the target, so no
draft is made and the step is a plain target step.
"""

from __future__ import annotations

from layersearch.models.skipping import skipping
from layersearch.runtime.drafters.base import DraftRequest, Proposal, StatelessDrafter, draft_chain


class LayerSkipDrafter(StatelessDrafter):
    """Drafts with ``request.mask`` applied to the target (Self-SD, SWIFT, KnapSpec).

    ``branching`` (e.g. :class:`~layersearch.runtime.tree.TopKBranching`) makes greedy drafts
    token trees: each position also proposes its other top-k candidates.
    """

    name = "layer-skip"

    def __init__(self, branching=None) -> None:
        self.branching = branching

    def propose(self, request: DraftRequest) -> Proposal:
        """Chain draft with the masked model, stopped by the lookahead rule."""
        if request.mask.is_empty or request.limit <= 0:
            return Proposal.empty(self.name)

        def next_logits(token: int, index: int):
            return request.forward([token], request.position + index)[-1]

        with skipping(request.model, request.mask):
            return draft_chain(request, next_logits, self.name, self.branching)
