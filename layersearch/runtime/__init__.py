"""The runtime: the decode loop (:mod:`~layersearch.runtime.loop`) and its plug-in points.

The registries of the plug-ins that need no trained file live in
:mod:`layersearch.runtime.registry` (re-exported here) and :mod:`layersearch.runtime.drafters`
(drafters): name -> factory, so a new lookahead rule or verifier is one module and one line
there. This module stays light (no torch), since the CLI builds its ``choices`` from these
names for the help text too. Mask sources (controllers) sit with their methods: :mod:`layersearch.decoder.sources`.
"""

from layersearch.runtime.registry import (
    LOOKAHEADS,
    VERIFIERS,
    LookaheadFactory,
    VerifierFactory,
)
from layersearch.runtime.draft_policy import DraftPolicy
from layersearch.runtime.settings import DRAFT_THRESHOLD, MAX_DRAFT

__all__ = ["DRAFT_THRESHOLD", "LOOKAHEADS", "MAX_DRAFT", "VERIFIERS", "DraftPolicy", "LookaheadFactory",
           "VerifierFactory"]
