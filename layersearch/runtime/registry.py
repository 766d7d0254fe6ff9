"""The plug-in registries of the runtime: plain tables, name -> factory.

The lookahead rules and verifiers that need no trained file are listed here (drafters in
:mod:`layersearch.runtime.drafters`). Factories import their module when called: this module
stays light (no torch), since the CLI builds its ``choices`` from these names for the help text
too. The runtime's modules import the tables from here, never from the package ``__init__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from layersearch.common.errors import LayersearchError

if TYPE_CHECKING:  # (this module imports no torch: the types come from the modules the factories load)
    from layersearch.runtime.draft_policy import DraftPolicy
    from layersearch.runtime.drafters.base import Branching
    from layersearch.runtime.step import Lookahead, Verifier


def _static(settings: DraftPolicy) -> Lookahead:
    from layersearch.runtime.lookahead import StaticLookahead

    return StaticLookahead(settings.max_draft)


def _confidence(settings: DraftPolicy) -> Lookahead:
    from layersearch.runtime.lookahead import ConfidenceLookahead

    return ConfidenceLookahead(settings.max_draft, settings.threshold)


def _adaptive(settings: DraftPolicy) -> Lookahead:
    from layersearch.runtime.lookahead import AdaptiveLookahead

    return AdaptiveLookahead.starting_at(settings.max_draft, settings.threshold)


def _heuristic(settings: DraftPolicy) -> Lookahead:
    from layersearch.runtime.lookahead import HeuristicLookahead

    return HeuristicLookahead(settings.max_draft, ceiling=max(32, settings.max_draft))


def _roc(settings: DraftPolicy) -> Lookahead:
    from layersearch.runtime.roc_lookahead import ROCLookahead

    return ROCLookahead(settings.max_draft, settings.threshold)


#: A lookahead rule's factory: the draft settings -> the rule.
LookaheadFactory = Callable[["DraftPolicy"], "Lookahead"]
#: A verifier's factory: () -> (the verifier, the branching of the drafts it checks; None = chains).
VerifierFactory = Callable[[], "tuple[Verifier, Branching | None]"]

#: Lookahead rules: name -> factory(settings) -> Lookahead.
LOOKAHEADS: dict[str, LookaheadFactory] = {
    "static": _static,
    "confidence": _confidence,
    "adaptive": _adaptive,
    "heuristic": _heuristic,
    "roc": _roc,
}


def _chain() -> tuple[Verifier, Branching | None]:
    from layersearch.runtime.verification import ChainVerifier

    return ChainVerifier(), None


def _tree() -> tuple[Verifier, Branching | None]:
    from layersearch.runtime.tree import TopKBranching, TreeVerifier

    return TreeVerifier(), TopKBranching()


#: Verifiers: name -> factory() -> (verifier, branching of the drafts it checks, None = chains).
VERIFIERS: dict[str, VerifierFactory] = {
    "chain": _chain,
    "tree": _tree,
}

#: The lookahead rules' names, in the registry's order.
LOOKAHEAD_NAMES = tuple(LOOKAHEADS)


def lookahead_named(name: str, settings: DraftPolicy) -> Lookahead:
    """The rule called ``name`` (one of :data:`LOOKAHEAD_NAMES`) with these settings
    (:meth:`DraftPolicy.lookahead <layersearch.runtime.draft_policy.DraftPolicy.lookahead>` calls it)."""
    factory = LOOKAHEADS.get(name)
    if factory is None:
        raise LayersearchError(f"unknown lookahead {name!r} (choose from {', '.join(LOOKAHEAD_NAMES)})")
    return factory(settings)
