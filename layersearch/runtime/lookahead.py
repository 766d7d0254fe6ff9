"""Lookahead rules: after each drafted position, whether to draft another token.

A rule is an immutable value. The drafter asks :meth:`keep_drafting` with the draft's
distribution for the next position *before* a token is drawn from it, so a stop decision
never biases speculative sampling (it reads only the draft's own distribution). After each
verification the loop calls :meth:`update` with the step's :class:`StepOutcome` and keeps the
rule it returns. ``max_draft`` caps every draft; a controller may change it
(:meth:`with_max_draft`, e.g. KnapSpec's gamma).

Rules here:

* :class:`StaticLookahead`      always ``max_draft`` tokens (gpt-fast, Leviathan et al.).
* :class:`ConfidenceLookahead`  stop when the top-1 probability < threshold (Self-SD, SWIFT).
* :class:`AdaptiveLookahead`    Self-SD's adaptive threshold, moved by the acceptance rate.
* :class:`HeuristicLookahead`   transformers' "heuristic" schedule: +2 after a fully accepted
  draft, -1 otherwise.
* :class:`~layersearch.runtime.roc_lookahead.ROCLookahead`  transformers' assisted-generation
  default: stop after a token below a threshold learned from an ROC curve of past drafts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from layersearch.common.errors import LayersearchError
from layersearch.runtime.settings import DRAFT_THRESHOLD, MAX_DRAFT
from layersearch.runtime.step import DraftPosition, Lookahead, StepOutcome


def _check_max(max_draft: int) -> None:
    if isinstance(max_draft, bool) or not isinstance(max_draft, int) or max_draft < 1:
        raise LayersearchError(f"max_draft must be an integer >= 1, got {max_draft!r}", fields="max_draft")


def _check_threshold(threshold: float) -> None:
    if not 0 <= threshold <= 1:
        raise LayersearchError(f"draft threshold must be in [0, 1], got {threshold}")


@dataclass(frozen=True)
class _CappedRule(Lookahead):
    """Shared parts: a validated ``max_draft`` (the base's defaults: no adaptation, the cap its ceiling)."""

    max_draft: int = MAX_DRAFT

    def __post_init__(self) -> None:
        _check_max(self.max_draft)


@dataclass(frozen=True)
class StaticLookahead(_CappedRule):
    """Always draft ``max_draft`` tokens."""

    reads_confidence = False

    def keep_drafting(self, position: DraftPosition) -> bool:
        return True


@dataclass(frozen=True)
class ConfidenceLookahead(_CappedRule):
    """Stop when the draft's top-1 probability falls below ``threshold`` (0 = never)."""

    threshold: float = DRAFT_THRESHOLD

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_threshold(self.threshold)

    def keep_drafting(self, position: DraftPosition) -> bool:
        return self.threshold <= 0 or position.confidence >= self.threshold


@dataclass(frozen=True)
class AdaptiveThreshold:
    """Self-SD's adaptive stop threshold, updated from each verification's matchness.

    EMA (0.5) of the step's acceptance share; below 0.9 the threshold rises by 0.01 (draft
    less), otherwise it falls by 0.01; the threshold in use is an EMA (0.9) of that.
    """

    raw: float
    value: float
    matchness: float = 1.0

    @classmethod
    def start(cls, threshold: float) -> "AdaptiveThreshold":
        """Initial state at ``threshold``."""
        return cls(raw=threshold, value=threshold)

    def update(self, accepted: int, drafted: int) -> "AdaptiveThreshold":
        """State after a verification that accepted ``accepted`` of ``drafted`` tokens."""
        if drafted == 0:
            return self
        matchness = 0.5 * self.matchness + 0.5 * accepted / drafted
        raw = self.raw + (0.01 if matchness < 0.9 else -0.01)
        raw = min(1.0, max(0.0, raw))
        return replace(self, raw=raw, value=0.9 * self.value + 0.1 * raw, matchness=matchness)


@dataclass(frozen=True)
class AdaptiveLookahead(_CappedRule):
    """Self-SD's confidence rule whose threshold follows the acceptance rate."""

    state: AdaptiveThreshold = field(default_factory=lambda: AdaptiveThreshold.start(DRAFT_THRESHOLD))

    @classmethod
    def starting_at(cls, max_draft: int, threshold: float) -> "AdaptiveLookahead":
        """The rule with its threshold starting at ``threshold``."""
        _check_threshold(threshold)
        return cls(max_draft, AdaptiveThreshold.start(threshold))

    def keep_drafting(self, position: DraftPosition) -> bool:
        return position.confidence >= self.state.value

    def update(self, outcome: StepOutcome) -> "Lookahead":
        return replace(self, state=self.state.update(outcome.accepted, outcome.drafted))


@dataclass(frozen=True)
class HeuristicLookahead(_CappedRule):
    """transformers' ``num_assistant_tokens_schedule="heuristic"``: the draft length grows by 2
    after a step whose draft was accepted whole and shrinks by 1 (not below 1) otherwise.
    ``max_draft`` is the current length; ``ceiling`` bounds its growth."""

    ceiling: int = 32
    reads_confidence = False

    def keep_drafting(self, position: DraftPosition) -> bool:
        return True

    def update(self, outcome: StepOutcome) -> "Lookahead":
        if outcome.drafted == 0:
            return self
        grown = self.max_draft + 2 if outcome.accepted == outcome.drafted else self.max_draft - 1
        return replace(self, max_draft=max(1, min(self.ceiling, grown)))
