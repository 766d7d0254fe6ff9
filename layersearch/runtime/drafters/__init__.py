"""Drafters: where draft tokens come from (one module each; their base class is
:class:`~layersearch.runtime.step.Drafter`).

:data:`DRAFTERS` is the one registry of drafters: name -> :class:`DrafterEntry`, the factory and
what the drafter needs (a plan, a draft model, a head, ...). Everything above the runtime (the
spec's checks, the command line, bench, tune's space and report, the builder) reads these
declarations and never a drafter's name, so a new drafter is its module plus one entry here.
This package stays light (no torch until a drafter is made): the CLI's drafter choices (``drafter.name``)
come from the registry, and its parsers are built for the help text too. The classes below load on
first use.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol, TYPE_CHECKING, cast

from layersearch.common.errors import LayersearchError

if TYPE_CHECKING:  # (the registry imports no torch: its types come through base)
    from layersearch.runtime.drafters.base import Branching, DraftHead, DraftModel
    from layersearch.runtime.step import Drafter


@dataclass(frozen=True)
class DrafterParts:
    """What a drafter is made from; a factory reads the parts its entry declares (the others are None).

    ``draft_model``: an independent causal LM sharing the target's tokenizer; ``branching``: the
    verifier's token-tree widening; ``head``: a reduced draft head (FR-Spec's); ``quant``: "int8"
    or "int4", the drafter's own draft (the plan's kept sub-layers and the head) in that precision."""

    draft_model: DraftModel | None = None
    branching: Branching | None = None
    head: DraftHead | None = None
    quant: str | None = None


class DrafterFactory(Protocol):
    """Makes a drafter from its parts (it imports its module when called)."""

    def __call__(self, parts: DrafterParts, /) -> Drafter:
        """The drafter made from ``parts``."""
        ...


@dataclass(frozen=True)
class DrafterEntry:
    """A registered drafter: its factory and what it needs.

    ``takes_plan``: without a draft model it drafts with the target under the mask source's plan
    (so it needs a mask); ``takes_draft_model``: it may draft with an independent draft model
    instead; ``needs_draft_model``: it drafts only with one (and so takes one); ``takes_head``: a reduced draft head
    (a draft vocabulary) applies; ``takes_quant``: its own draft (no draft model) may run in int8 or int4;
    ``branches``: it drafts token trees for tree verification; ``mixes``: it chooses between
    sources step by step (a lookup, a model), so a latency profile cannot predict it and SD²
    steering trained for a draft model cannot reach that model; ``words``: where its drafts come
    from, for reports (``{draft}``: the model it runs, in words)."""

    make: DrafterFactory
    takes_plan: bool = False
    takes_draft_model: bool = False
    needs_draft_model: bool = False
    takes_head: bool = False
    takes_quant: bool = False
    branches: bool = False
    mixes: bool = False
    words: str = "{draft}"

    def __post_init__(self) -> None:
        if self.needs_draft_model and not self.takes_draft_model:
            raise LayersearchError("a drafter that needs a draft model takes one: declare takes_draft_model too")

    @property
    def runs_model(self) -> bool:
        """Whether its drafts come from a model's forwards (else from the text alone)."""
        return self.takes_plan or self.takes_draft_model

    @property
    def predicted(self) -> bool:
        """Whether a latency profile predicts its speed: it drafts with the plan alone."""
        return self.takes_plan and not self.mixes

    def described(self, draft: str | None) -> str:
        """Where its drafts come from in words; ``draft``: the model it runs (None: it runs none)."""
        return self.words.format(draft=draft or "no model")


def _layer_skip(parts: DrafterParts) -> Drafter:
    if parts.draft_model is not None:
        from layersearch.runtime.drafters.model import ModelDrafter

        return ModelDrafter(cast(Any, parts.draft_model), head=parts.head)  # a transformers model (typed as a Module)
    from layersearch.runtime.drafters.layer_skip import LayerSkipDrafter

    return LayerSkipDrafter(parts.branching, head=parts.head, quant=parts.quant)


def _prompt_lookup(parts: DrafterParts) -> Drafter:
    from layersearch.runtime.drafters.prompt_lookup import PromptLookupDrafter

    return PromptLookupDrafter()


def _hybrid(parts: DrafterParts) -> Drafter:
    from layersearch.runtime.drafters.hybrid import HybridDrafter

    return HybridDrafter(fallback=_layer_skip(parts))


#: The drafters: name -> entry. ``layer-skip`` drafts with the target under the plan (Self-SD,
#: SWIFT, KnapSpec), or with the spec's draft model in its place; ``hybrid`` looks the
#: continuation up in the context first and falls back to either.
DRAFTERS: dict[str, DrafterEntry] = {
    "layer-skip": DrafterEntry(_layer_skip, takes_plan=True, takes_draft_model=True, takes_head=True, takes_quant=True,
                               branches=True),
    "prompt-lookup": DrafterEntry(_prompt_lookup, words="prompt lookup (n-grams of the context)"),
    "hybrid": DrafterEntry(_hybrid, takes_plan=True, takes_draft_model=True, takes_head=True, takes_quant=True,
                           branches=True, mixes=True, words="prompt lookup, else {draft}"),
}
#: The drafter a spec names when it names none: bench's mask rows draft with it.
DEFAULT_DRAFTER = "layer-skip"


def drafter_entry(name: str) -> DrafterEntry:
    """The registry's entry for ``name`` (one error naming the choices for an unknown one)."""
    entry = DRAFTERS.get(name)
    if entry is None:
        raise LayersearchError(f"unknown drafter {name!r} (choose from {', '.join(DRAFTERS)})")
    return entry


def make_drafter(name: str, *, draft_model: DraftModel | None = None, branching: Branching | None = None,
                 head: DraftHead | None = None, quant: str | None = None) -> Drafter:
    """The drafter ``name`` made from the parts its entry declares: ``draft_model`` (an
    independent model), ``head`` (a DraftHead, e.g. FR-Spec's), ``quant`` ("int8" or "int4": its
    own draft in that precision, without a draft model); ``branching`` (token trees) reaches only a drafter
    that branches. A part it does not take is one error."""
    entry = drafter_entry(name)
    if draft_model is not None and not entry.takes_draft_model:
        raise LayersearchError(f"drafter {name!r} takes no draft model")
    if draft_model is None and entry.needs_draft_model:
        raise LayersearchError(f"drafter {name!r} needs a draft model")
    if head is not None and not entry.takes_head:
        raise LayersearchError(f"drafter {name!r} runs no model head, so a reduced draft vocabulary has nothing to restrict")
    if quant is not None and (draft_model is not None or not entry.takes_quant):
        raise LayersearchError(f"drafter {name!r} " + ("drafts with its draft model, whose weights the loader quantizes"
                               if draft_model is not None else "runs no draft of its own to quantize"))
    parts = DrafterParts(draft_model, branching if entry.branches else None, head, quant)
    return entry.make(parts)


# Public name -> the runtime module defining it, imported on first access (PEP 562).
_LAZY = {
    "DraftHead": "drafters.base",
    "StepRequest": "step",
    "Drafter": "step",
    "Proposal": "step",
    "draft_chain": "drafters.layer_skip",
    "HybridDrafter": "drafters.hybrid",
    "LayerSkipDrafter": "drafters.layer_skip",
    "ModelDrafter": "drafters.model",
    "PromptLookupDrafter": "drafters.prompt_lookup",
    "lookup_continuation": "drafters.prompt_lookup",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"layersearch.runtime.{module}"), name)


__all__ = ["DEFAULT_DRAFTER", "DRAFTERS", "DrafterEntry", "DrafterFactory", "DrafterParts", "drafter_entry", "make_drafter",
           *sorted(_LAZY)]
