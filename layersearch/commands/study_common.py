"""What ``study`` and ``study head-to-head`` share: search arguments and output lines (their
settings from the options: :mod:`layersearch.commands.study_options`)."""

from __future__ import annotations

import argparse
import sys

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


def log(message: str) -> None:
    """Progress notes go to stderr so stdout stays the command's result."""
    print(message, file=sys.stderr, flush=True)
