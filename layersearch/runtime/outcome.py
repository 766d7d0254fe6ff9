"""What one decoding step produced: the feedback every plug-in point receives.

After each verification the loop builds one :class:`StepOutcome` and hands it to the lookahead
rule (``update``), the drafter and the controller (``observe``), as transformers' candidate
generators get the number of matches. It is also the per-step record kept in
:class:`~layersearch.runtime.stats.DecodeStats`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from layersearch.masks.mask import SkipMask


@dataclass(frozen=True)
class StepOutcome:
    """One draft-and-verify step (or a plain step: ``drafted == 0``)."""

    step: int  # 0-based decoding step of this generation
    position: int  # cache length before the step (the newest emitted token sat here)
    drafted: int  # draft tokens proposed
    accepted: int  # of them accepted by the target
    emitted: int  # tokens this step added (accepted + the target's own, EOS / max_new may cut)
    drafter: str  # which drafter produced the draft ("layer-skip", "prompt-lookup", ...)
    mask: SkipMask | None  # the plan the draft ran: the controller's mask, or the drafter's plan of it (None: none)
    lookahead: str = ""  # the rule and its cap in force, e.g. "confidence:8"
    draft_forwards: int = 0  # draft model forwards spent (incl. the one whose low confidence stopped it)
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    extra: Mapping[str, Any] | None = None  # a drafter's or controller's own notes (JSON-ready)
    confidences: tuple[float, ...] = ()  # the draft's top-1 probability at each drafted position (chain drafts)
    host_reads: int = 0  # device-to-host reads the step made (layersearch.runtime.host)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready record (the mask as its short string)."""
        record = {
            "step": self.step,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "emitted": self.emitted,
            "drafter": self.drafter,
            "mask": None if self.mask is None else self.mask.short_string(),
            "lookahead": self.lookahead,
        }
        if self.extra:
            record.update(self.extra)
        return record
