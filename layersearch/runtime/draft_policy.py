"""Draft settings as one value: the cap and the threshold.

:class:`DraftPolicy` is what a spec's ``lookahead.max_draft`` and ``lookahead.threshold`` describe,
what every lookahead rule's factory (:data:`~layersearch.runtime.registry.LOOKAHEADS`) is
configured with, and :meth:`DraftPolicy.lookahead` turns it into the rule the decode loop runs
(see :mod:`layersearch.runtime.lookahead` for all rules). Like the registry, it imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from layersearch.common.errors import LayersearchError
from layersearch.runtime.registry import lookahead_named
from layersearch.runtime.settings import DRAFT_THRESHOLD, MAX_DRAFT

if TYPE_CHECKING:
    from layersearch.runtime.step import Lookahead


@dataclass(frozen=True)
class DraftPolicy:
    """How long drafts get: a hard cap and the draft threshold (a rule reads the settings it
    needs: the confidence rule stops below the threshold, 0 disables it; the adaptive rule starts
    there). A rule with other settings adds fields here."""

    max_draft: int = MAX_DRAFT
    threshold: float = DRAFT_THRESHOLD

    def __post_init__(self) -> None:
        if self.max_draft < 1:
            raise LayersearchError(f"max_draft must be >= 1, got {self.max_draft}", fields="max_draft")
        if not 0 <= self.threshold <= 1:
            raise LayersearchError(f"draft threshold must be in [0, 1], got {self.threshold}")

    def lookahead(self, name: str | None = None) -> Lookahead:
        """The rule named ``name`` with these settings (``"adaptive"``: Self-SD's adaptive
        threshold); by default the confidence rule."""
        return lookahead_named("confidence" if name is None else name, self)
