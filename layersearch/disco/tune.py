"""Offline replay of greedy speculative decoding on teacher-forced rows, and the tuning of
DISCO's tau / SL_max, the static length and the perplexity threshold on the validation split.

In greedy decoding the draft at draft index i of a step sees the target's prefix whenever the
step's earlier tokens were accepted, which is exactly what a teacher-forced row holds. So a
prompt's rows replay any stop rule step by step: which positions it drafts, where the first
mismatch falls, how many draft forwards and verification widths it pays. Seconds come from
:class:`Costs` measured on the device (one masked forward; a target forward over k+1 tokens).
After a mismatch the real draft continues from its own wrong token; the replay keeps reading
the on-path rows at those positions (only the stop decision depends on them, never the count
of accepted tokens).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from transformers import PreTrainedModel

from layersearch.disco.classifier import Classifier, f1
from layersearch.disco.collect import Rows
from layersearch.disco.baselines import perplexity
from layersearch.masks.mask import SkipMask
from layersearch.models.skipping import skipping
from layersearch.runtime.cache import new_cache, truncate_cache
from layersearch.runtime.forward import forward_tokens
from layersearch.runtime.timing import Clock

TAUS = tuple(round(t, 2) for t in np.linspace(0.05, 0.95, 19))
PPL_THRESHOLDS = (1.02, 1.05, 1.1, 1.2, 1.35, 1.5, 2.0, 3.0, 5.0)

# keep(row, draft_index, top1_probs_of_this_draft_so_far) -> draft a token at that row? ``row``
# counts over all replayed prompts in order (prompt 0's rows, then prompt 1's, ...).
Rule = Callable[[int, int, list], bool]


@dataclass(frozen=True)
class Costs:
    """Seconds of one draft forward and of a verification forward over k drafts + 1 (index k)."""

    draft: float
    verify: tuple[float, ...]

    def verify_seconds(self, drafted: int) -> float:
        """Verification of ``drafted`` tokens (extrapolated linearly past the measured widths)."""
        if drafted < len(self.verify):
            return self.verify[drafted]
        slope = (self.verify[-1] - self.verify[0]) / max(1, len(self.verify) - 1)
        return self.verify[-1] + slope * (drafted - len(self.verify) + 1)

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {"draft_seconds": self.draft, "verify_seconds": list(self.verify)}


@dataclass(frozen=True)
class Replay:
    """Counts and modelled seconds of replaying one rule over some prompts."""

    tokens: int
    steps: int
    drafted: int
    accepted: int
    draft_forwards: int
    seconds: float
    predicted: tuple[bool, ...]  # every on-path decision: drafted (True) or stopped (False)
    truth: tuple[bool, ...]  # whether the draft token there matches the target's

    @property
    def f1(self) -> float:
        """F1 of the rule's on-path decisions as a predictor of acceptance."""
        return f1(np.array(self.predicted), np.array(self.truth))

    @property
    def seconds_per_token(self) -> float:
        """Modelled seconds per generated token."""
        return self.seconds / self.tokens if self.tokens else float("inf")


def replay(prompts: Sequence[Rows], rule: Rule | None, sl_max: int, costs: Costs) -> Replay:
    """Replay greedy decoding of every prompt under ``rule`` (None: the oracle, which drafts
    exactly the tokens that will be accepted)."""
    totals = dict(tokens=0, steps=0, drafted=0, accepted=0, draft_forwards=0)
    seconds = 0.0
    predicted: list[bool] = []
    truth: list[bool] = []
    offset = 0
    for rows in prompts:
        label, top1 = rows.label, rows.x[:, 0]
        n = len(label)  # positions 1..n; rows[j - 1] predicts t_j
        start = 1
        totals["tokens"] += n + 1
        while start <= n:
            limit = n - start if rule is not None else n - start + 1
            limit = min(sl_max, limit) if rule is not None else limit
            forwards = drafted = accepted = 0
            mismatch = False
            seen: list[float] = []
            for i in range(limit):
                row = start - 1 + i
                if rule is None:  # oracle
                    if not label[row]:
                        break
                    forwards, drafted, accepted = forwards + 1, drafted + 1, accepted + 1
                    continue
                forwards += 1
                seen.append(float(top1[row]))
                keep = rule(offset + row, i, seen)
                if not mismatch:
                    predicted.append(bool(keep))
                    truth.append(bool(label[row]))
                if not keep:
                    break
                drafted += 1
                if not mismatch:
                    if label[row]:
                        accepted += 1
                    else:
                        mismatch = True
            totals["steps"] += 1
            totals["drafted"] += drafted
            totals["accepted"] += accepted
            totals["draft_forwards"] += forwards
            seconds += forwards * costs.draft + costs.verify_seconds(drafted)
            start += accepted + 1
        offset += n
    return Replay(**totals, seconds=seconds, predicted=tuple(predicted), truth=tuple(truth))


def static_rule(row: int, index: int, seen: list) -> bool:
    """Always draft (the cap does the rest)."""
    return True


def disco_rule(scores: np.ndarray, tau: float) -> Rule:
    """Draft while the classifier's score of the row >= tau."""
    return lambda row, index, seen: bool(scores[row] >= tau)


def ppl_rule(threshold: float) -> Rule:
    """Draft while the perplexity of the draft so far stays <= threshold."""
    return lambda row, index, seen: perplexity(seen) <= threshold


@dataclass(frozen=True)
class Tuned:
    """What the validation split chose, with the replays behind each choice."""

    tau: float
    sl_max: int
    static_length: int
    ppl_threshold: float
    disco: Replay
    static: Replay
    ppl: Replay
    classifier_f1: float  # F1 of C >= tau over every validation row

    def to_dict(self) -> dict:
        """JSON-ready summary (modelled ms per token for each tuned rule)."""
        return {
            "tau": self.tau, "sl_max": self.sl_max, "static_length": self.static_length,
            "ppl_threshold": self.ppl_threshold,
            "f1": {"classifier": self.classifier_f1, "disco_decisions": self.disco.f1, "best_static": self.static.f1},
            "modelled_ms_per_token": {k: 1000 * r.seconds_per_token for k, r in
                                      (("disco", self.disco), ("static", self.static), ("ppl", self.ppl))},
        }


def tune(classifier: Classifier, validation: Rows, costs: Costs, max_draft: int) -> Tuned:
    """Grid over tau x SL_max (1..max_draft) for DISCO, 1..max_draft for the static length and
    :data:`PPL_THRESHOLDS` (cap max_draft) for the perplexity rule; lowest modelled latency wins."""
    prompts = validation.prompts()
    ordered = Rows.concat(prompts)  # replay's global row order
    scores = classifier.scores(ordered.x).numpy()
    lengths = range(1, max_draft + 1)
    static = min(((replay(prompts, static_rule, k, costs), k) for k in lengths), key=lambda r: r[0].seconds)
    disco = min(
        ((replay(prompts, disco_rule(scores, tau), k, costs), tau, k) for tau in TAUS for k in lengths),
        key=lambda r: r[0].seconds,
    )
    ppl = min(((replay(prompts, ppl_rule(t), max_draft, costs), t) for t in PPL_THRESHOLDS), key=lambda r: r[0].seconds)
    classifier_f1 = f1(scores >= disco[1], ordered.label)
    return Tuned(disco[1], disco[2], static[1], ppl[1], disco[0], static[0], ppl[0], classifier_f1)


@torch.inference_mode()
def measure_costs(model: PreTrainedModel, mask: SkipMask, prompt: Sequence[int], max_draft: int, repeats: int = 5) -> Costs:
    """Median seconds of one masked draft forward and of target forwards over 1..max_draft+1
    tokens, after ``prompt`` on this device."""
    clock = Clock(model.device)
    cache = new_cache(model)
    forward_tokens(model, list(prompt), 0, cache, keep=1)
    length = len(prompt)

    def timed(tokens: list[int], masked: bool) -> float:
        times = []
        for _ in range(repeats):
            t0 = clock.now()
            if masked:
                with skipping(model, mask):
                    forward_tokens(model, tokens, length, cache)
            else:
                forward_tokens(model, tokens, length, cache)
            times.append(clock.now() - t0)
            truncate_cache(cache, length)
        return statistics.median(times)

    token = int(prompt[-1])
    timed([token], False)  # warm-up
    draft = timed([token], True)
    verify = tuple(timed([token] * (k + 1), False) for k in range(max_draft + 1))
    return Costs(draft, verify)
