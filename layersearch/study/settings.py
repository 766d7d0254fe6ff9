"""StudySettings: everything a run needs to rebuild a search, stored with the study.

The settings are the study's user attribute ``"settings"`` (:data:`SETTINGS_ATTR`): model,
domain, strategy, objective, skip ratio, samples, seed, decoding options, the model's
:class:`~layersearch.masks.mask.ModelInfo` and the latency profile.

``space`` is the search space (:mod:`layersearch.strategies.space`): ``skips`` (skip masks,
the default, and what settings stored without it mean, so older studies resume unchanged) or
``plans`` (draft plans: each sub-layer skipped, int4, int8 or full, and the head int4, int8 or
full; ``plans-int8``, without int4, for plan studies made before it or costed by a profile
without int4 timings).

``seed`` seeds the sampler; ``prompt_seed`` chooses the prompts, drawn from the domain's
``prompt_split`` (``train`` for searches). Settings stored before version 2 had one seed for
both and searched on all items: they load with ``prompt_seed = seed`` and no split, so an
old study resumes on the prompts it started with.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from layersearch.common.checks import check_fraction, check_int
from layersearch.common.errors import LayersearchError
from layersearch.runtime import DRAFT_THRESHOLD, MAX_DRAFT
from layersearch.masks.mask import ModelInfo
from layersearch.objectives import (
    DEFAULT_GAMMA,
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_SAMPLES,
    check_objective,
    objective_direction,
)


#: Skip ratios a study uses when none is given, where they differ from the strategy's own:
#: ``random`` alone flips a coin per sub-layer (half the model skipped), which scores matchness
#: 0 on every trial on the default model; a fifth of the sub-layers keeps the draft useful there.
STUDY_SKIP_RATIO_DEFAULTS: dict[str, float] = {"random": 0.2}

SETTINGS_ATTR = "settings"
#: The study attribute of a ``tune`` study (what it was made for): the study commands read such a
#: study too (its settings are tune's, not a mask search's).
TUNE_ATTR = "layersearch_tune"
#: The trial attribute holding a tune trial's decoder spec (JSON object).
TUNE_SPEC_ATTR = "spec"


def tune_settings(study: Any) -> dict[str, Any] | None:
    """A tune study's settings as ``study show`` and ``list`` print them (None: no tune study)."""
    identity = study.user_attrs.get(TUNE_ATTR)
    if not isinstance(identity, dict):
        return None
    return {"strategy": "tune", "objective": "train speedup", "domain": identity.get("prompts"),
            "model": identity.get("model"), "max_new_tokens": identity.get("max_new_tokens"), "seed": identity.get("seed")}
SETTINGS_VERSION = 2


@dataclass(frozen=True)
class StudySettings:
    """Everything a run needs to rebuild a search; stored as the study's ``settings`` user attr."""

    model: str
    domain: str
    strategy: str
    objective: str
    skip_ratio: float | None = None
    samples: int = DEFAULT_SAMPLES
    seed: int = 0
    prompt_seed: int = 0
    prompt_split: str | None = "train"
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    gamma: int = DEFAULT_GAMMA
    max_draft: int = MAX_DRAFT
    draft_threshold: float = DRAFT_THRESHOLD
    decode_stats: bool = False
    device: str = "cpu"
    dtype: str = "float32"
    strategy_options: dict[str, Any] = field(default_factory=dict)  # sampler / stop-rule settings (e.g. kappa)
    space: str = "skips"  # the search space: skips (skip masks) or plans (draft plans)
    model_info: dict[str, Any] | None = field(default=None, compare=False)
    profile: dict[str, Any] | None = field(default=None, compare=False)

    #: Fields that describe the measured model, not the user's choice: not compared on re-create.
    DERIVED = ("model_info", "profile")

    def validated(self) -> "StudySettings":
        """Checked copy with the strategy's default skip ratio filled in; raises LayersearchError."""
        from layersearch.data import DOMAINS

        from layersearch.strategies import check_options, check_space, get_strategy, make_sampler

        strategy = get_strategy(self.strategy)
        check_objective(self.objective)
        if self.domain not in DOMAINS:
            from layersearch.data import check_domain

            check_domain(self.domain)  # ``mix:a,b,...`` (KNN-SSD's SSD_M) or an error naming the domains
        for name, minimum in (("samples", 1), ("max_new_tokens", 1), ("gamma", 1), ("max_draft", 1)):
            check_int(getattr(self, name), name.replace("_", "-"), minimum=minimum)
        for name in ("seed", "prompt_seed"):
            # numpy's seeding (Optuna's samplers) takes 32 bits
            check_int(getattr(self, name), name.replace("_", "-"), minimum=0, maximum=2**32 - 1)
        from layersearch.data import check_split

        check_split(self.prompt_split)
        check_fraction(self.draft_threshold, "draft threshold")
        ratio = self.skip_ratio
        if ratio is None:
            ratio = STUDY_SKIP_RATIO_DEFAULTS.get(self.strategy, strategy.default_ratio)
        options = check_options(self.strategy, self.strategy_options)
        check_space(self.space)
        from layersearch.strategies.space import is_plan_space

        if is_plan_space(self.space) and str(self.device).startswith("cpu") and self.dtype != "float32":
            raise LayersearchError(f"a study of plans runs int8 sub-layers on CPU from float32 weights; "
                                   f"dtype {self.dtype} has none (use float32, or the skip space)")
        # Rejects a ratio or an option value it cannot use.
        make_sampler(self.strategy, num_layers=4, skip_ratio=ratio, seed=0, options=options, space=self.space)
        return replace(self, skip_ratio=None if ratio is None else float(ratio), strategy_options=options)

    @property
    def direction(self) -> str:
        """The objective's direction ("minimize" or "maximize")."""
        return objective_direction(self.objective)

    def identity(self) -> dict[str, Any]:
        """The user's choices (derived fields left out): equal identities mean the same study."""
        data = self.to_dict()
        for key in self.DERIVED:
            data.pop(key, None)
        data.pop("version", None)
        return data

    def differences(self, other: "StudySettings") -> list[str]:
        """``key: ours -> theirs`` for every choice that differs."""
        mine, theirs = self.identity(), other.identity()
        return [f"{key} {mine.get(key)!r} -> {theirs.get(key)!r}" for key in mine if mine.get(key) != theirs.get(key)]

    def info(self) -> ModelInfo:
        """The ModelInfo recorded at creation."""
        if self.model_info is None:
            raise LayersearchError("the study settings lack the model info (not created by layersearch study create?)")
        return ModelInfo.from_dict(self.model_info, "settings.model_info")

    def latency_profile(self) -> Any:
        """The stored LatencyProfile, or None."""
        if self.profile is None:
            return None
        from layersearch.profiling.profile import LatencyProfile

        return LatencyProfile.from_dict(self.profile)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (what is stored in the study)."""
        return {"version": SETTINGS_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, data: Any) -> "StudySettings":
        """Parse the stored settings; unknown keys are ignored, missing optional ones defaulted."""
        if not isinstance(data, dict):
            raise LayersearchError("study settings must be an object")
        known = {f.name for f in fields(cls)}
        missing = [key for key in ("model", "domain", "strategy", "objective") if key not in data]
        if missing:
            raise LayersearchError(f"study settings lack {', '.join(missing)}")
        values = {key: value for key, value in data.items() if key in known}
        if data.get("version", 1) < 2:  # one seed for sampler and prompts, all items searched
            values.setdefault("prompt_seed", values.get("seed", 0))
            values.setdefault("prompt_split", None)
        return cls(**values)
