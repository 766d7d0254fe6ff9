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

:func:`draft_chain` is the one-token-at-a-time drafting loop this drafter runs; the draft-model
drafter runs it too, over its own model.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import torch

from layersearch.masks.mask import SkipMask
from layersearch.runtime.drafters.base import Branching, DraftHead
from layersearch.runtime.step import DeviceIds, DraftPosition, Drafter, HostIds, Proposal, StepRequest, to_host


class LayerSkipDrafter(Drafter):
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


def draft_chain(
    request: StepRequest,
    next_logits: Callable[[DeviceIds, int], torch.Tensor],
    name: str,
    branching: Branching | None = None,
) -> Proposal:
    """Draft one token at a time: ``next_logits(token, index)`` -> [vocab] logits for draft
    position ``index`` after ``token`` (a [1] tensor on the model's device); the lookahead may
    stop before a token is drawn. Tokens stay on the device: a rule that reads no confidence
    (``reads_confidence`` False) drafts without a single host read. With ``branching`` (greedy
    only) each position also gets alternative candidates: ``branching(position, chosen_token)``
    -> tokens to verify as leaves beside it."""
    tokens: list[torch.Tensor] = []  # [1] each, DeviceIds
    probs: list[torch.Tensor] = []
    branches: list[tuple[int, ...]] = []
    greedy = request.sampling.greedy
    branching = branching if greedy else None
    reads_confidence = request.lookahead.reads_confidence
    # Greedy under a rule that reads no confidence and without branches: the argmax is all a
    # position needs, so no DraftPosition is built (the same tokens, no host read).
    argmax_only = greedy and not reads_confidence and branching is None
    token = request.last_on_device  # [1]
    forwards = 0
    confidences: list[float] = []  # top-1 probability at each drafted position (rules learn from them)
    for index in range(request.limit):
        logits = next_logits(token, index)  # [vocab]
        forwards += 1
        if argmax_only:
            token = DeviceIds(logits.argmax(-1, keepdim=True))  # [1]
            tokens.append(token)
            continue
        view = DraftPosition(index, logits, request.sampling, confidences[-1] if confidences else 1.0)
        if reads_confidence and not request.lookahead.keep_drafting(view):
            break
        if greedy:
            token = DeviceIds(logits.argmax(-1, keepdim=True))  # [1]
            if branching is not None:
                branches.append(branching(view, to_host(token)[0]))
        else:
            token = DeviceIds(torch.multinomial(view.probs, 1, generator=request.generator))  # [1]
            probs.append(view.probs)
        tokens.append(token)
        if reads_confidence:
            confidences.append(view.confidence)
    ids = DeviceIds(torch.cat(tokens)) if tokens else HostIds(torch.zeros(0, dtype=torch.long))  # [k]
    return Proposal(
        ids, torch.stack(probs) if probs else None, name, forwards,
        tuple(branches) if branching is not None else None, tuple(confidences),
    )
