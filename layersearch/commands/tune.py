"""``layersearch tune``: the fastest lossless configuration for your prompts, written as a spec.

This module parses and prints; the work is :mod:`layersearch.tune`.
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from pathlib import Path
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
    p.add_argument("--name", help="study name: the same name resumes the search (default: the prompt file's name)")
    storage_arg(p, "Optuna storage URL (default sqlite:///studies/tune-<name>.db)")
    p.add_argument("--train-prompts", type=int, default=None,
                   help="train prompts each trial decodes (default 4, or all of a smaller file's train split)")
    p.add_argument("--test-prompts", type=int, default=None,
                   help="held-out prompts the finalists decode (default 4, or all of a smaller file's test split)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=2, help="held-out repeats (default 2)")
    p.add_argument("--finalists", type=int, default=3, help="configurations re-measured on held-out prompts (default 3)")
    p.add_argument("--quiet", action="store_true", help="no per-trial progress")
    p.set_defaults(command="tune")


def run(args: Any) -> int:
    """Check everything, load the model(s), tune, print the held-out table, write spec and report."""
    from layersearch.tune.report import held_out_table

    result = tune_from_args(args)
    print(held_out_table(result), flush=True)
    return 0


def output_paths(args: Any) -> dict[str, str]:
    """The files tune writes besides ``--out``: the report (default ``--out`` with .md) and its picture."""
    from layersearch.tune.report import report_paths

    md, png = report_paths(args.out, args.report)
    return {"--report": md, "--report's picture": png}


def tune_from_args(args: Any) -> Any:
    """The tune run ``args`` describe, its spec and report written (shared with ``demo``)."""
    from layersearch.common.checks import check_int
    from layersearch.commands.common import load
    from layersearch.common.errors import LayersearchError
    from layersearch.common.outputs import announce, check_output, write_outputs
    from layersearch.evaluation.plots import check_png_output
    from layersearch.decoder.spec import ModelRef, ModelSpec
    from layersearch.tune import TuneSettings
    from layersearch.tune.report import curve_png, markdown, report_paths
    from layersearch.tune.run import TrialLines, load_drafts, prepare, prompt_counts, tune

    for given, option in ((args.train_prompts, "--train-prompts"), (args.test_prompts, "--test-prompts")):
        if given is not None:
            check_int(given, option)
    if args.name is not None and not args.name.strip():
        raise LayersearchError("--name is empty: give a study name (or leave it out: the prompt file's name)")
    train, test, note = prompt_counts(args.prompts, args.train_prompts, args.test_prompts)
    settings = TuneSettings(args.prompts, args.budget, args.name or default_name(args.prompts), args.storage,
                            train, test, args.max_new_tokens, args.repeats, args.finalists)
    out = check_output(args.out)
    md_path, png_path = report_paths(args.out, args.report)
    md, png = check_output(md_path, "--report"), check_png_output(png_path)
    if args.draft_model is not None and not args.draft_model.strip():
        raise LayersearchError("--draft-model is empty: name a model")
    draft_ref = _draft_ref(args.draft_model) if args.draft_model else None
    prepared = prepare(settings, draft_ref)
    if note is not None and not args.quiet:
        _say(note)
    loaded = load(args)
    drafts = load_drafts(loaded, draft_ref, args.device, args.dtype, _say)
    model = ModelSpec(ModelRef.given(args.model), loaded.info, args.device, args.dtype)
    with TrialLines(args.quiet, _say) as progress, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # transformers' deprecation notes are not the user's concern
        result = tune(loaded, prepared, model, drafts=drafts, kernels=getattr(args, "kernels", "auto"),
                      say=_say if not args.quiet else (lambda m: None), on_trial=progress.update)
    write_outputs([(md, markdown(result, Path(png_path).name)), (png, curve_png(result.records, f"tune: {settings.name}"))], "--report")
    result.spec.save(args.out)
    announce(out, f"wrote {out.given} ({'plain decoding' if result.selection.plain_chosen else result.selection.winner}), "
                  f"{md_path} and {png_path}")
    return result


def _draft_ref(text: str) -> Any:
    """``--draft-model MODEL``: the study searches the model's own and its int8 weights itself."""
    from layersearch.common.errors import LayersearchError
    from layersearch.decoder.fragments import draft_model_item

    ref, quant = draft_model_item(text)
    if quant is not None:
        raise LayersearchError(f"--draft-model {text}: tune searches the draft model's own and {quant} weights itself; "
                               f"give {ref.ref}")
    return ref


def default_name(prompts: str) -> str:
    """A study name from the prompt file's name (letters, digits and ._+- kept)."""
    stem = re.sub(r"[^A-Za-z0-9._+-]", "-", Path(prompts).stem).lstrip("._+-")[:100]
    return stem or "prompts"


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
