"""The paper's other draft-length rules that the runtime lacks, as lookahead rules.

* :class:`RocConfidenceLookahead`  transformers' ``assistant_confidence_threshold``: stop when
  the draft's top-1 probability falls below a threshold that is re-fitted after every step
  from the ROC curve of (draft probability, matched) pairs seen so far, at the point that
  minimizes FPR + 3 FNR (transformers' candidate_generator.py; there with sklearn's roc_curve,
  here with numpy). transformers draws the low-confidence token before stopping; our rules
  decide before a token is drawn, as every lookahead rule here does.
* :class:`PerplexityLookahead`  disco.txt Table 2's "ppl SL": stop when the perplexity of the
  draft so far (including the next token) exceeds a threshold.

Both need the probabilities seen during the current draft, which a lookahead only gets one
position at a time; they keep them in a small scratch list (:class:`DraftTrace`) that is
reset at each draft's first position. The decision state itself stays in frozen fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from layersearch.runtime import MAX_DRAFT
from layersearch.runtime.step import DraftPosition, Lookahead, StepOutcome

HF_START_THRESHOLD = 0.4  # transformers' default assistant_confidence_threshold


class DraftTrace:
    """Top-1 probabilities of the positions of the current draft (scratch, not state)."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def see(self, position: DraftPosition) -> float:
        """Record this position's confidence (a new draft starts at index 0)."""
        if position.index == 0:
            self.values.clear()
        confidence = position.confidence
        self.values.append(confidence)
        return confidence


def roc_threshold(scores: np.ndarray, matched: np.ndarray) -> float | None:
    """The threshold minimizing FPR + 3 * FNR on the ROC curve (None without both classes).
    Thresholds are +inf and every distinct score, as sklearn.metrics.roc_curve returns them
    (without its dropping of collinear points, which never removes the minimum)."""
    scores, matched = np.asarray(scores, float), np.asarray(matched, bool)
    positives, negatives = int(matched.sum()), int((~matched).sum())
    if len(scores) <= 5 or positives == 0 or negatives == 0:
        return None
    order = np.argsort(-scores, kind="mergesort")
    scores, matched = scores[order], matched[order]
    last_of_value = np.r_[np.nonzero(np.diff(scores))[0], len(scores) - 1]  # a threshold per distinct score
    tpr = np.r_[0.0, np.cumsum(matched)[last_of_value] / positives]
    fpr = np.r_[0.0, np.cumsum(~matched)[last_of_value] / negatives]
    thresholds = np.r_[np.inf, scores[last_of_value]]
    return float(thresholds[int(np.argmin(fpr + 3 * (1 - tpr)))])


@dataclass(frozen=True)
class RocConfidenceLookahead(Lookahead):
    """transformers' confidence rule with its ROC re-fit (see the module docstring)."""

    reads_confidence = True  # a class attribute, not a field: it stops on the draft's confidence

    max_draft: int = MAX_DRAFT
    threshold: float = HF_START_THRESHOLD
    scores: tuple[float, ...] = ()
    matched: tuple[bool, ...] = ()
    trace: DraftTrace = field(default_factory=DraftTrace, compare=False, repr=False)

    def keep_drafting(self, position: DraftPosition) -> bool:
        return self.trace.see(position) >= self.threshold

    def update(self, outcome: StepOutcome) -> Lookahead:
        if outcome.drafted == 0:
            return self
        # As transformers pairs them: accepted tokens are matches, the first rejected one is not,
        # tokens after it are dropped.
        seen = min(outcome.drafted, outcome.accepted + 1)
        scores = self.scores + tuple(self.trace.values[:seen])
        matched = self.matched + (True,) * outcome.accepted + (False,) * (seen - outcome.accepted)
        fitted = roc_threshold(np.array(scores), np.array(matched))
        threshold = self.threshold if fitted is None else min(1.0, fitted)
        return replace(self, scores=scores, matched=matched, threshold=threshold)


@dataclass(frozen=True)
class PerplexityLookahead(Lookahead):
    """Stop when exp(mean -log p) over the draft's tokens so far and the next one exceeds
    ``threshold`` (greedy: p is the top-1 probability of each position)."""

    reads_confidence = True  # a class attribute, not a field: the perplexity is of the draft's confidence

    max_draft: int = MAX_DRAFT
    threshold: float = 2.0
    trace: DraftTrace = field(default_factory=DraftTrace, compare=False, repr=False)

    def keep_drafting(self, position: DraftPosition) -> bool:
        self.trace.see(position)
        return perplexity(self.trace.values) <= self.threshold


def perplexity(probabilities) -> float:
    """exp of the mean negative log of ``probabilities``."""
    logs = [-math.log(max(p, 1e-12)) for p in probabilities]
    return math.exp(sum(logs) / len(logs)) if logs else 1.0
