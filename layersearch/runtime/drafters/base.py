"""What drafters share: the parts a drafter is made from (a draft model, a reduced head, token-tree
branching) and small helpers. The drafter's base class and the values it reads and returns are the
step's (:mod:`layersearch.runtime.step`: :class:`~layersearch.runtime.step.Drafter`,
:class:`~layersearch.runtime.step.StepRequest`, :class:`~layersearch.runtime.step.Proposal`); the
chain-drafting loop the model-based drafters share is
:func:`~layersearch.runtime.drafters.layer_skip.draft_chain`.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import torch

from layersearch.runtime.forward import Head
from layersearch.runtime.step import DraftPosition

# An independent draft model: a causal LM sharing the target's tokenizer.
DraftModel = torch.nn.Module
# branching(position, chosen_token) -> other candidates to verify as leaves beside it (token trees).
Branching = Callable[[DraftPosition, int], tuple[int, ...]]


def vocab_of(model: torch.nn.Module) -> int:
    """The rows of ``model``'s LM head: its output vocabulary."""
    lm: Any = model  # a transformers model: its methods are not in torch's Module type
    return int(lm.get_output_embeddings().out_features)


def device_of(model: torch.nn.Module) -> torch.device:
    """The device ``model`` (a transformers model) runs on."""
    lm: Any = model
    return torch.device(lm.device)


class DraftHead(Protocol):
    """Where a drafter's reduced LM head comes from (FR-Spec's :class:`~layersearch.frspec.head.DraftHeads`):
    the head for the model it drafts with, its rows in int8 when ``int8``, in int4 in groups of
    ``int4_group`` when given. The drafters take any such object, so the runtime imports no method."""

    def for_model(self, model: torch.nn.Module, int8: bool = False, int4_group: int | None = None) -> Head:
        """The reduced head of ``model``'s LM head."""
        ...


def point_mass(tokens: tuple[int, ...], vocab: int, device: torch.device) -> torch.Tensor:
    """One-hot rows [k, vocab]: the draft distribution of a deterministic proposal."""
    rows = torch.zeros(len(tokens), vocab, device=device)
    if tokens:
        rows[torch.arange(len(tokens)), torch.tensor(tokens)] = 1.0
    return rows
