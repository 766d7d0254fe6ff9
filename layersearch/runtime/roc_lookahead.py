"""transformers' assisted-generation draft rule: a confidence stop whose threshold learns.

transformers' ``AssistedCandidateGenerator`` (its defaults: ``num_assistant_tokens=20``,
``assistant_confidence_threshold=0.4``) drafts until a drafted token's probability falls below
the threshold, that token included, and after each verification moves the threshold to the
point of the ROC curve of (draft probability, accepted?) over all drafts so far that minimises
``false positive rate + 3 x false negative rate`` (a rejected token drafted costs less than an
accepted one not drafted). :class:`ROCLookahead` is that rule as one of ours, so our loop can
be compared with transformers' schedule on equal terms.

Where ours differs: the history is kept per generation (transformers' persists across the
calls made with one assistant model), and the probability is the draft's top-1 probability at
the position (transformers': the drafted token's, the same thing when greedy).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from layersearch.runtime.lookahead import _CappedRule, _check_threshold

from layersearch.runtime.step import DraftPosition, StepOutcome

#: Cost of a false negative (an acceptable token not drafted) against a false positive.
FALSE_NEGATIVE_COST = 3.0
#: Samples needed before the threshold moves (transformers': more than 5, both outcomes seen).
MIN_SAMPLES = 6


@dataclass(frozen=True)
class ROCLookahead(_CappedRule):
    """Draft while the previous drafted token's probability was >= ``threshold`` (the first
    token always); the threshold follows the ROC curve of the drafts so far."""

    max_draft: int = 20  # transformers' num_assistant_tokens default (the registry passes the spec's)
    threshold: float = 0.4
    probs: tuple[float, ...] = ()  # draft probability of each judged token, in order
    matches: tuple[int, ...] = ()  # 1: accepted, 0: the first rejected token of its draft

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_threshold(self.threshold)

    def keep_drafting(self, position: DraftPosition) -> bool:
        return position.previous_confidence >= self.threshold

    def update(self, outcome: StepOutcome) -> "ROCLookahead":
        # Judged tokens: the accepted ones and the first rejected one (later ones were never checked).
        judged = outcome.confidences[: min(outcome.drafted, outcome.accepted + 1)]
        if not judged:
            return self
        matches = self.matches + (1,) * min(outcome.accepted, len(judged)) + (0,) * (len(judged) > outcome.accepted)
        probs = self.probs + tuple(judged)
        threshold = self.threshold
        if len(probs) >= MIN_SAMPLES and 0 in matches and 1 in matches:
            threshold = min(1.0, roc_threshold(probs, matches))
        return replace(self, threshold=threshold, probs=probs, matches=matches)


def roc_threshold(probs: tuple[float, ...], matches: tuple[int, ...]) -> float:
    """The score threshold minimising ``fpr + FALSE_NEGATIVE_COST * fnr`` over the ROC curve of
    ``matches`` (0/1, both present) scored by ``probs``, as ``sklearn.metrics.roc_curve`` lists
    thresholds (highest first, +inf for "none positive"; the first of equal costs wins)."""
    scores = np.asarray(probs, dtype=np.float64)
    labels = np.asarray(matches, dtype=np.int64)
    order = np.argsort(-scores, kind="mergesort")
    scores, labels = scores[order], labels[order]
    last = np.r_[np.nonzero(np.diff(scores))[0], len(scores) - 1]  # last index of each distinct score
    true_pos = np.cumsum(labels)[last]
    false_pos = last + 1 - true_pos
    tpr = np.r_[0, true_pos] / true_pos[-1]
    fpr = np.r_[0, false_pos] / false_pos[-1]
    thresholds = np.r_[np.inf, scores[last]]
    return float(thresholds[np.argmin(fpr + FALSE_NEGATIVE_COST * (1 - tpr))])
