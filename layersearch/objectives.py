"""Objectives: how a study scores one skip mask on a domain's representative prompts.

An objective is a small class with a name, a direction and one method,
:meth:`Objective.evaluate`, which returns a :class:`Score`: the value the study optimizes and
the trial attributes it records (``mask``, ``M``, ``alpha``, ``skip_ratio``,
``tokens_per_second``, plus what the objective adds). It reaches the model only through the
:class:`Runtime` interface, two measurements:

* ``decode(mask)``: run the speculative decoder with ``mask`` over the prompts
  (:class:`DecodeMeasurement`: tokens, seconds, M, alpha);
* ``matchness(mask, gamma)``: SWIFT's parallel draft check (:class:`MatchMeasurement`).

:class:`ModelRuntime` implements it on a loaded model; tests can pass a fake.

==================  =========  ===================================================================
name                direction  value
==================  =========  ===================================================================
time-per-token      minimize   wall seconds per generated token of the speculative decoder
                               (Self-SD, swift.txt Eq. 1), pooled over the K prompts
matchness           maximize   share of gamma target tokens the masked draft predicts in one
                               teacher-forced forward (SWIFT, swift.txt Eq. 3-4)
expected-speedup    maximize   LatencyProfile.expected_speedup from measured M, alpha and the
                               profile's cost coefficient
tpt                 maximize   KnapSpec tokens per second: LatencyProfile.best_tpt over gamma,
                               alpha from a measured run
==================  =========  ===================================================================

``matchness`` runs no decoding (that is its point: one parallel forward per prompt), so its
trials record ``M``, ``alpha`` and ``tokens_per_second`` as ``None`` unless it is built with
``decode_stats=True``; ``study compare`` measures them for the best mask.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Protocol, Sequence

from layersearch.errors import LayersearchError
from layersearch.mask import ModelInfo, SkipMask

# The trial user_attrs every objective records (optuna-dashboard shows them; plots read them).
TRIAL_ATTRS = ("mask", "M", "alpha", "skip_ratio", "tokens_per_second")

DEFAULT_SAMPLES = 8
DEFAULT_MAX_NEW_TOKENS = 32
DEFAULT_GAMMA = 32


# ----- what objectives see of the runtime -------------------------------------------------------
@dataclass(frozen=True)
class DecodeMeasurement:
    """Pooled statistics of one decode run over the representative prompts."""

    new_tokens: int
    seconds: float
    target_forwards: int
    drafted: int
    accepted: int

    @property
    def mean_accepted_length(self) -> float:
        """M: decode-phase tokens per target forward (each prompt's prefill token excluded)."""
        return self.decode_tokens / self.target_forwards if self.target_forwards else 1.0

    @property
    def acceptance_rate(self) -> float | None:
        """alpha: accepted / drafted tokens (None when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per wall-clock second (prefill included)."""
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def seconds_per_token(self) -> float:
        """Wall-clock seconds per generated token (prefill included)."""
        return self.seconds / self.new_tokens if self.new_tokens else float("inf")

    decode_tokens: int = 0  # tokens emitted after each prompt's prefill token, summed
    draft_forwards: int = 0  # draft forwards, low-confidence stops included (0: not reported)

    @property
    def drafts_per_cycle(self) -> float | None:
        """Observed draft forwards per verification (None when the decoder does not count them)."""
        return self.draft_forwards / self.target_forwards if self.draft_forwards and self.target_forwards else None


@dataclass(frozen=True)
class MatchMeasurement:
    """SWIFT matchness counts: draft argmaxes equal to the target's next token, out of compared."""

    matched: int
    compared: int

    @property
    def matchness(self) -> float:
        """Exact-match ratio (0 when nothing was compared)."""
        return self.matched / self.compared if self.compared else 0.0


class Runtime(Protocol):
    """The measurements an objective may ask for; :class:`ModelRuntime` is the real one."""

    @property
    def info(self) -> ModelInfo:
        """The model the masks are for."""

    @property
    def context_length(self) -> int:
        """Typical context (prompt + half the new tokens) for latency-model predictions."""

    def decode(self, mask: SkipMask) -> DecodeMeasurement:
        """Speculative decoding with ``mask`` over the prompts."""

    def matchness(self, mask: SkipMask, gamma: int) -> MatchMeasurement:
        """SWIFT matchness of ``mask`` over ``gamma`` target tokens per prompt."""


# ----- objectives -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Score:
    """What a trial records: the objective value and its user attributes."""

    value: float
    attrs: Mapping[str, Any]


class Objective:
    """Base class: a name, a direction ("minimize" or "maximize") and :meth:`evaluate`."""

    name: ClassVar[str] = ""
    direction: ClassVar[str] = "minimize"

    def evaluate(self, runtime: Runtime, mask: SkipMask) -> Score:
        """Score ``mask`` (bound to ``runtime.info``) on the runtime's prompts."""
        raise NotImplementedError

    @staticmethod
    def _attrs(mask: SkipMask, run: DecodeMeasurement | None, **extra: Any) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            "mask": mask.short_string(),
            "M": None if run is None else run.mean_accepted_length,
            "alpha": None if run is None else run.acceptance_rate,
            "skip_ratio": mask.skip_ratio,
            "tokens_per_second": None if run is None else run.tokens_per_second,
        }
        attrs.update(extra)
        return attrs


class TimePerToken(Objective):
    """Self-SD: mean wall time per generated token of the speculative decoder (minimize)."""

    name = "time-per-token"
    direction = "minimize"

    def evaluate(self, runtime: Runtime, mask: SkipMask) -> Score:
        run = runtime.decode(mask)
        value = run.seconds_per_token
        return Score(value, self._attrs(mask, run, seconds_per_token=value))


class Matchness(Objective):
    """SWIFT: share of the target's gamma tokens the masked draft predicts in one forward (maximize)."""

    name = "matchness"
    direction = "maximize"

    def __init__(self, *, gamma: int = DEFAULT_GAMMA, decode_stats: bool = False) -> None:
        if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
            raise LayersearchError(f"gamma must be an integer >= 1, got {gamma!r}")
        self.gamma = gamma
        self.decode_stats = decode_stats

    def evaluate(self, runtime: Runtime, mask: SkipMask) -> Score:
        match = runtime.matchness(mask, self.gamma)
        run = runtime.decode(mask) if self.decode_stats else None
        return Score(match.matchness, self._attrs(mask, run, matchness=match.matchness))


class ExpectedSpeedup(Objective):
    """Predicted speedup from measured M and alpha and the profile's cost coefficient (maximize)."""

    name = "expected-speedup"
    direction = "maximize"

    def __init__(self, profile: Any) -> None:
        self.profile = _require_profile(profile, self.name)

    def evaluate(self, runtime: Runtime, mask: SkipMask) -> Score:
        run = runtime.decode(mask)
        context = runtime.context_length
        if mask.is_empty:
            value = 1.0  # the decoder runs plain decoding: no drafts, no verification
        else:
            # Nothing drafted: every cycle paid a draft forward that stopped on low confidence.
            alpha = 0.0 if run.acceptance_rate is None else run.acceptance_rate
            # Observed draft forwards per cycle, where the decoder counts them, beat the
            # estimate (M - 1) / alpha: they include the forwards that stopped a draft.
            value = self.profile.expected_speedup(
                run.mean_accepted_length, alpha, mask, context, drafts=run.drafts_per_cycle
            )
        attrs = self._attrs(mask, run, cost_coefficient=self.profile.cost_coefficient(mask, context))
        return Score(value, attrs)


class TokensPerTime(Objective):
    """KnapSpec TPT: tokens per second predicted by the profile at the best draft length (maximize)."""

    name = "tpt"
    direction = "maximize"

    def __init__(self, profile: Any, *, max_gamma: int = 18) -> None:
        self.profile = _require_profile(profile, self.name)
        self.max_gamma = max_gamma

    def evaluate(self, runtime: Runtime, mask: SkipMask) -> Score:
        run = runtime.decode(mask)
        alpha = run.acceptance_rate
        if alpha is None:  # the draft equals the target (empty mask) or never drafted
            alpha = 1.0 if mask.is_empty else 0.0
        value, gamma = self.profile.best_tpt(alpha, mask, runtime.context_length, self.max_gamma)
        return Score(value, self._attrs(mask, run, best_gamma=gamma))


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


# ----- the real runtime -------------------------------------------------------------------------
class ModelRuntime:
    """:class:`Runtime` over a loaded model and a fixed list of tokenized prompts.

    ``decode`` runs :class:`~layersearch.runtime.decoder.SpeculativeDecoder` (greedy) with the
    given draft policy; ``baseline`` runs transformers' plain ``generate`` on the same prompts.
    ``matchness`` keeps, per prompt, the target's prompt KV cache and its greedy continuation
    (neither depends on the mask), so each later call costs one masked forward per prompt.
    """

    def __init__(
        self,
        model: Any,
        info: ModelInfo,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        max_draft: int = 8,
        draft_threshold: float = 0.8,
        warm_up: bool = True,
    ) -> None:
        from layersearch.runtime.drafting import DraftPolicy

        if not prompts or any(len(p) == 0 for p in prompts):
            raise LayersearchError("the runtime needs at least one non-empty prompt")
        if max_new_tokens < 1:
            raise LayersearchError(f"max new tokens must be >= 1, got {max_new_tokens}")
        self.model = model
        self._info = info
        self.prompts = [list(map(int, p)) for p in prompts]
        self.max_new_tokens = max_new_tokens
        self.policy = DraftPolicy(max_draft, draft_threshold)
        self._needs_warm_up = warm_up
        self._targets: dict[tuple[int, int], Any] = {}

    @classmethod
    def from_texts(cls, loaded: Any, texts: Sequence[str], **kwargs: Any) -> "ModelRuntime":
        """A runtime for a LoadedModel (model, tokenizer, info) and prompt texts."""
        prompts = [loaded.tokenizer(text, return_tensors="pt").input_ids[0].tolist() for text in texts]
        return cls(loaded.model, loaded.info, prompts, **kwargs)

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def context_length(self) -> int:
        return int(statistics.fmean(len(p) for p in self.prompts) + self.max_new_tokens / 2)

    # ----- measurements ------------------------------------------------------------------------
    def decode(self, mask: SkipMask) -> DecodeMeasurement:
        """Greedy speculative decoding of every prompt with ``mask``; counts and seconds pooled."""
        from layersearch.runtime.decoder import SpeculativeDecoder

        self._warm_up()
        decoder = SpeculativeDecoder(self.model, mask, policy=self.policy)
        stats = [decoder.generate(p, self.max_new_tokens).stats for p in self.prompts]
        return _pooled(stats)

    def baseline(self) -> DecodeMeasurement:
        """Plain ``model.generate`` (greedy) over the same prompts."""
        from layersearch.runtime.baseline import hf_generate

        self._warm_up()
        stats = [hf_generate(self.model, p, self.max_new_tokens).stats for p in self.prompts]
        return _pooled(stats)

    def matchness(self, mask: SkipMask, gamma: int) -> MatchMeasurement:
        """SWIFT matchness: one teacher-forced masked forward per prompt over gamma target tokens."""
        from layersearch.runtime.teacher import draft_logits

        matched = compared = 0
        for index in range(len(self.prompts)):
            run = self._target(index, gamma)
            if len(run.tokens) < 2:
                continue  # the target ended at once (end of sequence): nothing to predict
            predicted = draft_logits(self.model, mask, run).argmax(-1).tolist()  # predicts t_2..t_{gamma+1}
            matched += sum(int(p == t) for p, t in zip(predicted, run.tokens[1:]))
            compared += len(predicted)
        return MatchMeasurement(matched, compared)

    # ----- helpers -----------------------------------------------------------------------------
    def _target(self, index: int, gamma: int) -> Any:
        """The target's greedy tokens t_1..t_{gamma+1} with the prompt cache (a TargetRun, cached)."""
        key = (index, gamma)
        if key not in self._targets:
            from layersearch.runtime.decoder import eos_ids
            from layersearch.runtime.teacher import target_continuation

            self._targets[key] = target_continuation(self.model, self.prompts[index], gamma + 1, eos_ids(self.model))
        return self._targets[key]

    def _warm_up(self) -> None:
        """One short untimed generation, so the first measured mask does not pay start-up costs."""
        if self._needs_warm_up:
            from layersearch.runtime.decoder import SpeculativeDecoder

            self._needs_warm_up = False
            mask = SkipMask.none(self._info.num_layers)
            SpeculativeDecoder(self.model, mask, policy=self.policy).generate(self.prompts[0], 2)


def _pooled(stats: Sequence[Any]) -> DecodeMeasurement:
    new_tokens = sum(s.new_tokens for s in stats)
    return DecodeMeasurement(
        new_tokens=new_tokens,
        seconds=sum(s.total_seconds for s in stats),
        target_forwards=sum(s.target_forwards for s in stats),
        drafted=sum(s.drafted for s in stats),
        accepted=sum(s.accepted for s in stats),
        decode_tokens=sum(max(0, s.new_tokens - 1) for s in stats),
        draft_forwards=sum(s.draft_forwards for s in stats),
    )


__all__ = [
    "DEFAULT_GAMMA",
    "DEFAULT_MAX_NEW_TOKENS",
    "DEFAULT_SAMPLES",
    "DecodeMeasurement",
    "ExpectedSpeedup",
    "MatchMeasurement",
    "Matchness",
    "ModelRuntime",
    "NEEDS_PROFILE",
    "OBJECTIVES",
    "Objective",
    "Runtime",
    "Score",
    "TRIAL_ATTRS",
    "TimePerToken",
    "TokensPerTime",
    "check_objective",
    "make_objective",
    "objective_direction",
]
