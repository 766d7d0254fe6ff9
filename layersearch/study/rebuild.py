"""What a study rebuilds from its stored settings: strategy plan, initial masks, prompts, model.

The mask samplers draw from ``(seed, trial number)``, so a rebuilt sampler proposes what the
original would have; ``tpe`` (a stream RNG) is seeded with ``seed + finished trials``.
"""

from __future__ import annotations

from typing import Any, Sequence

from layersearch.mask import SkipMask
from layersearch.study.settings import StudySettings
from layersearch.study.strategy import _builtin_strategies, _extra_strategies, _StrategyPlan


def _strategy_plan(settings: StudySettings, num_layers: int, *, n_finished: int) -> _StrategyPlan:
    """The sampler and stop rule of the study's strategy, rebuilt from its settings."""
    extras = _extra_strategies() if settings.strategy not in _builtin_strategies() else {}
    if settings.strategy in extras:
        return extras[settings.strategy].plan(settings, num_layers, n_finished)
    from layersearch.strategies import StopRule, make_sampler, stop_reason

    # Mask samplers draw from (seed, trial number): the plain seed keeps resumption exact.
    # TPE draws from one stream, so a resumed run starts it past the draws already made.
    seed = settings.seed + n_finished if settings.strategy == "tpe" else settings.seed
    sampler = make_sampler(settings.strategy, num_layers=num_layers, skip_ratio=settings.skip_ratio, seed=seed)
    # SWIFT's target (0.95) is a matchness level; with another objective only patience/length apply.
    rule = None if settings.objective == "matchness" else StopRule(target=None)
    return _StrategyPlan(sampler, lambda study: stop_reason(settings.strategy, study, rule=rule))


def _initial_masks(settings: StudySettings, loaded: Any, texts: Sequence[str], profile: Any) -> tuple[SkipMask, ...]:
    """Masks to enqueue when the study is created (Self-SD's probes, SWIFT's start, candidates)."""
    if settings.strategy not in _builtin_strategies():
        return _extra_strategies()[settings.strategy].initial(settings, loaded, texts, profile)
    from layersearch.strategies import initial_masks

    return initial_masks(settings.strategy, num_layers=loaded.info.num_layers, skip_ratio=settings.skip_ratio)


def _prompt_texts(settings: StudySettings, split: str | None | bool = False) -> list[str]:
    """The study's prompts: its search split by default, another split when given (None: all)."""
    from layersearch.data import load_prompts

    chosen = settings.prompt_split if split is False else split
    prompts = load_prompts(settings.domain, settings.samples, seed=settings.prompt_seed, split=chosen)
    return [prompt.text for prompt in prompts]


def _load_model(settings: StudySettings) -> Any:
    from layersearch.models.loading import load_model

    return load_model(settings.model, device=settings.device, dtype=settings.dtype)
