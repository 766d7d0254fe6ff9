"""Draft settings as one value: the cap and the confidence threshold.

:class:`DraftPolicy` is what a spec's ``lookahead.max_draft`` and ``lookahead.threshold`` describe; :meth:`DraftPolicy.lookahead` turns it into the lookahead
rule the decode loop runs (see :mod:`layersearch.runtime.lookahead` for all rules).
"""

from __future__ import annotations

from dataclasses import dataclass

from layersearch.common.errors import LayersearchError
from layersearch.runtime.registry import lookahead_named
from layersearch.runtime.settings import DRAFT_THRESHOLD, MAX_DRAFT, LookaheadSettings
from layersearch.runtime.lookahead import ConfidenceLookahead
from layersearch.runtime.step import Lookahead


@dataclass(frozen=True)
class DraftPolicy:
    """How long drafts get: a hard cap and a confidence threshold (0 disables it)."""

    max_draft: int = MAX_DRAFT
    confidence_threshold: float = DRAFT_THRESHOLD

    def __post_init__(self) -> None:
        if self.max_draft < 1:
            raise LayersearchError(f"max_draft must be >= 1, got {self.max_draft}", fields="max_draft")
        if not 0 <= self.confidence_threshold <= 1:
            raise LayersearchError(f"draft threshold must be in [0, 1], got {self.confidence_threshold}")

    @property
    def settings(self) -> LookaheadSettings:
        """These settings as a lookahead rule's factory takes them."""
        return LookaheadSettings(self.max_draft, self.confidence_threshold)

    def lookahead(self, name: str | None = None) -> Lookahead:
        """The rule named ``name`` with these settings (``"adaptive"``: Self-SD's adaptive
        threshold); by default the confidence rule."""
        if name is not None:
            return lookahead_named(name, self.settings)
        return ConfidenceLookahead(self.max_draft, self.confidence_threshold)
