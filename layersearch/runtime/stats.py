"""Statistics of one generation: M, alpha, tokens/s, where the time went, and one record per
decoding step (drafted / accepted counts and which drafter and mask made the step)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layersearch.runtime.step import StepOutcome


@dataclass(frozen=True)
class DecodeStats:
    """Counters and timings of one generation (batch size 1).

    ``target_forwards`` counts verification forwards after the prefill; ``M`` is the number of
    tokens produced per such forward, ``alpha`` the share of drafted tokens the target
    accepted (None when nothing was drafted, e.g. with an empty mask).

    The phases, defined once for every row (our loop and transformers' peers alike):
    ``prefill_seconds`` is the time to the first delivered token(s) without any draft-side
    prefill (the target's prompt forward; for transformers' assisted generation also its first
    verification, which delivers ``first_tokens`` tokens at once); ``draft_prefill_seconds`` is
    the draft model's own prompt forward, a column of its own; the decode phase is everything
    else, and its tokens are those delivered after the first delivery (:attr:`decode_seconds`,
    :attr:`decode_tokens`, and vLLM's TTFT / TPOT: :attr:`ttft`, :attr:`tpot`).
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
    steps: tuple[StepOutcome, ...] = field(default=(), repr=False)  # one per decoding step, in order
    selections: tuple[dict[str, Any], ...] = field(default=(), repr=False)
    first_tokens: int = 1  # tokens delivered with the first new token (pooled: summed over generations)
    draft_prefill_seconds: float = 0.0  # the draft model's own prompt forward (in neither phase)
    path: str = "eager"  # how the forwards ran: "captured" (compiled, static cache) or "eager"
    path_reason: str = ""  # why a decoder asked to compile ran eagerly ("" when it did not ask, or did)
    compile_seconds: float = 0.0  # first calls of forwards compiled in this generation (in neither phase)

    @property
    def run_seconds(self) -> float:
        """Wall-clock seconds of the generation with compiling taken out (what tokens/s divides by)."""
        return max(self.total_seconds - self.compile_seconds, 0.0)

    @property
    def decode_seconds(self) -> float:
        """Seconds after the first delivery, the draft model's prefill and compiling taken out."""
        return max(self.total_seconds - self.prefill_seconds - self.draft_prefill_seconds - self.compile_seconds, 0.0)

    @property
    def decode_tokens(self) -> int:
        """Tokens delivered after each generation's first delivery."""
        return max(self.new_tokens - self.first_tokens, 0)

    @property
    def ttft(self) -> float:
        """Time to first token (seconds, mean over the pooled generations): the prefill."""
        return self.prefill_seconds / self.generations if self.generations else 0.0

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first delivery (seconds), as vLLM reports it."""
        return self.decode_seconds / self.decode_tokens if self.decode_tokens else None

    @property
    def draft_lengths(self) -> tuple[int, ...]:
        """Tokens drafted at each decoding step."""
        return tuple(s.drafted for s in self.steps)

    @property
    def accept_lengths(self) -> tuple[int, ...]:
        """Tokens emitted per target forward at every decoding step (Spec-Bench's field)."""
        return tuple(s.emitted for s in self.steps)

    def drafter_counts(self) -> dict[str, int]:
        """How many steps each drafter produced (steps without a draft count as "none")."""
        counts: dict[str, int] = {}
        for s in self.steps:
            key = s.drafter if s.drafted else "none"
            counts[key] = counts.get(key, 0) + 1
        return counts

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
        """Generated tokens per wall-clock second, prefill included, compiling excluded (its own figure)."""
        return self.new_tokens / self.run_seconds if self.run_seconds > 0 else 0.0

    @property
    def other_seconds(self) -> float:
        """Time outside the prefill, the draft model's prefill, draft and verify forwards and compiling (bookkeeping)."""
        return max(0.0, self.run_seconds - self.prefill_seconds - self.draft_prefill_seconds - self.draft_seconds
                   - self.verify_seconds)

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
            "draft_prefill_seconds": self.draft_prefill_seconds,
            "ttft": self.ttft,
            "tpot": self.tpot,
            "first_tokens": self.first_tokens,
            "draft_seconds": self.draft_seconds,
            "verify_seconds": self.verify_seconds,
            "other_seconds": self.other_seconds,
            "draft_forwards": self.draft_forwards,
            "bookkeeping_seconds": self.bookkeeping_seconds,
            "total_seconds": self.total_seconds,
            "path": self.path,
            **({"path_reason": self.path_reason} if self.path_reason else {}),
            "compile_seconds": self.compile_seconds,
            "accept_lengths": list(self.accept_lengths),
            "drafters": self.drafter_counts(),
            **({"selections": list(self.selections)} if self.selections else {}),
        }

    def step_records(self) -> list[dict[str, Any]]:
        """Every step as a JSON-ready dict (DISCO's oracle and per-step analyses read these)."""
        return [s.to_dict() for s in self.steps]


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
        steps=tuple(step for s in stats for step in s.steps),
        first_tokens=sum(s.first_tokens for s in stats),
        draft_prefill_seconds=sum(s.draft_prefill_seconds for s in stats),
        path="/".join(sorted({s.path for s in stats})) if stats else "eager",
        path_reason="; ".join(sorted({s.path_reason for s in stats if s.path_reason})),
        compile_seconds=sum(s.compile_seconds for s in stats),
    )


def format_stats(stats: dict[str, Any]) -> str:
    """One human-readable line of a :meth:`DecodeStats.to_dict`: M, alpha, tokens/s and the time split."""
    alpha = stats.get("acceptance_rate")
    alpha_text = "n/a" if alpha is None else f"{alpha:.2f}"
    return (
        f"M={stats['mean_accepted_length']:.2f} alpha={alpha_text} "
        f"tokens/s={stats['tokens_per_second']:.1f} "
        f"draft={stats['draft_seconds']:.2f}s verify={stats['verify_seconds']:.2f}s "
        f"other={stats['other_seconds'] + stats['prefill_seconds']:.2f}s"
        + (f" path=captured compile={stats.get('compile_seconds', 0.0):.1f}s" if stats.get("path") == "captured" else "")
        + (f" eager: {stats['path_reason']}" if stats.get("path_reason") else "")
    )
