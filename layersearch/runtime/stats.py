"""Statistics of one generation: M, alpha, tokens/s and where the time went."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DecodeStats:
    """Counters and timings of one generation (batch size 1).

    ``target_forwards`` counts verification forwards after the prefill; ``M`` is the number of
    tokens produced per such forward, ``alpha`` the share of drafted tokens the target
    accepted (None when nothing was drafted, e.g. with an empty mask).
    """

    new_tokens: int
    target_forwards: int
    drafted: int
    accepted: int
    prefill_seconds: float
    draft_seconds: float
    verify_seconds: float
    total_seconds: float
    generations: int = 1  # how many generations these counts pool (see combine)
    draft_forwards: int = 0  # includes the forward whose low confidence stopped a draft
    forward_seconds: float = 0.0  # inside model forwards (prefill, draft, verify)
    draft_lengths: tuple[int, ...] = field(default=(), repr=False)
    selections: tuple[dict[str, Any], ...] = field(default=(), repr=False)

    @property
    def mean_accepted_length(self) -> float:
        """M: decode-phase tokens per target forward (each prefill's token excluded)."""
        return (self.new_tokens - self.generations) / self.target_forwards if self.target_forwards else 1.0

    @property
    def acceptance_rate(self) -> float | None:
        """alpha: accepted / drafted tokens."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per wall-clock second, prefill included."""
        return self.new_tokens / self.total_seconds if self.total_seconds > 0 else 0.0

    @property
    def other_seconds(self) -> float:
        """Time outside the prefill, draft and verify forwards (bookkeeping)."""
        return max(0.0, self.total_seconds - self.prefill_seconds - self.draft_seconds - self.verify_seconds)

    @property
    def bookkeeping_seconds(self) -> float | None:
        """Time outside model forwards (sampling, verification, cache cuts, Python), if measured."""
        return max(0.0, self.total_seconds - self.forward_seconds) if self.forward_seconds else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {
            "new_tokens": self.new_tokens,
            "target_forwards": self.target_forwards,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "mean_accepted_length": self.mean_accepted_length,
            "acceptance_rate": self.acceptance_rate,
            "tokens_per_second": self.tokens_per_second,
            "prefill_seconds": self.prefill_seconds,
            "draft_seconds": self.draft_seconds,
            "verify_seconds": self.verify_seconds,
            "other_seconds": self.other_seconds,
            "draft_forwards": self.draft_forwards,
            "bookkeeping_seconds": self.bookkeeping_seconds,
            "total_seconds": self.total_seconds,
            **({"selections": list(self.selections)} if self.selections else {}),
        }


def combine(stats: list[DecodeStats]) -> DecodeStats:
    """Pool several generations (counts and seconds add up)."""
    return DecodeStats(
        new_tokens=sum(s.new_tokens for s in stats),
        target_forwards=sum(s.target_forwards for s in stats),
        drafted=sum(s.drafted for s in stats),
        accepted=sum(s.accepted for s in stats),
        prefill_seconds=sum(s.prefill_seconds for s in stats),
        draft_seconds=sum(s.draft_seconds for s in stats),
        verify_seconds=sum(s.verify_seconds for s in stats),
        total_seconds=sum(s.total_seconds for s in stats),
        generations=sum(s.generations for s in stats),
        draft_forwards=sum(s.draft_forwards for s in stats),
        forward_seconds=sum(s.forward_seconds for s in stats),
    )
