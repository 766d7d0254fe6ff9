"""Command-line entry point: ``layersearch <command> ...`` and ``python -m layersearch``.

This module only builds the argument parsers and dispatches; each command lives in
``layersearch/commands/`` and is imported when it runs, so ``--help`` stays fast. Bad input
ends in one ``layersearch: error: ...`` line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from layersearch.errors import LayersearchError

DEFAULT_MODEL = "smollm2-135m"
DEFAULT_STORAGE_HELP = "Optuna storage URL (default sqlite:///studies/<name>.db)"


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line instead of usage + error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def _model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"embedded name, HF id or local directory (default {DEFAULT_MODEL})")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--dtype", default=None, help="float32, float16 or bfloat16 (default: float32 on cpu, bfloat16 on cuda)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")


def _draft_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-draft", type=int, default=8, help="maximum draft length (default 8)")
    parser.add_argument("--draft-threshold", type=float, default=0.8, help="stop drafting below this top-1 probability (default 0.8; 0 disables)")
    parser.add_argument("--adaptive-threshold", action="store_true", help="Self-SD's adaptive draft threshold")


def _add_generate(sub) -> None:
    p = sub.add_parser("generate", help="generate text with self-speculative decoding (or plain, with --baseline)")
    _model_args(p)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--mask", help="mask JSON file")
    which.add_argument("--skip-ratio", type=float, help="use an evenly spread mask skipping this share of sub-layers")
    which.add_argument("--dynamic", choices=["knapsack"], help="re-select the draft sub-network while decoding")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompts", help='JSONL file, one {"prompt": ...} per line')
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--baseline", action="store_true", help="plain autoregressive decoding (transformers generate)")
    p.add_argument("--profile", help="latency profile JSON: adds the predicted speedup to the stats (and feeds --dynamic knapsack)")
    p.add_argument("--reselect-every", type=int, default=64, help="decoding steps between re-selections (--dynamic)")
    p.add_argument("--json", action="store_true", help="print one JSON object per prompt")
    _draft_args(p)
    p.add_argument("--drafter", choices=["layer-skip", "prompt-lookup", "hybrid"], default="layer-skip",
                   help="where drafts come from: the masked model, n-gram lookup over prompt and output, "
                   "or lookup first and the masked model otherwise (default layer-skip)")
    p.add_argument("--verification", choices=["chain", "tree"], default="chain",
                   help="verify the draft chain, or SWIFT's token tree of top-k candidates per position (greedy; "
                   "sampling verifies the chain) (default chain)")
    p.add_argument("--lookahead", default=None, metavar="{static,confidence,adaptive,heuristic,disco:FILE}",
                   help="draft-length rule: static --max-draft, stop below --draft-threshold, Self-SD's adaptive "
                   "threshold, HF's heuristic schedule, or a DISCO classifier file (its mask unless --mask is given) "
                   "(default: confidence, adaptive with --adaptive-threshold)")
    p.set_defaults(command="generate")


def _add_mask(sub) -> None:
    p = sub.add_parser("mask", help="create or show mask files")
    msub = p.add_subparsers(dest="action", required=True, parser_class=_Parser)
    c = msub.add_parser("create", help="write a mask file for a model")
    c.add_argument("--attention", default="", help="comma-separated 0-based layer indices")
    c.add_argument("--mlp", default="", help="comma-separated 0-based layer indices")
    c.add_argument("--model", default=DEFAULT_MODEL)
    c.add_argument("--out", required=True)
    s = msub.add_parser("show", help="draw which sub-layers a mask skips")
    s.add_argument("file")
    p.set_defaults(command="mask")


def _add_profile(sub) -> None:
    p = sub.add_parser("profile", help="measure the latency profile of a model on this device")
    _model_args(p)
    p.add_argument("--out", required=True)
    p.add_argument("--contexts", default="64,256,512,1024", help="context lengths to measure")
    p.add_argument("--repeats", type=int, default=5)
    p.set_defaults(command="profile")


def _add_bench(sub) -> None:
    p = sub.add_parser("bench", help="plain generate vs HF peers vs our loop, per domain")
    _model_args(p)
    p.add_argument("--domains", default="summarization,math,code", help="comma-separated domains")
    p.add_argument("--prompts-per-domain", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--skip-ratios", default="0.1,0.2,0.3,0.45", help="uniform mask ratios to run")
    p.add_argument("--masks", default="", help="comma-separated mask files to run as well")
    p.add_argument("--repeats", type=int, default=3, help="runs per configuration (median reported)")
    p.add_argument("--profile", help="latency profile JSON (measured if absent)")
    p.add_argument("--out", default="bench.json")
    p.add_argument("--no-peers", action="store_true", help="skip HF's prompt lookup / early exit peers")
    p.add_argument("--peers", default="prompt-lookup,early-exit", help="transformers' peers to run (default prompt-lookup,early-exit)")
    p.add_argument("--drafters", default="prompt-lookup,hybrid",
                   help="our other drafters to run beside the layer-skip masks (default prompt-lookup,hybrid; '' for none)")
    _draft_args(p)
    p.set_defaults(command="bench")


def _add_demo(sub) -> None:
    p = sub.add_parser("demo", help="short demo on the embedded model: vanilla vs speculative")
    _model_args(p)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.set_defaults(command="demo")


def build_parser() -> argparse.ArgumentParser:
    """The full ``layersearch`` argument parser."""
    parser = _Parser(prog="layersearch", description="Search and run layer-skip masks for self-speculative decoding.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (_add_generate, _add_mask, _add_profile, _add_bench, _add_demo):
        add(sub)
    # Larger command families define their own parsers (light modules: no torch at import).
    for name in ("study_args", "plot_args", "knapspec_bench", "disco"):
        importlib.import_module(f"layersearch.commands.{name}").add_parser(sub, _Parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        module = importlib.import_module(f"layersearch.commands.{args.command}")
        return int(module.run(args) or 0)
    except LayersearchError as exc:
        print(f"layersearch: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("layersearch: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
