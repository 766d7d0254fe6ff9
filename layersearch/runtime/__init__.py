"""The runtime: the decode loop (:mod:`~layersearch.runtime.loop`) and its plug-in points.

The registries of the plug-ins that need no trained file live here and in
:mod:`layersearch.runtime.drafters` (drafters): name -> factory, so a new lookahead rule or
verifier is one module and one line below. Factories import their module when called: this
module stays light (no torch), since the CLI builds its ``choices`` from these names for
``--help`` too. Mask sources (controllers) sit with their methods: :mod:`layersearch.decoder.sources`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # (this module imports no torch: the types come from the modules the factories load)
    from layersearch.runtime.drafters.base import Branching
    from layersearch.runtime.lookahead import Lookahead
    from layersearch.runtime.verification import Verifier


def _static(max_tokens: int, threshold: float) -> Lookahead:
    from layersearch.runtime.lookahead import StaticLookahead

    return StaticLookahead(max_tokens)


def _confidence(max_tokens: int, threshold: float) -> Lookahead:
    from layersearch.runtime.lookahead import ConfidenceLookahead

    return ConfidenceLookahead(max_tokens, threshold)


def _adaptive(max_tokens: int, threshold: float) -> Lookahead:
    from layersearch.runtime.lookahead import AdaptiveLookahead

    return AdaptiveLookahead.starting_at(max_tokens, threshold)


def _heuristic(max_tokens: int, threshold: float) -> Lookahead:
    from layersearch.runtime.lookahead import HeuristicLookahead

    return HeuristicLookahead(max_tokens, ceiling=max(32, max_tokens))


def _roc(max_tokens: int, threshold: float) -> Lookahead:
    from layersearch.runtime.roc_lookahead import ROCLookahead

    return ROCLookahead(max_tokens, threshold)


#: A lookahead rule's factory: (max_tokens, threshold) -> the rule.
LookaheadFactory = Callable[[int, float], "Lookahead"]
#: A verifier's factory: () -> (the verifier, the branching of the drafts it checks; None = chains).
VerifierFactory = Callable[[], "tuple[Verifier, Branching | None]"]

#: Lookahead rules: name -> factory(max_tokens, threshold) -> Lookahead.
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
