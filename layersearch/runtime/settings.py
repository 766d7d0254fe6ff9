"""The lookahead settings every default comes from: the longest draft and the draft threshold."""

from __future__ import annotations

from dataclasses import dataclass


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
