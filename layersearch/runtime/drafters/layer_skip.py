"""Self-speculative drafting: the target model with the controller's draft plan applied.

The plan (a :class:`~layersearch.masks.mask.SkipMask`) skips some sub-layers and may run others and
the LM head in int8 or int4 (their twins: :mod:`layersearch.models.precision`,
:mod:`layersearch.models.int4`). With ``quant="int8"`` or ``"int4"`` (``drafter.quant`` without a
draft model) every sub-layer the plan keeps, and the head, run in that precision: the model
drafts for itself at a fraction of a forward's cost.

The plan runs as a view of the target (:func:`~layersearch.models.plan_view.plan_view`, built once
per plan by the loop, which the forward is asked for with ``plan=``), in the target's own KV cache: layers whose attention it executes
append entries for the draft positions, which the loop cuts away before verification, so
there is no copy of the cache. An empty mask means the draft would *be* the target, so no
draft is made and the step is a plain target step. With ``head`` (a
:class:`~.base.DraftHead`: FR-Spec's vocabulary subset) the draft scores only those tokens;
the verification still runs the full head.
"""

from __future__ import annotations

from dataclasses import replace

from layersearch.masks.mask import SkipMask
from layersearch.runtime.drafters.base import DraftHead, StepRequest, Proposal, StatelessDrafter, draft_chain


class LayerSkipDrafter(StatelessDrafter):
    """Drafts with ``request.mask`` applied to the target (Self-SD, SWIFT, KnapSpec).

    ``branching`` (e.g. :class:`~layersearch.runtime.tree.TopKBranching`) makes greedy drafts
    token trees: each position also proposes its other top-k candidates. ``head`` gives the
    draft a reduced head, e.g. over a subset of the vocabulary (None: the full head).
    """

    name = "layer-skip"

    def __init__(self, branching=None, *, head: DraftHead | None = None, quant: str | None = None) -> None:
        self.branching = branching
        self.head = head
        self.quant = quant
        # What a draft runs for one (mask, model), worked out when either changes, not per step:
        # (mask, model, plan, whether the plan drafts at all, the forward's head option).
        self._resolved: tuple[SkipMask, object, SkipMask, bool, dict] | None = None

    def plan(self, mask: SkipMask) -> SkipMask:
        """The plan a draft runs for the controller's ``mask`` (its kept sub-layers in ``quant``)."""
        return mask if self.quant is None else mask.kept_in(self.quant)

    def propose(self, request: StepRequest) -> Proposal:
        """Chain draft with the plan applied to the model, stopped by the lookahead rule."""
        resolved = self._resolved
        if resolved is None or resolved[0] is not request.mask or resolved[1] is not request.model:
            plan = self.plan(request.mask)
            if self.quant == "int4":  # the uniform int4 self-draft: groups of 128, or what the model's widths take
                from layersearch.models.int4 import fit_group_size

                plan = fit_group_size(plan, request.model)
            resolved = self._resolved = (request.mask, request.model, plan, not plan.is_empty,
                                         self._head_option(request.model, plan))
        _, _, plan, drafts, options = resolved
        if not drafts or request.limit <= 0:
            return Proposal.empty(self.name)

        def next_logits(token, index: int):  # token [1] on the device
            return request.forward(token, request.position + index, keep=1, plan=plan, **options)[-1]  # [vocab]

        proposal = draft_chain(request, next_logits, self.name, self.branching)
        return proposal if plan is request.mask else replace(proposal, plan=plan)

    def _head_option(self, model, plan: SkipMask) -> dict:
        """The draft's head: a reduced one (FR-Spec), the low-bit twin, or the model's own (no option)."""
        if self.head is not None:
            return {"head": self.head.for_model(model, int8=plan.int8_head,
                                                int4_group=plan.int4_group_size if plan.int4_head else None)}
        if plan.head_precision != "full":
            from layersearch.models.precision import plan_head

            return {"head": plan_head(model, plan)}
        return {}
