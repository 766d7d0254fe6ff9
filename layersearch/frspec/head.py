"""A reduced-vocabulary draft head (FR-Spec): the draft scores only a subset of the vocabulary.

On a small model the LM head is a large share of a draft forward (SmolLM2-135M: 49,152 x 576,
a fifth of its weights; a 0.5B Qwen: 151,936 x 896, a quarter). FR-Spec drafts with only the
rows of the head that belong to the N most frequent tokens. :class:`VocabSubset` names those
tokens; :class:`SubsetHead` holds the head's rows for them, sliced once into one contiguous
``[N, hidden]`` matrix, and turns the final norm's hidden states into full-vocabulary logits
that are ``-inf`` outside the subset.

Why this stays lossless: only the *draft* uses the subset; the verifier runs the model's own
head. A greedy draft therefore never proposes a token outside the subset (it is simply never
accepted by accident either: verification compares with the full model's argmax). A sampled
draft draws from the softmax over the subset, i.e. a law that is zero outside it, and reports
exactly that law as q, so speculative sampling's residual ``max(p - q, 0)`` gives the missing
tokens their full mass back.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from layersearch.common.errors import LayersearchError
from layersearch.models.quantize import is_quantized_linear, quantized_like


@dataclass(frozen=True)
class VocabSubset:
    """The token ids a reduced draft head scores (sorted, unique), the tokenizer they belong to
    (a hash of its vocabulary) and ``n``, the count of most frequent tokens asked for (special
    and end tokens are added on top, so ``size`` may exceed ``n`` by a few)."""

    token_ids: tuple[int, ...]
    tokenizer: str
    n: int

    def __post_init__(self) -> None:
        ids = self.token_ids
        if not ids:
            raise LayersearchError("a vocabulary subset needs at least one token")
        if any(isinstance(t, bool) or not isinstance(t, int) for t in ids):
            raise LayersearchError("a vocabulary subset holds integer token ids")
        if ids[0] < 0 or any(a >= b for a, b in zip(ids, ids[1:])):
            raise LayersearchError("a vocabulary subset's token ids must be non-negative, sorted and unique")

    @property
    def size(self) -> int:
        """How many tokens the draft head scores."""
        return len(self.token_ids)


class SubsetHead:
    """The LM head of ``model`` restricted to ``subset``: its rows sliced once, kept contiguous."""

    def __init__(self, model: torch.nn.Module, subset: VocabSubset, int8: bool = False, int4_group: int | None = None) -> None:
        head = _lm_head(model)
        quantized = is_quantized_linear(head)  # an int8 draft model's head (models/quantize.py)
        self.int8 = int8
        self.int4_group = int4_group
        weight, bias = _head_tensors(head)  # [vocab, hidden], [vocab] or None
        self.vocab = int(weight.shape[0])
        if subset.token_ids[-1] >= self.vocab:
            raise LayersearchError(
                f"the draft vocabulary holds token id {subset.token_ids[-1]} but the model's vocabulary has "
                f"{self.vocab} ids: it was counted for another tokenizer"
            )
        self.subset = subset
        self.module = head  # the full head this was sliced from (a changed model is re-sliced)
        self.source = weight
        self.ids = torch.tensor(subset.token_ids, device=weight.device)  # [N]
        self.weight = weight.detach().index_select(0, self.ids).contiguous()  # [N, hidden]
        self.bias = None if bias is None else bias.detach().index_select(0, self.ids)  # [N]
        # The rows run in int8 when the head they came from is int8, or the plan asks for it; in
        # int4 when the plan asks (each row's groups are its own, so these are the int4 head's rows).
        self._quantized = _quantized_rows(self.weight, self.bias) if quantized or int8 else None
        if int4_group is not None and not quantized:
            from layersearch.models.int4 import Int4Linear

            self._quantized = Int4Linear(_rows_linear(self.weight, self.bias), int4_group, "the LM head")
        config = getattr(model, "config", None)
        # Gemma 2 (and Gemma 3 where set) squash the final logits: tanh(x / cap) * cap.
        self.softcap = getattr(getattr(config, "get_text_config", lambda: config)(), "final_logit_softcapping", None)

    def fits(self, model: torch.nn.Module) -> bool:
        """True when this head was sliced from ``model``'s own LM head."""
        head = _lm_head(model)
        return head is self.module and (is_quantized_linear(head) or head.weight is self.source)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary logits ``[n, vocab]`` from final-norm states ``hidden`` [n, hidden]:
        the subset's scores in their columns, ``-inf`` everywhere else."""
        if self._quantized is not None:
            scores = self._quantized(hidden)  # [n, N]
        else:
            scores = torch.nn.functional.linear(hidden, self.weight, self.bias)  # [n, N]
        if self.softcap:
            scores = torch.tanh(scores / self.softcap) * self.softcap
        full = scores.new_full((scores.shape[0], self.vocab), float("-inf"))  # [n, vocab]
        return full.index_copy_(1, self.ids, scores)


def _quantized_rows(weight: torch.Tensor, bias: torch.Tensor | None) -> torch.nn.Module:
    """The sliced rows ``weight`` [N, hidden] as an int8 Linear, like the head they came from."""
    return quantized_like(_rows_linear(weight, bias))


def _rows_linear(weight: torch.Tensor, bias: torch.Tensor | None) -> torch.nn.Linear:
    """The sliced rows ``weight`` [N, hidden] (and ``bias``) as a Linear of their own."""
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        linear.weight.copy_(weight)
        if bias is not None:
            linear.bias.copy_(bias)
    return linear


def _lm_head(model: torch.nn.Module) -> torch.nn.Module:
    """``model``'s LM head: a transformers model's output embedding."""
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if not isinstance(head, torch.nn.Module):
        raise LayersearchError(f"{type(model).__name__} has no LM head (get_output_embeddings) to draft with")
    return head


def _head_tensors(head: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The LM head's weight [vocab, hidden] (dequantized from an int8 head) and bias [vocab] or None."""
    if is_quantized_linear(head):
        return head.weight().dequantize(), head.bias()
    weight, bias = getattr(head, "weight", None), getattr(head, "bias", None)
    if not isinstance(weight, torch.Tensor):
        raise LayersearchError(f"an LM head needs a weight matrix; {type(head).__name__} has none")
    return weight, bias if isinstance(bias, torch.Tensor) else None


class DraftHeads:
    """A drafter's reduced head: sliced on first use for the model it drafts with, and again
    only if that model changes (a controller never swaps the model, so normally once)."""

    def __init__(self, subset: VocabSubset) -> None:
        self.subset = subset
        self._head: SubsetHead | None = None

    def for_model(self, model: torch.nn.Module, int8: bool = False, int4_group: int | None = None) -> SubsetHead:
        """The subset head of ``model``'s LM head (its rows in int8 when ``int8``, in int4 in
        groups of ``int4_group`` when given)."""
        head = self._head
        if head is None or not head.fits(model) or head.int8 != int8 or head.int4_group != int4_group:
            self._head = head = SubsetHead(model, self.subset, int8, int4_group)
        return head
