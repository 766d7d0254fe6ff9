"""What ``study`` and ``study head-to-head`` share: search arguments, settings, output lines."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from layersearch.commands.args import draft_args
from layersearch.objectives import DEFAULT_GAMMA, DEFAULT_MAX_NEW_TOKENS, DEFAULT_SAMPLES

OBJECTIVE_HELP = "time-per-token, matchness, expected-speedup or tpt"


def search_args(parser: argparse.ArgumentParser, ratio_help: str = "skip ratio (strategies with a fixed count)") -> None:
    """The search settings of ``study create`` and ``study head-to-head``."""
    parser.add_argument("--skip-ratio", type=float, default=None, help=ratio_help)
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help=f"representative prompts (default {DEFAULT_SAMPLES})")
    parser.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    parser.add_argument("--prompt-seed", type=int, default=0, help="which prompts of the train split are searched on (default 0)")
    parser.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS, help=f"tokens generated per prompt (default {DEFAULT_MAX_NEW_TOKENS})")
    parser.add_argument("--gamma", type=int, default=DEFAULT_GAMMA, help=f"matchness window (default {DEFAULT_GAMMA})")
    draft_args(parser, threshold_note="")
    parser.add_argument("--decode-stats", action="store_true", help="matchness trials also run the decoder to record M, alpha, tokens/s")
    parser.add_argument("--space", choices=["skips", "plans"], default="skips",
                        help="search skip masks (default; every paper's space) or draft plans: each sub-layer "
                             "skipped, int8 or full, the LM head int8 or full (CPU, float32)")


def domain_from_args(args: Any, default: str | None = None) -> str:
    """The prompt domain of ``--domain`` or ``--prompts FILE`` (the domain ``file:FILE``), one of them."""
    from layersearch.data.user import domain_for
    from layersearch.common.errors import LayersearchError

    domain, prompts = getattr(args, "domain", None), getattr(args, "prompts", None)
    if domain is not None and prompts is not None:
        raise LayersearchError("give --domain or --prompts, not both")
    if prompts is not None:
        return domain_for(prompts)
    if domain is None and default is None:
        raise LayersearchError("say which prompts to search on: --domain NAME or --prompts FILE.jsonl")
    return domain if domain is not None else default


def settings_from_args(args: Any, *, strategy: str | None = None, objective: str | None = None, skip_ratio: Any = "args"):
    """StudySettings from create-style arguments (``--preset`` and strategy options applied)."""
    from layersearch.common.errors import LayersearchError
    from layersearch.models.loading import default_dtype
    from layersearch.study import StudySettings

    if (objective or getattr(args, "objective", None)) is None and getattr(args, "preset", None) is None:
        raise LayersearchError("study create needs --objective (or --preset paper for selfsd-bo and swift)")
    settings = StudySettings(
        model=args.model,
        domain=domain_from_args(args),
        strategy=strategy or args.strategy,
        objective=objective or args.objective,
        skip_ratio=args.skip_ratio if skip_ratio == "args" else skip_ratio,
        samples=args.samples,
        seed=args.seed,
        prompt_seed=args.prompt_seed,
        max_new_tokens=args.max_new_tokens,
        gamma=args.gamma,
        max_draft=args.max_draft,
        draft_threshold=args.draft_threshold,
        decode_stats=args.decode_stats,
        device=args.device,
        dtype=args.dtype or default_dtype(args.device),
        space=getattr(args, "space", "skips"),
    )
    return with_strategy_options(settings, args)


# ----- strategy options and presets (issue 12: Self-SD and SWIFT as published) ---------------
#: ``study create`` flags that become StudySettings.strategy_options (None: not given).
STRATEGY_OPTION_FLAGS = ("acquisition", "kappa", "n_startup_trials", "kernel", "bo_interval", "target", "patience", "max_trials")
#: Argparse defaults of the search settings a preset may set (a flag left at its default takes the preset's value).
PRESET_SETTING_DEFAULTS = {"skip_ratio": None, "samples": DEFAULT_SAMPLES, "max_new_tokens": DEFAULT_MAX_NEW_TOKENS,
                           "gamma": DEFAULT_GAMMA, "max_draft": 8, "draft_threshold": 0.8, "objective": None,
                           "space": "skips"}


def strategy_option_args(parser: argparse.ArgumentParser) -> None:
    """``--preset`` and the strategies' own settings (Self-SD's GP, SWIFT's BO and stop rule)."""
    g = parser.add_argument_group("strategy options")
    g.add_argument("--preset", choices=["paper"], help="the paper's settings in one word (selfsd-bo, swift); other flags given override it")
    g.add_argument("--acquisition", choices=["logei", "ucb"], help="selfsd-bo: GP acquisition (default logei; paper: ucb)")
    g.add_argument("--kappa", type=float, help="UCB's kappa (selfsd-bo default 2.576, swift 2.5)")
    g.add_argument("--n-startup-trials", type=int, help="selfsd-bo: random trials before the GP, probes included (default 10; paper: 0)")
    g.add_argument("--kernel", choices=["rbf", "matern-2.5"], help="selfsd-bo: GP kernel (default rbf; paper: matern-2.5, bayes_opt's)")
    g.add_argument("--bo-interval", type=int, help="swift: every beta-th trial is a GP-UCB step (default 25)")
    g.add_argument("--target", type=float, help="swift: stop at this matchness (default 0.95)")
    g.add_argument("--patience", type=int, help="swift: stop after this many trials without improvement (default 300)")
    g.add_argument("--max-trials", type=int, help="swift: stop after this many trials (default 1000)")


def with_strategy_options(settings: Any, args: Any) -> Any:
    """``settings`` with ``--preset`` applied (flags left at their defaults take the preset's values)
    and the strategy option flags given."""
    from dataclasses import replace

    from layersearch.strategies import preset

    options: dict[str, Any] = {}
    if getattr(args, "preset", None):
        values = dict(preset(settings.strategy, args.preset))
        changes = {}
        for key, default in PRESET_SETTING_DEFAULTS.items():
            if key in values and getattr(settings, key) == default:
                changes[key] = values.pop(key)
            values.pop(key, None)  # an explicit flag wins
        settings = replace(settings, **changes)
        options.update(values)
    options.update({k: getattr(args, k) for k in STRATEGY_OPTION_FLAGS if getattr(args, k, None) is not None})
    return replace(settings, strategy_options=options)


def log(message: str) -> None:
    """Progress notes go to stderr so stdout stays the command's result."""
    print(message, file=sys.stderr, flush=True)
