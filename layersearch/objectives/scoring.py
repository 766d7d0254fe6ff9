"""Scoring rules: how a study values one skip mask, given what was measured.

Pure functions of measured statistics (a pooled
:class:`~layersearch.runtime.stats.DecodeStats`, whose M and alpha are the only definitions
of them), a :class:`MatchMeasurement` and a latency profile, plus the objective classes that
ask a :class:`~layersearch.objectives.measuring.Runtime` for a measurement and apply one rule.
Nothing here runs a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from layersearch.common.checks import check_int
from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.objectives.measuring import MatchMeasurement, Runtime  # scoring reads measurements, never the reverse

if TYPE_CHECKING:
    from layersearch.runtime.stats import DecodeStats

# The trial user_attrs every objective records (optuna-dashboard shows them; plots read them).
TRIAL_ATTRS = ("mask", "M", "alpha", "skip_ratio", "tokens_per_second")

DEFAULT_GAMMA = 32


@dataclass(frozen=True)
class Score:
    """What a trial records: the objective value and its user attributes."""

    value: float
    attrs: Mapping[str, Any]


# ----- rules ------------------------------------------------------------------------------------
def seconds_per_token(run: "DecodeStats") -> float:
    """Self-SD's objective: wall-clock seconds per generated token (prefill included)."""
    return run.run_seconds / run.new_tokens if run.new_tokens else float("inf")


def drafts_per_cycle(run: "DecodeStats") -> float | None:
    """Observed draft forwards per verification (None when the decoder did not count them)."""
    return run.draft_forwards / run.target_forwards if run.draft_forwards and run.target_forwards else None


def expected_speedup(run: "DecodeStats", mask: SkipMask, profile: Any, context: int) -> float:
    """The profile's predicted speedup for this run (1 for the empty mask, which decodes plainly).

    With the loop's per-step records (``run.steps``) it is the prediction ``layersearch bench``
    checks against measurement: each step's own draft forwards, verified length and context
    costed by the profile (:meth:`LatencyProfile.predicted_speedup_of_steps`). Without them,
    SWIFT's Eq. 6 from M and alpha at ``context``."""
    if mask.is_empty:
        return 1.0
    if getattr(run, "steps", None):
        predicted = profile.predicted_speedup_of_steps(run.steps)
        if predicted is not None:
            return predicted
    # Nothing drafted: every cycle paid a draft forward that stopped on low confidence.
    alpha = 0.0 if run.acceptance_rate is None else run.acceptance_rate
    # Observed draft forwards per cycle, where the decoder counts them, beat the estimate
    # (M - 1) / alpha: they include the forwards that stopped a draft.
    return profile.expected_speedup(run.mean_accepted_length, alpha, mask, context, drafts=drafts_per_cycle(run))


def tokens_per_time(run: "DecodeStats", mask: SkipMask, profile: Any, context: int, max_draft: int) -> tuple[float, int]:
    """KnapSpec's TPT at the best draft length for the measured alpha: ``(tpt, gamma)``."""
    alpha = run.acceptance_rate
    if alpha is None:  # the draft equals the target (empty mask) or never drafted
        alpha = 1.0 if mask.is_empty else 0.0
    return profile.best_tpt(alpha, mask, context, max_draft)


def trial_attrs(mask: SkipMask, run: "DecodeStats | None", **extra: Any) -> dict[str, Any]:
    """The :data:`TRIAL_ATTRS` of a trial (M, alpha and tokens/s None without a decode run), for a
    plan with int8 parts also ``int8_ratio`` and ``int8_head`` (int4 parts: ``int4_ratio``,
    ``int4_head``), plus ``extra``."""
    attrs: dict[str, Any] = {
        "mask": mask.short_string(),
        "M": None if run is None else run.mean_accepted_length,
        "alpha": None if run is None else run.acceptance_rate,
        "skip_ratio": mask.skip_ratio,
        "tokens_per_second": None if run is None else run.tokens_per_second,
    }
    if mask.has_int8:  # a draft plan: how much of it runs in int8 (the mask string says where)
        attrs.update(int8_ratio=mask.num_int8 / (2 * mask.num_layers), int8_head=mask.int8_head)
    if mask.has_int4:  # ... and in int4
        attrs.update(int4_ratio=mask.num_int4 / (2 * mask.num_layers), int4_head=mask.int4_head)
    attrs.update(extra)
    return attrs


# ----- objectives -------------------------------------------------------------------------------
class Objective:
    """Base class: a name, a direction ("minimize" or "maximize") and :meth:`evaluate`."""

    name: ClassVar[str] = ""
    direction: ClassVar[str] = "minimize"

    def evaluate(self, runtime: "Runtime", mask: SkipMask) -> Score:
        """Score ``mask`` (bound to ``runtime.info``) on the runtime's prompts."""
        raise NotImplementedError


class TimePerToken(Objective):
    """Self-SD: mean wall time per generated token of the speculative decoder (minimize)."""

    name = "time-per-token"
    direction = "minimize"

    def evaluate(self, runtime: "Runtime", mask: SkipMask) -> Score:
        run = runtime.decode(mask)
        value = seconds_per_token(run)
        return Score(value, trial_attrs(mask, run, seconds_per_token=value))


class Matchness(Objective):
    """SWIFT: share of the target's gamma tokens the masked draft predicts in one forward (maximize)."""

    name = "matchness"
    direction = "maximize"

    def __init__(self, *, gamma: int = DEFAULT_GAMMA, decode_stats: bool = False) -> None:
        self.gamma = check_int(gamma, "gamma")
        self.decode_stats = decode_stats

    def evaluate(self, runtime: "Runtime", mask: SkipMask) -> Score:
        match = runtime.matchness(mask, self.gamma)
        run = runtime.decode(mask) if self.decode_stats else None
        return Score(match.matchness, trial_attrs(mask, run, matchness=match.matchness))


class ExpectedSpeedup(Objective):
    """Predicted speedup from measured M and alpha and the profile's cost coefficient (maximize)."""

    name = "expected-speedup"
    direction = "maximize"

    def __init__(self, profile: Any) -> None:
        self.profile = _require_profile(profile, self.name)

    def evaluate(self, runtime: "Runtime", mask: SkipMask) -> Score:
        run = runtime.decode(mask)
        context = runtime.context_length
        value = expected_speedup(run, mask, self.profile, context)
        return Score(value, trial_attrs(mask, run, cost_coefficient=self.profile.cost_coefficient(mask, context),
                                        predicted_on=self.profile.predicts_for))


class TokensPerTime(Objective):
    """KnapSpec TPT: tokens per second predicted by the profile at the best draft length (maximize)."""

    name = "tpt"
    direction = "maximize"

    def __init__(self, profile: Any, *, max_draft: int = 18) -> None:
        self.profile = _require_profile(profile, self.name)
        self.max_draft = max_draft

    def evaluate(self, runtime: "Runtime", mask: SkipMask) -> Score:
        run = runtime.decode(mask)
        value, gamma = tokens_per_time(run, mask, self.profile, runtime.context_length, self.max_draft)
        return Score(value, trial_attrs(mask, run, best_gamma=gamma, predicted_on=self.profile.predicts_for))


OBJECTIVES: tuple[str, ...] = (TimePerToken.name, Matchness.name, ExpectedSpeedup.name, TokensPerTime.name)
_CLASSES: dict[str, type[Objective]] = {
    cls.name: cls for cls in (TimePerToken, Matchness, ExpectedSpeedup, TokensPerTime)
}
NEEDS_PROFILE = frozenset({ExpectedSpeedup.name, TokensPerTime.name})


def check_objective(name: str) -> str:
    """``name`` if it is a known objective, else a LayersearchError listing the known ones."""
    if name not in _CLASSES:
        raise LayersearchError(f"unknown objective {name!r}; known objectives: {', '.join(OBJECTIVES)}")
    return name


def objective_direction(name: str) -> str:
    """"minimize" or "maximize" for objective ``name``."""
    return _CLASSES[check_objective(name)].direction


def make_objective(
    name: str, *, profile: Any = None, gamma: int = DEFAULT_GAMMA, decode_stats: bool = False
) -> Objective:
    """The objective called ``name``; ``profile`` (a LatencyProfile) for expected-speedup and tpt."""
    check_objective(name)
    if name == TimePerToken.name:
        return TimePerToken()
    if name == Matchness.name:
        return Matchness(gamma=gamma, decode_stats=decode_stats)
    if name == ExpectedSpeedup.name:
        return ExpectedSpeedup(profile)
    return TokensPerTime(profile)


def _require_profile(profile: Any, name: str) -> Any:
    if profile is None:
        raise LayersearchError(f"objective {name!r} needs a latency profile")
    return profile
