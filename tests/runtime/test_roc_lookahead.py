"""transformers' learned confidence stop (``roc``): its threshold, its stop, and that it learns."""

from __future__ import annotations

import random

import pytest
import torch

from layersearch.runtime.step import DraftPosition, StepOutcome
from layersearch.runtime.roc_lookahead import ROCLookahead, roc_threshold
from layersearch.runtime.sampling import SamplingConfig


def outcome(confidences, accepted):
    return StepOutcome(step=0, position=0, drafted=len(confidences), accepted=accepted, emitted=accepted + 1,
                       drafter="model", mask=None, confidences=tuple(confidences))


def test_threshold_by_hand():
    # scores 0.9 (1), 0.8 (1), 0.6 (0), 0.5 (1), 0.2 (0): P = 3, N = 2
    # thresholds inf, .9, .8, .6, .5, .2 -> cost fpr + 3 fnr: 3, 2, 1, 1.5, 0.5, 1 -> 0.5 at 0.5
    assert roc_threshold((0.9, 0.8, 0.6, 0.5, 0.2), (1, 1, 0, 1, 0)) == 0.5
    # equal costs: the higher threshold wins (sklearn lists thresholds highest first)
    assert roc_threshold((0.9, 0.1), (1, 0)) == 0.9


def test_threshold_matches_sklearn():
    sklearn = pytest.importorskip("sklearn.metrics")
    import numpy as np

    rng = random.Random(0)
    for _ in range(50):
        n = rng.randint(6, 60)
        probs = tuple(round(rng.random(), 2) for _ in range(n))  # ties included
        matches = tuple(int(rng.random() < p) for p in probs)
        if len(set(matches)) < 2:
            continue
        fpr, tpr, thresholds = sklearn.roc_curve(matches, probs)
        assert roc_threshold(probs, matches) == thresholds[int(np.argmin(fpr + 3 * (1 - tpr)))]


def test_the_stop_comes_after_the_first_unsure_token():
    rule = ROCLookahead(20, 0.4)
    view = lambda previous: DraftPosition(1, torch.zeros(4), SamplingConfig(), previous)  # noqa: E731
    assert rule.keep_drafting(DraftPosition(0, torch.zeros(4), SamplingConfig()))  # the first token always
    assert rule.keep_drafting(view(0.4)) and not rule.keep_drafting(view(0.39))


def test_the_threshold_learns_from_the_drafts():
    rule = ROCLookahead(20, 0.4)
    # confident tokens that the target rejects, unsure ones it accepts: the threshold must fall
    for _ in range(3):
        rule = rule.update(outcome([0.3, 0.25, 0.2, 0.9], accepted=3))
    assert len(rule.probs) == 12 and rule.matches.count(0) == 3
    assert rule.threshold <= 0.2
    # tokens after the first rejection were never judged: not recorded
    rule = ROCLookahead(20, 0.4).update(outcome([0.9, 0.1, 0.8], accepted=1))
    assert rule.probs == (0.9, 0.1) and rule.matches == (1, 0) and rule.threshold == 0.4  # too few samples yet
