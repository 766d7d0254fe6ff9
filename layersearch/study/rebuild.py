"""What a study rebuilds from its stored settings: strategy plan, initial masks, prompts, model.

The mask samplers draw from ``(seed, trial number)``, so a rebuilt sampler proposes what the
original would have; ``tpe`` (a stream RNG) is seeded with ``seed + finished trials``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

from layersearch.masks.mask import SkipMask
from layersearch.study.settings import StudySettings


@dataclass(frozen=True)
class StrategyPlan:
    """What a run needs from a strategy: its sampler and its stop rule (checked after each trial)."""

    sampler: Any
    stop_reason: Callable[[Any], str | None]


def strategy_plan(settings: StudySettings, num_layers: int, *, n_finished: int) -> StrategyPlan:
    """The sampler and stop rule of the study's strategy, rebuilt from its settings."""
    from layersearch.strategies import get_strategy, make_sampler, stop_reason, stop_rule

    strategy = get_strategy(settings.strategy)
    # Mask samplers draw from (seed, trial number): the plain seed keeps resumption exact.
    # A stream-seeded sampler (TPE) starts a resumed run past the draws already made.
    seed = settings.seed + n_finished if strategy.stream_seeded else settings.seed
    options = settings.strategy_options
    sampler = make_sampler(strategy.name, num_layers=num_layers, skip_ratio=settings.skip_ratio, seed=seed, options=options,
                           space=settings.space)
    # SWIFT's target (0.95) is a matchness level; with another objective only patience/length apply.
    rule = stop_rule(options, objective_is_matchness=settings.objective == "matchness")
    return StrategyPlan(sampler, lambda study: stop_reason(strategy.name, study, rule=rule))


def initial_masks(settings: StudySettings, loaded: Any, texts: Sequence[str], profile: Any) -> tuple[SkipMask, ...]:
    """Masks to enqueue when the study is created (Self-SD's probes, SWIFT's start, candidates)."""
    from layersearch.strategies import StrategyInputs, initial_masks as strategy_masks

    inputs = StrategyInputs(
        num_layers=loaded.info.num_layers, loaded=loaded, texts=tuple(texts), profile=profile,
        max_new_tokens=settings.max_new_tokens, space=settings.space,
    )
    return strategy_masks(
        settings.strategy, num_layers=inputs.num_layers, skip_ratio=settings.skip_ratio, inputs=inputs
    )


def prompt_texts(settings: StudySettings, split: str | None | Literal[False] = False, tokenizer: Any = None) -> list[str]:
    """The study's prompts: its search split by default, another split when given (None: all);
    ``tokenizer`` formats the chat rows of a user prompt file."""
    from layersearch.data import load_prompts

    chosen = settings.prompt_split if split is False else split
    prompts = load_prompts(settings.domain, settings.samples, seed=settings.prompt_seed, split=chosen, tokenizer=tokenizer)
    return [prompt.text for prompt in prompts]


def check_prompts(settings: StudySettings) -> None:
    """Fail before the model loads if the study's prompts cannot be had (a missing package, a
    bad prompt file, too few rows in its search split)."""
    from layersearch.data import user

    if user.is_user_domain(settings.domain):
        user.choose_rows(settings.domain[len(user.PREFIX):], settings.samples, settings.prompt_seed, settings.prompt_split)
    else:
        prompt_texts(settings)


def load_study_model(settings: StudySettings) -> Any:
    """The study's model on its device and dtype."""
    from layersearch.models.loading import load_model as load

    return load(settings.model, device=settings.device, dtype=settings.dtype)
