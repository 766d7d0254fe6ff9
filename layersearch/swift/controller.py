"""SWIFT's on-the-fly layer-set optimization (Xia et al., ICLR 2025, §4.1 and Appendix B), as a
controller of the decode loop (:mod:`layersearch.runtime.control`).

One :class:`SwiftController` serves a stream of inputs and keeps its state across them:

* **context** — at the first input the draft skips SWIFT's count of sub-layers evenly
  (:func:`~layersearch.swift.search.initial_mask`); later inputs start from the best mask
  so far. Nothing is optimized until more than ``window + 1`` tokens (γ + 1) of the current
  input were generated.
* **optimize** — then, before every decoding step, one optimization step: a random mask of
  SWIFT's count, or a GP-UCB proposal every ``bo_interval``-th step (β = 25, κ = 2.5;
  :func:`layersearch.swift.search.propose`), scored by *matchness*: one parallel masked
  forward over the input's first γ + 1 generated tokens, attending to the prompt's cached
  keys and values (:func:`~layersearch.runtime.teacher.draft_logits_in_cache`; the cache is
  exactly as before afterwards, so decoding stays lossless). The candidate replaces the best
  mask only if its matchness is higher. The step then drafts with the best mask.
* **accelerate** — after matchness ≥ ``target`` (0.95), ``patience`` (300) steps without
  improvement, or ``max_steps`` (1000) steps, the best mask drafts with no more optimization,
  for the rest of the stream (as SWIFT's code, whose stop flag is never reset).

Two choices the paper leaves open (see docs/design.md, "SWIFT on the fly"):

* The best mask's matchness is re-measured on each new input's window before candidates are
  compared with it (one extra forward per input). SWIFT's code compares candidates with a score
  measured on an earlier input's window; re-measuring keeps "better" a comparison on one window
  and gives the per-input matchness the stream report shows (in every phase).
* Skip-ratio lowering (the paper's footnote: 0.5 -> 0.4 for LLaMA-3-70B "as the acceptance rate
  remained below the tolerance threshold of 0.7"): when an input ends with acceptance below
  ``tolerance`` over at least ``window`` drafted tokens, the ratio drops by ``ratio_step``
  (not below ``min_skip_ratio``, by default one step below the start), the draft restarts
  from the even mask of the new count and optimization resumes with a fresh history.

Every step's phase and mask go to ``stats.selections`` (the loop adds the step, context and the
seconds spent choosing, which is the optimization time); :func:`optimization_seconds` sums them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, cast

import numpy as np

from layersearch.common.checks import check_fraction, check_int, check_seed
from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.runtime.step import Controller, DecodeView, Selection, StepOutcome
from layersearch.swift.proposals import trial_seed
from layersearch.swift import search as swift_search

if TYPE_CHECKING:
    from transformers import Cache, PreTrainedModel

#: Scores a mask on a window: (mask, view, window start, window tokens) -> matchness in [0, 1].
Matchness = Callable[[SkipMask, DecodeView, int, Sequence[int]], float]

PHASES = ("context", "optimize", "accelerate")


@dataclass(frozen=True)
class SwiftConfig:
    """SWIFT's on-the-fly settings; the defaults are the paper's (Appendix B.2)."""

    skip_ratio: float = swift_search.SKIP_RATIO  # r: int((L-2)*2r) sub-layers skipped
    window: int = 32  # γ: generated tokens that score a candidate
    bo_interval: int = swift_search.BO_INTERVAL  # β: every β-th step is a GP-UCB step
    kappa: float = swift_search.KAPPA  # κ of UCB
    target: float = swift_search.MATCHNESS_TARGET  # stop at matchness >= target (their script: 0.93)
    patience: int = swift_search.PATIENCE  # stop after this many steps without improvement
    max_steps: int = swift_search.MAX_TRIALS  # stop after this many optimization steps
    tolerance: float = 0.7  # lower the ratio when an input's acceptance stays below this (0: never)
    ratio_step: float = 0.1
    min_skip_ratio: float | None = None  # None: one ratio_step below skip_ratio
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("skip_ratio", "target", "tolerance", "ratio_step"):
            check_fraction(getattr(self, name), f"SWIFT {name.replace('_', ' ')}")
        for name in ("window", "bo_interval", "patience", "max_steps"):
            check_int(getattr(self, name), f"SWIFT {name.replace('_', ' ')}")
        if isinstance(self.kappa, bool) or not isinstance(self.kappa, (int, float)) or not 0 <= self.kappa < math.inf:
            raise LayersearchError(f"SWIFT kappa must be a number >= 0, got {self.kappa!r}")  # inf ranks every candidate alike
        check_seed(self.seed, "SWIFT seed")
        if self.min_skip_ratio is not None:
            check_fraction(self.min_skip_ratio, "SWIFT min skip ratio")
            if self.min_skip_ratio > self.skip_ratio:
                raise LayersearchError(
                    f"SWIFT min skip ratio {self.min_skip_ratio} is above the skip ratio {self.skip_ratio}"
                )

    @property
    def floor(self) -> float:
        """The lowest skip ratio the tolerance rule may reach."""
        if self.min_skip_ratio is not None:
            return self.min_skip_ratio
        return max(0.0, self.skip_ratio - self.ratio_step)


@dataclass(frozen=True)
class InputSummary:
    """One input of the stream as the controller saw it."""

    index: int
    matchness: float | None  # the best mask's matchness on this input's window (None: too short)
    drafted: int
    accepted: int
    optimization_steps: int  # candidates scored during this input
    skip_ratio: float  # in force at the end of the input
    phase: str  # at the end of the input

    @property
    def acceptance(self) -> float | None:
        """Accepted / drafted tokens of the input."""
        return self.accepted / self.drafted if self.drafted else None


class SwiftController(Controller):
    """SWIFT's optimizer: context accumulation, random + GP-UCB candidates scored by matchness."""

    wants_prompt_hidden = False

    def __init__(self, num_layers: int, config: SwiftConfig = SwiftConfig(), *, matchness: Matchness | None = None) -> None:
        self.num_layers = num_layers
        self.config = config
        self._matchness = matchness or model_matchness
        self._rng = np.random.default_rng(config.seed)
        self.ratio = config.skip_ratio
        self._restart(swift_search.initial_mask(num_layers, self.ratio))
        self.inputs: list[InputSummary] = []
        self._input: dict[str, Any] | None = None

    # ----- state -----------------------------------------------------------------------
    @property
    def count(self) -> int:
        """Sub-layers every candidate skips at the current ratio."""
        return swift_search.skip_count(self.num_layers, self.ratio)

    @property
    def phase(self) -> str:
        """``optimize`` while optimizing (``context`` until the window is ready), else ``accelerate``."""
        return "optimize" if self.optimizing else "accelerate"

    def _restart(self, start: SkipMask) -> None:
        """A fresh optimization phase from ``start`` (at the stream's start, or after lowering the ratio)."""
        self.best = start
        self.best_score: float | None = None
        self.optimizing = True
        self.stop_reason: str | None = None
        self.steps = self.since_improvement = 0
        self._x: list[list[int]] = []  # flat 0/1 masks scored in this phase
        self._y: list[float] = []

    # ----- the controller protocol ----------------------------------------------------
    def select(self, view: DecodeView) -> Selection:
        """Before every step: maybe one optimization step; always the best mask and this step's record."""
        if view.step == 0:
            self._begin_input()
        record: dict[str, Any] = {"input": len(self.inputs)}
        window = self._window(view)
        if window is not None:
            current = self._current()
            if not current["scored"]:
                current["scored"] = True
                self.best_score = self._score(self.best, view, window)
                current["matchness"] = self.best_score
                record["incumbent_matchness"] = self.best_score
                if self.optimizing:
                    self._check_stop()
        if window is not None and self.optimizing:
            record.update(self._optimization_step(view, window))
        elif self.optimizing:
            record["phase"] = "context"
        else:
            record["phase"] = "accelerate"
            if self.stop_reason and "incumbent_matchness" in record and self.steps == 0:
                record["stopped"] = self.stop_reason
        record.update(mask=self.best.short_string(), skip_ratio=self.ratio)
        return Selection(self.best, record=record)

    def observe(self, outcome: StepOutcome) -> None:
        """Count the input's drafted and accepted tokens (the tolerance rule reads them)."""
        if self._input is not None:
            self._input["drafted"] += outcome.drafted
            self._input["accepted"] += outcome.accepted

    def finish(self) -> None:
        """Close the current input's summary (the next input's first step does it too)."""
        if self._input is None:
            return
        summary = InputSummary(
            len(self.inputs), self._input["matchness"], self._input["drafted"], self._input["accepted"],
            self._input["steps"], self.ratio, self.phase,
        )
        self.inputs.append(summary)
        self._input = None
        self._maybe_lower_ratio(summary)

    # ----- steps --------------------------------------------------------------------------
    def _begin_input(self) -> None:
        self.finish()
        self._input = dict(scored=False, matchness=None, drafted=0, accepted=0, steps=0)

    def _current(self) -> dict[str, Any]:
        """The current input's counts (an input begins at a view's step 0)."""
        if self._input is None:
            raise LayersearchError("SwiftController: a step before its input's step 0 (select begins each input there)")
        return self._input

    def _window(self, view: DecodeView) -> tuple[int, list[int]] | None:
        """(start, tokens) of the input's first γ + 1 generated tokens, once more than γ + 1 exist."""
        generated = view.position + 1 - view.prompt_length  # emitted tokens, the newest not cached yet
        if generated <= self.config.window + 1:
            return None
        start = view.prompt_length
        tokens = view.sequence[0, start : start + self.config.window + 1].tolist()
        return start, tokens

    def _optimization_step(self, view: DecodeView, window: tuple[int, list[int]]) -> dict[str, Any]:
        x = np.asarray(self._x, dtype=np.int8).reshape(len(self._x), 2 * self.num_layers)  # [n, 2L]
        candidate, origin = swift_search.propose(
            x, np.asarray(self._y), num_layers=self.num_layers, count=self.count, trial_number=self.steps,
            rng=self._rng, bo_interval=self.config.bo_interval, kappa=self.config.kappa,
        )
        score = self._score(candidate, view, window)
        self._x.append([int(b) for b in candidate.to_flat()])
        self._y.append(score)
        self.steps += 1
        self._current()["steps"] += 1
        kept = self.best_score is None or score > self.best_score
        if kept:
            self.best, self.best_score, self.since_improvement = candidate, score, 0
        else:
            self.since_improvement += 1
        self._check_stop()
        record = dict(
            phase="optimize", opt_step=self.steps, origin=origin, candidate=candidate.short_string(),
            matchness=score, kept=kept, best_matchness=self.best_score,
        )
        if self.stop_reason and not self.optimizing:
            record["stopped"] = self.stop_reason
        return record

    def _check_stop(self) -> None:
        """SWIFT's three stop rules; afterwards the best mask accelerates for the rest of the stream."""
        config = self.config
        if self.best_score is not None and self.best_score >= config.target:
            reason = f"matchness {self.best_score:.3f} reached the target {config.target:g}"
        elif self.since_improvement >= config.patience:
            reason = f"no improvement in {self.since_improvement} steps"
        elif self.steps >= config.max_steps:
            reason = f"reached {self.steps} optimization steps"
        else:
            return
        self.optimizing, self.stop_reason = False, reason

    def _maybe_lower_ratio(self, summary: InputSummary) -> None:
        """The paper's tolerance rule: an input whose drafts were mostly rejected lowers the skip ratio."""
        config = self.config
        low = summary.drafted >= config.window and summary.accepted < config.tolerance * summary.drafted
        lower = round(self.ratio - config.ratio_step, 10)
        if not low or config.tolerance == 0 or lower < config.floor - 1e-9:
            return
        self.ratio = lower
        self._restart(swift_search.initial_mask(self.num_layers, self.ratio))

    def _score(self, mask: SkipMask, view: DecodeView, window: tuple[int, list[int]]) -> float:
        start, tokens = window
        return float(self._matchness(mask, view, start, tokens))


def model_matchness(mask: SkipMask, view: DecodeView, start: int, tokens: Sequence[int]) -> float:
    """SWIFT's matchness in the loop's own cache: the masked draft's argmax over ``tokens[:-1]``
    (at their positions, seeing only the cache before ``start``) against ``tokens[1:]``."""
    from layersearch.runtime.teacher import draft_logits_in_cache, matched_tokens

    # The loop's transformers model and cache: DecodeView types them as a Module and an object.
    model, cache = cast("PreTrainedModel", view.model), cast("Cache", view.cache)
    logits = draft_logits_in_cache(model, mask, cache, tokens[:-1], start, valid=view.position)  # [γ, vocab]
    return matched_tokens(logits, tokens[1:]) / (len(tokens) - 1)


def optimization_seconds(selections: Sequence[Mapping[str, Any]]) -> float:
    """Seconds the controller spent in optimization steps (from ``stats.selections``); a per-input
    re-measurement of the best mask in the acceleration phase is not optimization and not counted."""
    return sum(s.get("seconds", 0.0) for s in selections if s.get("phase") == "optimize")


def phase_counts(selections: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Decoding steps per phase (from ``stats.selections``)."""
    counts = {phase: 0 for phase in PHASES}
    for s in selections:
        counts[s.get("phase", "context")] = counts.get(s.get("phase", "context"), 0) + 1
    return counts


def check_swift_model(model: Any) -> None:
    """Refuse a model SWIFT on the fly cannot decode with (sliding-window attention)."""
    from layersearch.runtime.cache import sliding_windows

    if any(w is not None for w in sliding_windows(model)):
        raise LayersearchError(
            "SWIFT's on-the-fly matchness hides generated positions with a full-attention mask; this model uses "
            "sliding-window attention: use a fixed mask (e.g. from a study with the swift strategy)"
        )
