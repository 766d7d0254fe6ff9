"""Self-speculative drafting: the target model with the controller's mask applied.

The masked model runs in the target's own KV cache: layers whose attention it executes
append entries for the draft positions, which the loop cuts away before verification, so
there is no copy of the cache. An empty mask means the draft would *be* the target, so no
draft is made and the step is a plain target step. With ``vocab`` (a
:class:`~layersearch.runtime.vocab_head.VocabSubset`) the draft scores only those tokens
(FR-Spec); the verification still runs the full head.
"""

from __future__ import annotations

from layersearch.models.skipping import skipping
from layersearch.runtime.drafters.base import DraftRequest, Proposal, StatelessDrafter, draft_chain
from layersearch.runtime.vocab_head import DraftHeads, VocabSubset


class LayerSkipDrafter(StatelessDrafter):
    """Drafts with ``request.mask`` applied to the target (Self-SD, SWIFT, KnapSpec).

    ``branching`` (e.g. :class:`~layersearch.runtime.tree.TopKBranching`) makes greedy drafts
    token trees: each position also proposes its other top-k candidates. ``vocab`` restricts
    the draft's head to a subset of the vocabulary (None: the full head).
    """

    name = "layer-skip"

    def __init__(self, branching=None, *, vocab: VocabSubset | None = None) -> None:
        self.branching = branching
        self.vocab = vocab
        self._heads = None if vocab is None else DraftHeads(vocab)

    def propose(self, request: DraftRequest) -> Proposal:
        """Chain draft with the masked model, stopped by the lookahead rule."""
        if request.mask.is_empty or request.limit <= 0:
            return Proposal.empty(self.name)

        options = {} if self._heads is None else {"head": self._heads.for_model(request.model)}

        def next_logits(token: int, index: int):
            return request.forward([token], request.position + index, keep=1, **options)[-1]  # [vocab]

        with skipping(request.model, request.mask):
            return draft_chain(request, next_logits, self.name, self.branching)
