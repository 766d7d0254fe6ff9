"""StudySettings from a command's options (``study create``, ``study head-to-head``): the prompt
domain of ``--domain`` or ``--prompts``, ``--preset`` and the strategies' own option flags; and
``study head-to-head``'s plans (one study per strategy of ``--strategies``) and report targets.

``options`` is any object with those option names as attributes (argparse's parsed arguments,
or a :class:`types.SimpleNamespace`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from layersearch.common.errors import LayersearchError
from layersearch.objectives import DEFAULT_GAMMA, DEFAULT_MAX_NEW_TOKENS, DEFAULT_SAMPLES
from layersearch.runtime import DRAFT_THRESHOLD, MAX_DRAFT

#: Option names that become StudySettings.strategy_options (None: not given).
STRATEGY_OPTION_FLAGS = ("acquisition", "kappa", "n_startup_trials", "kernel", "bo_interval", "target", "patience", "max_trials")
#: Defaults of the search settings a preset may set (a flag left at its default takes the preset's value).
PRESET_SETTING_DEFAULTS = {"skip_ratio": None, "samples": DEFAULT_SAMPLES, "max_new_tokens": DEFAULT_MAX_NEW_TOKENS,
                           "gamma": DEFAULT_GAMMA, "max_draft": MAX_DRAFT, "draft_threshold": DRAFT_THRESHOLD, "objective": None,
                           "space": "skips"}


def domain_from_options(options: Any, default: str | None = None) -> str:
    """The prompt domain of ``--domain`` or ``--prompts FILE`` (the domain ``file:FILE``), one of them."""
    from layersearch.data.user import domain_for

    domain, prompts = getattr(options, "domain", None), getattr(options, "prompts", None)
    if domain is not None and prompts is not None:
        raise LayersearchError("give --domain or --prompts, not both")
    if prompts is not None:
        return domain_for(prompts)
    if domain is not None:
        return domain
    if default is None:
        raise LayersearchError("say which prompts to search on: --domain NAME or --prompts FILE.jsonl")
    return default


def settings_from_options(options: Any, *, strategy: str | None = None, objective: str | None = None,
                          skip_ratio: Any = "options"):
    """StudySettings from create-style options (``--preset`` and strategy options applied);
    ``strategy``, ``objective`` and ``skip_ratio`` replace the options' own."""
    from layersearch.models.loading import default_dtype
    from layersearch.study.settings import StudySettings

    o = options
    if (objective or getattr(o, "objective", None)) is None and getattr(o, "preset", None) is None:
        raise LayersearchError("study create needs --objective (or --preset paper for selfsd-bo and swift)")
    settings = StudySettings(
        model=o.model,
        domain=domain_from_options(o),
        strategy=strategy or o.strategy,
        objective=objective or o.objective,
        skip_ratio=o.skip_ratio if skip_ratio == "options" else skip_ratio,
        samples=o.samples,
        seed=o.seed,
        prompt_seed=o.prompt_seed,
        max_new_tokens=o.max_new_tokens,
        gamma=o.gamma,
        max_draft=o.max_draft,
        draft_threshold=o.draft_threshold,
        decode_stats=o.decode_stats,
        device=o.device,
        dtype=o.dtype or default_dtype(o.device),
        space=getattr(o, "space", "skips"),
    )
    return with_strategy_options(settings, o)


def with_strategy_options(settings: Any, options: Any) -> Any:
    """``settings`` with ``--preset`` applied (options left at their defaults take the preset's
    values) and the strategy option flags given."""
    from layersearch.strategies import preset

    strategy_options: dict[str, Any] = {}
    if getattr(options, "preset", None):
        values = dict(preset(settings.strategy, options.preset))
        changes = {}
        for key, default in PRESET_SETTING_DEFAULTS.items():
            if key in values and getattr(settings, key) == default:
                changes[key] = values.pop(key)
            values.pop(key, None)  # an explicit flag wins
        settings = replace(settings, **changes)
        strategy_options.update(values)
    strategy_options.update({k: getattr(options, k) for k in STRATEGY_OPTION_FLAGS if getattr(options, k, None) is not None})
    return replace(settings, strategy_options=strategy_options)


def strategies_named(text: str) -> list[Any]:
    """The registered strategies of a comma-separated list (distinct; an unknown name is one error)."""
    from layersearch.strategies import get_strategy

    strategies = [s.strip() for s in text.split(",") if s.strip()]
    if not strategies or len(set(strategies)) != len(strategies):
        raise LayersearchError("--strategies must list distinct strategy names")
    return [get_strategy(name) for name in strategies]



def report_targets(base: str, out: str | None, plot: str | None) -> tuple[Any, Any]:
    """The report's and the figure's checked outputs (default ``BASE-head-to-head.json`` / ``.png``)."""
    from layersearch.common.outputs import check_output

    base = base[: -len(".json")] if base.endswith(".json") else base[: -len(".csv")] if base.endswith(".csv") else base
    return (check_output(out or f"{base}-head-to-head.json", "--out"),
            check_output(plot or f"{base}-head-to-head.png", "--plot", suffixes=(".png",)))



def head_to_head_plans(options: Any, strategies: Sequence[Any], prefix: str) -> list[tuple[str, Any]]:
    """(study name, validated StudySettings) of each strategy from ``study head-to-head``'s options
    (an object with them as attributes): each strategy's native objective (else
    ``random_objective``), the preset where it has one, swift's skip ratio (or ``skip_ratio``)
    where it takes one."""
    from types import SimpleNamespace

    from layersearch.strategies import default_skip_ratio

    ratio = options.skip_ratio if options.skip_ratio is not None else default_skip_ratio("swift")
    plans = []
    for strategy in strategies:
        objective = strategy.objective or options.random_objective
        own = SimpleNamespace(**{**vars(options), "preset": options.preset if options.preset in strategy.presets else None})
        settings = settings_from_options(
            own, strategy=strategy.name, objective=objective, skip_ratio=ratio if strategy.takes_ratio else None,
        ).validated()
        plans.append((f"{prefix}-{strategy.name}", settings))
    return plans
