"""``layersearch bench``: side-by-side speed of plain and speculative decoding, or (``--spec-bench``)
Spec-Bench's answer files and per-group table (:func:`layersearch.evaluation.specbench.run_specbench`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from layersearch.commands.args import draft_args, model_args
from layersearch.commands.common import load
from layersearch.commands.renamed import renamed_option
from layersearch.common.errors import LayersearchError


class _Default(str):
    """A default option value that can be told from the same text given on the command line."""


DEFAULT_DOMAINS = _Default("summarization,math,code")


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``bench``: its arguments (the configurations it runs: ratios, masks, peers, drafters)."""
    from layersearch.decoder.fragments import drafter_kinds
    from layersearch.decoder.spec import registry_names

    names = registry_names()
    own = ",".join(drafter_kinds()[0])  # the default drafter drafts with the masks
    p = sub.add_parser("bench", help="plain generate vs HF peers vs our loop, per domain")
    model_args(p, kernels=True)
    p.add_argument("--domains", default=DEFAULT_DOMAINS, help="comma-separated domains (default summarization,math,code; "
                                                             "with --prompts only the file unless --domains is given)")
    p.add_argument("--prompts", metavar="FILE", help="your own prompts (JSONL: {\"prompt\": ...} or {\"messages\": [...]} "
                                                     "per line); their test split is measured, like a domain's")
    p.add_argument("--prompts-per-domain", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--skip-ratios", default="0.1,0.2,0.3,0.45", help="uniform mask ratios to run")
    p.add_argument("--masks", default="", help="comma-separated mask files to run as well")
    p.add_argument("--repeats", type=int, default=None,
                   help="interleaved runs per configuration (median reported, min and max in the report; default 5 on "
                        "CUDA, 3 on CPU)")
    p.add_argument("--profile", help="latency profile JSON (measured if absent)")
    p.add_argument("--out", default="bench.json")
    p.add_argument("--peers", default="prompt-lookup,early-exit",
                   help="transformers' peers to run: prompt-lookup, early-exit, assisted:MODEL (assisted generation "
                        "with that draft model; MODEL@int8: its weights in int8; default prompt-lookup,early-exit; "
                        "'' for none)")
    p.add_argument("--drafters", default=own,
                   help=f"our other drafters to run beside the layer-skip masks: {own.replace(',', ', ')}, "
                        f"{', '.join(f'{kind}:MODEL' for kind in drafter_kinds()[1])} (model: an independent draft "
                        "model; hybrid:MODEL: lookup, else that draft model); MODEL@int8 "
                        "drafts with that model's weights in int8 (CPU) "
                        f"(default {own}; '' for none)")
    p.add_argument("--lookaheads", default="",
                   help=f"comma-separated lookahead rules ({', '.join(names['lookahead'])}): one row per rule for "
                        "each mask that skips something and each draft model; with --spec-bench one method per mask "
                        "and rule (default: the confidence rule)")
    p.add_argument("--specs", default="", metavar="FILES",
                   help="comma-separated decoder spec files (from generate --save-spec or tune): one row each, "
                        "decoding greedily with the bench's kernels (any drafter, mask, steering, lookahead or DISCO "
                        "file a spec names)")
    p.add_argument("--draft-vocab", type=int, default=0, metavar="N",
                   help="also run each draft-model row and each mask that skips something with a draft head that "
                        "scores only the tokenizer's N most frequent tokens (FR-Spec; default 0: no such rows)")
    p.add_argument("--split", choices=("train", "validation", "test"),
                   help="prompt split (default test; with --spec-bench: every question)")
    sb = p.add_argument_group("Spec-Bench mode (vanilla and ours on Spec-Bench's questions)")
    sb.add_argument("--spec-bench", metavar="FILE", help="Spec-Bench's question.jsonl: run in Spec-Bench mode")
    sb.add_argument("--categories", help="comma-separated categories or groups (mt_bench, translation, ...; default all)")
    sb.add_argument("--limit", type=int, help="at most N questions per category")
    sb.add_argument("--answers", metavar="DIR", help="folder for the answer files, one per method")
    draft_args(p)
    renamed_option(p, "--no-peers", '--peers ""')
    renamed_option(p, "--adaptive-threshold", "--lookaheads adaptive")
    p.set_defaults(command="bench")


def _repeats(args: Any) -> int:
    """``--repeats``, else 5 on CUDA (min / median / max of interleaved repeats), 3 on CPU."""
    from layersearch.evaluation.bench import GPU_REPEATS

    if args.repeats is not None:
        return args.repeats
    return GPU_REPEATS if str(args.device).strip().lower().startswith("cuda") else 3


def run(args: Any) -> int:
    """Run the benchmark (:func:`layersearch.evaluation.bench.run_bench`): one table per domain, the JSON report."""
    from layersearch.evaluation.bench import BenchSettings, prepare_bench, run_bench
    from layersearch.common.outputs import announce, check_output

    if not getattr(args, "spec_bench", None):  # Spec-Bench mode's options would be ignored without a word
        given_sb = [option for option, value in (("--answers", args.answers), ("--categories", args.categories),
                                                 ("--limit", args.limit)) if value is not None]
        if given_sb:
            one = len(given_sb) == 1
            raise LayersearchError(f"{', '.join(given_sb)} belong{'s' if one else ''} to Spec-Bench mode: "
                                   f"give --spec-bench FILE too, or leave {'it' if one else 'them'} out")
    out = check_output(args.out, "--out")
    given = "" if args.prompts and isinstance(args.domains, _Default) else args.domains
    settings = BenchSettings(
        args.model, out, tuple(d for d in given.split(",") if d), args.prompts, args.prompts_per_domain,
        args.max_new_tokens, _repeats(args), args.skip_ratios, args.masks, args.profile,
        _items(args.peers), _items(args.drafters), _items(args.lookaheads), args.specs,
        args.draft_vocab, args.split, args.device, args.dtype, args.kernels, args.max_draft, args.draft_threshold,
        False,  # Self-SD's adaptive rule is --lookaheads adaptive
        compile=args.compile,
    )
    if getattr(args, "spec_bench", None):  # its --answers folder, like every output, before the model loads
        from layersearch.evaluation.specbench import answers_folder

        if not args.answers:
            raise LayersearchError("--spec-bench needs --answers DIR (where the answer files go)")
        answers_folder(args.answers)
    prepared = prepare_bench(settings, lambda: load(args), _say)
    _note_full_drafts(args)
    show = lambda text: print(text, flush=True)  # noqa: E731
    if getattr(args, "spec_bench", None):  # Spec-Bench mode: its answer files and per-group table
        from layersearch.evaluation.specbench import SpecBenchRun, run_specbench

        run_ = SpecBenchRun(args.spec_bench, args.answers, args.out, args.categories, args.limit, args.split, args.skip_ratios,
                            args.masks, args.max_new_tokens, args.max_draft, args.draft_threshold, False,
                            settings.lookaheads)
        paths = run_specbench(run_, prepared.loaded, _say, show)
        print(f"wrote {', '.join(str(p) for p in paths[:-1])} and {paths[-1]}")
        return 0
    run_bench(prepared, _say, show)
    announce(out, f"wrote {out}")
    return 0


def _note_full_drafts(args: Any) -> None:
    """A notice for each ``--masks`` file and ``--specs`` spec whose plan changes nothing."""
    from layersearch.commands.common import note_full_draft
    from layersearch.decoder.spec import DecoderSpec
    from layersearch.masks.mask import SkipMask

    for path in _items(args.masks):
        note_full_draft(path, SkipMask.load(path))
    for path in _items(args.specs):
        spec = DecoderSpec.load(path)
        note_full_draft(path, spec.mask_source.mask, spec.drafter.quant)


def _items(text: str) -> tuple[str, ...]:
    """The comma-separated items of an option (checked by :class:`~layersearch.evaluation.bench.BenchSettings`)."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def input_paths(args: Any) -> list[tuple[str, str]]:
    """The files the ``--specs`` files name (profiles, mask files...): inputs no output may replace."""
    from layersearch.commands.common import spec_inputs

    return spec_inputs(args.specs, "--specs")
