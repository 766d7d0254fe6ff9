"""``layersearch tune``: the fastest lossless configuration for your prompts, written as a spec.

This module parses and prints; the work is :mod:`layersearch.tune` (the run from the options:
:mod:`layersearch.commands.tune_options`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from layersearch.commands.args import model_args, storage_arg


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``tune``: its arguments."""
    p = sub.add_parser("tune", help="search every drafter, mask, lookahead and verifier for your prompts; write the best spec")
    p.add_argument("--prompts", required=True, metavar="FILE",
                   help="your prompts (JSONL: {\"prompt\": ...} or {\"messages\": [...]} per line); train split searched, test split held out")
    model_args(p, kernels=True)
    p.add_argument("--draft-model", metavar="MODEL", help="an independent draft model sharing the tokenizer (searched as well; "
                   "on CPU also with int8 weights)")
    p.add_argument("--budget", type=float, required=True, metavar="SECONDS",
                   help="search time: the mask pre-search and the study (the held-out re-measurement comes after)")
    p.add_argument("--out", required=True, metavar="SPEC", help="the chosen decoder spec (JSON; runs with generate --spec)")
    p.add_argument("--report", metavar="FILE", help="markdown report (default: --out with .md); a .png beside it")
    p.add_argument("--export-vllm", metavar="DIR", help="also write DIR for vLLM to serve the chosen spec (as export-vllm; "
                   "server command in DIR/README.md); the search then tries only what vLLM serves: layer skip and the "
                   "draft model with static drafts and chain verification, prompt lookup (default --name: the "
                   "prompt file's name with -vllm)")
    p.add_argument("--name", help="study name: the same name resumes the search (default: the prompt file's name)")
    storage_arg(p, "Optuna storage URL (default sqlite:///studies/tune-<name>.db)")
    p.add_argument("--train-prompts", type=int, default=None,
                   help="train prompts each trial decodes (default 4, or all of a smaller file's train split)")
    p.add_argument("--test-prompts", type=int, default=None,
                   help="held-out prompts the finalists decode (default 4, or all of a smaller file's test split)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=2, help="held-out repeats (default 2)")
    p.add_argument("--finalists", type=int, default=3, help="configurations re-measured on held-out prompts (default 3)")
    p.add_argument("--profile", metavar="FILE",
                   help="latency profile JSON, possibly measured on another device (layersearch profile there, "
                        "--random-weights where the weights are not): trials decode here for their acceptance and are "
                        "scored by the speedup it predicts on its device")
    p.add_argument("--quiet", action="store_true", help="no per-trial progress")
    p.set_defaults(command="tune")


def run(args: Any) -> int:
    """Check everything, load the model(s), tune, print the held-out table, write spec and report
    (and with ``--export-vllm``, the chosen spec's vLLM folder)."""
    from layersearch.tune.report import held_out_table

    result = tune_from_args(args)
    print(held_out_table(result), flush=True)
    if args.export_vllm is not None:
        export_chosen(result, args.export_vllm, _say if not args.quiet else (lambda message: None))
    return 0


def export_chosen(result: Any, folder: str, say: Any) -> None:
    """Write the vLLM folder of the chosen spec and print what it holds; plain decoding (nothing
    beat it) needs no speculative config: said, nothing written."""
    from layersearch.integrations.vllm_export import export_vllm

    if result.selection.plain_chosen:
        print(f"plain decoding was chosen: vLLM serves the model without --speculative-config; {folder} not written",
              flush=True)
        return
    export = export_vllm(result.spec, folder, progress=say)
    print(export.describe(), flush=True)


def output_paths(args: Any) -> dict[str, str]:
    """The files tune writes besides ``--out``: the report (default ``--out`` with .md) and its picture."""
    from layersearch.tune.report import report_paths

    from layersearch.commands.study import default_storage_file
    from layersearch.commands.tune_options import study_name

    md, png = report_paths(args.out, args.report)
    paths = {"--report": md, "--report's picture": png}
    if args.storage is None:  # the study's own storage, from --name (or the prompt file's name)
        paths.update(default_storage_file(f"tune-{study_name(args)}"))
    return paths


def tune_from_args(args: Any) -> Any:
    """The tune run ``args`` describe, its spec and report written (shared with ``demo``):
    :func:`layersearch.commands.tune_options.tune_from_options` with the CLI's model loader."""
    from layersearch.commands.common import load
    from layersearch.commands.tune_options import tune_from_options

    return tune_from_options(args, lambda: load(args), _say)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
