"""Arguments several commands share, and their defaults, defined once.

Every command module under :mod:`layersearch.commands` has ``add_parser(sub, parser_class)``
(its arguments) and ``run(args)`` (its work); :mod:`layersearch.cli` iterates
:data:`layersearch.cli.COMMANDS`. This module must stay light (no torch, no Optuna): the
parsers are built for ``--help`` too.
"""

from __future__ import annotations

import argparse
from typing import Any

from layersearch.common.checks import SELF_DRAFT_QUANTS
from layersearch.common.errors import LayersearchError
from layersearch.runtime import DRAFT_THRESHOLD, MAX_DRAFT  # the runtime's defaults (its root imports no torch)

DEFAULT_MODEL = "smollm2-135m"
STORAGE_HELP = "Optuna storage URL (default sqlite:///studies/<name>.db)"

# --draft-quant choices: the model's own draft takes each (a draft model int8 only: QUANT_SCHEMES).
QUANT_CHOICES = SELF_DRAFT_QUANTS


# --kernels choices; equal to layersearch.kernels.select.CHOICES (tests/commands/test_args.py checks).
KERNEL_CHOICES = ("auto", "stock", "numba")
# --compile choices; equal to layersearch.decoder.spec.COMPILE_CHOICES (tests/commands/test_args.py checks).
COMPILE_CHOICES = ("auto", "on", "off")


def model_args(parser: argparse.ArgumentParser, *, threads: int | None = None, kernels: bool = False) -> None:
    """``--model``, ``--device``, ``--dtype`` and ``--threads`` (``threads``: its default);
    with ``kernels``, also ``--kernels`` and ``--compile``."""
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"embedded name, .gguf file, HF id or local directory (default {DEFAULT_MODEL})")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--dtype", default=None, help="float32, float16 or bfloat16 (default: float32 on cpu, bfloat16 on cuda). "
                        "Greedy speculative output is plain decoding's token for token in float32; in bfloat16 and "
                        "float16 near-ties can break differently, as under any change of batch shape")
    threads_arg(parser, default=threads)
    if kernels:
        parser.add_argument(
            "--kernels", choices=KERNEL_CHOICES, default="auto",
            help="CPU kernels of every forward: numba (each weight row read once for all verified tokens; "
            "per-token results independent of the verified length), stock (torch's), or auto (default): "
            "the latency profile's choice (profile: time both and keep numba only where it measures faster; "
            "without a profile, stock)",
        )
        parser.add_argument(
            "--compile", choices=COMPILE_CHOICES, default=None,
            help="run the model's forwards captured: a static KV cache and each forward shape compiled once "
            "(torch.compile; a CUDA graph on CUDA), replayed every step with one host sync per step; auto: on for "
            "CUDA, off on CPU (default: a --spec file's setting, else auto). Compiling takes seconds to a minute per "
            "shape, reported apart from decoding",
        )


def threads_arg(parser: argparse.ArgumentParser, *, default: int | None = None) -> None:
    """``--threads``: CPU threads for torch."""
    shown = "torch's choice" if default is None else f"{default}: steadier on a shared machine"
    parser.add_argument("--threads", type=int, default=default, help=f"CPU threads for torch (default {shown})")


def draft_args(
    parser: argparse.ArgumentParser, *, max_draft: int = MAX_DRAFT, threshold: float = DRAFT_THRESHOLD,
    threshold_note: str = "; 0 disables",
) -> None:
    """``--max-draft`` and ``--draft-threshold``."""
    parser.add_argument("--max-draft", type=int, default=max_draft, help=f"maximum draft length (default {max_draft})")
    parser.add_argument(
        "--draft-threshold", type=float, default=threshold,
        help=f"stop drafting below this top-1 probability (default {threshold:g}{threshold_note})",
    )


def storage_arg(parser: argparse.ArgumentParser, help: str = STORAGE_HELP) -> None:
    """``--storage``: an Optuna storage URL."""
    parser.add_argument("--storage", help=help)


# ----- SWIFT on the fly (generate --mask swift, swift stream) ---------------------------
# Defaults repeated from layersearch.swift.SwiftConfig (tests/swift/test_swift_cli.py checks).
SWIFT_DEFAULTS = dict(window=32, bo_interval=25, kappa=2.5, target=0.95, patience=300, max_steps=1000, tolerance=0.7)


def swift_args(parser: argparse.ArgumentParser) -> None:
    """SWIFT's optimizer settings: ``--swift-window`` (gamma), ``--swift-bo-interval`` (beta),
    ``--swift-kappa``, ``--swift-target``, ``--swift-patience``, ``--swift-max-steps``,
    ``--swift-tolerance`` and ``--swift-min-skip-ratio``."""
    d = SWIFT_DEFAULTS
    g = parser.add_argument_group("SWIFT on the fly")
    g.add_argument("--swift-window", type=int, default=d["window"], help=f"context window gamma: generated tokens that score a candidate (default {d['window']})")
    g.add_argument("--swift-bo-interval", type=int, default=d["bo_interval"], help=f"beta: every beta-th optimization step is a GP-UCB step (default {d['bo_interval']})")
    g.add_argument("--swift-kappa", type=float, default=d["kappa"], help=f"kappa of UCB (default {d['kappa']})")
    g.add_argument("--swift-target", type=float, default=d["target"], help=f"stop optimizing at this matchness (default {d['target']}; the authors' script 0.93)")
    g.add_argument("--swift-patience", type=int, default=d["patience"], help=f"stop after this many steps without improvement (default {d['patience']})")
    g.add_argument("--swift-max-steps", type=int, default=d["max_steps"], help=f"stop after this many optimization steps (default {d['max_steps']})")
    g.add_argument("--swift-tolerance", type=float, default=d["tolerance"], help=f"lower the skip ratio by 0.1 when an input's acceptance stays below this (default {d['tolerance']}; 0 never)")
    g.add_argument("--swift-min-skip-ratio", type=float, default=None, help="lowest skip ratio the tolerance rule may reach (default one 0.1 step below the start)")


def swift_config(options: Any, skip_ratio: float | None = None):
    """A :class:`~layersearch.swift.SwiftConfig` from ``--swift-*`` options (``options.swift_window``
    ...), ``seed`` and the skip ratio (``skip_ratio``, else ``options.skip_ratio`` where it has one,
    else SWIFT's 0.45); a bad value is one error naming the options."""
    from layersearch.swift import SwiftConfig
    from layersearch.swift.search import SKIP_RATIO

    ratio = skip_ratio if skip_ratio is not None else getattr(options, "skip_ratio", None)
    try:
        return SwiftConfig(
            skip_ratio=SKIP_RATIO if ratio is None else ratio,
            window=options.swift_window, bo_interval=options.swift_bo_interval, kappa=options.swift_kappa,
            target=options.swift_target, patience=options.swift_patience, max_steps=options.swift_max_steps,
            tolerance=options.swift_tolerance, min_skip_ratio=options.swift_min_skip_ratio,
            seed=getattr(options, "seed", 0) or 0,
        )
    except LayersearchError as exc:  # name the options, not the config fields
        ratio_option = "--skip-ratio" if hasattr(options, "skip_ratio") else "--mask swift:R"
        raise LayersearchError(f"{exc} (see the --swift-* options and {ratio_option})") from None
