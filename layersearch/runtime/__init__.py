"""The runtime: the decode loop (:mod:`~layersearch.runtime.loop`) and its plug-in points.

The registries of the plug-ins that need no trained file live here and in
:mod:`layersearch.runtime.drafters` (drafters): name -> factory, so a new lookahead rule or
verifier is one module and one line below. Factories import their module when called: this
module stays light (no torch), since the CLI builds its ``choices`` from these names for
``--help`` too. Mask sources (controllers) sit with their methods: :mod:`layersearch.decoder.sources`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # (this module imports no torch: the types come from the modules the factories load)
    from layersearch.runtime.drafters.base import Branching
    from layersearch.runtime.lookahead import Lookahead
    from layersearch.runtime.verification import Verifier


#: The longest draft by default: every default of ``max_draft`` (the spec's, the CLI's, the
#: benches') is this one value.
MAX_DRAFT = 8
#: The draft's top-1 probability below which a confidence rule stops, by default.
DRAFT_THRESHOLD = 0.8


@dataclass(frozen=True)
class LookaheadSettings:
    """What a lookahead rule's factory is configured with: the longest draft and the draft
    threshold (a rule reads the settings it needs; one with other settings adds fields here)."""

    max_draft: int = MAX_DRAFT
    threshold: float = DRAFT_THRESHOLD


def _static(settings: LookaheadSettings) -> Lookahead:
    from layersearch.runtime.lookahead import StaticLookahead

    return StaticLookahead(settings.max_draft)


def _confidence(settings: LookaheadSettings) -> Lookahead:
    from layersearch.runtime.lookahead import ConfidenceLookahead

    return ConfidenceLookahead(settings.max_draft, settings.threshold)


def _adaptive(settings: LookaheadSettings) -> Lookahead:
    from layersearch.runtime.lookahead import AdaptiveLookahead

    return AdaptiveLookahead.starting_at(settings.max_draft, settings.threshold)


def _heuristic(settings: LookaheadSettings) -> Lookahead:
    from layersearch.runtime.lookahead import HeuristicLookahead

    return HeuristicLookahead(settings.max_draft, ceiling=max(32, settings.max_draft))


def _roc(settings: LookaheadSettings) -> Lookahead:
    from layersearch.runtime.roc_lookahead import ROCLookahead

    return ROCLookahead(settings.max_draft, settings.threshold)


#: A lookahead rule's factory: settings -> the rule.
LookaheadFactory = Callable[[LookaheadSettings], "Lookahead"]
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
