"""``layersearch generate``: self-speculative (or plain) generation for one or more prompts.

This module parses, turns the options into a :class:`~layersearch.decoder.spec.DecoderSpec`
(:func:`layersearch.commands.generate_options.spec_from_options`), hands it to
:func:`layersearch.decoder.build.build_decoder` and prints. ``--save-spec`` writes the spec of what it
ran; ``--spec`` runs one.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from layersearch.decoder.build import (build_decoder, encode_prompts, format_run, load_or_measure_profile,  # noqa: F401
                               read_spec_files)
from layersearch.commands.args import QUANT_CHOICES, draft_args, model_args, swift_args
from layersearch.commands.common import load, note_full_draft, positive_int, spec_inputs
from layersearch.commands.renamed import renamed_option
from layersearch.common.outputs import check_output
from layersearch.decoder.spec import DrafterSpec, registry_names
from layersearch.commands.generate_options import check_options_on_model, named_spec, spec_from_options


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``generate``: its arguments (drafter, mask source, lookahead and verifier options included)."""
    names = registry_names()
    p = sub.add_parser("generate", help="generate text with self-speculative decoding (or plain, with --baseline)")
    model_args(p, kernels=True)
    # One option for where the mask comes from (the spec's mask_source), not one option per source.
    p.add_argument("--mask", metavar="SOURCE",
                   help="where the draft's skip mask comes from: a mask file; uniform:R (an evenly spread mask skipping "
                   "the share R of sub-layers); knapsack (KnapSpec re-selects it while decoding, every --reselect-every "
                   "steps, from --profile); router:FILE (KNN-SSD: each prompt's mask by nearest neighbour, from "
                   "`layersearch knn build`); swift or swift:R (SWIFT optimizes it on the fly over the stream of "
                   "--prompts, skipping the share R, default 0.45). Default: the --steering or DISCO file's mask, "
                   "else uniform:0.25")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompts", help='JSONL file, one {"prompt": ...} or {"messages": [...]} per line (chat rows '
                     "through the model's chat template)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="default 64 (with --spec: the spec's)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0,
                   help="sample from the k most likely tokens (0 = every token, default; transformers' generate keeps 50)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--baseline", action="store_true", help="plain autoregressive decoding (transformers generate)")
    p.add_argument("--profile", help="latency profile JSON: adds the predicted speedup to the stats (and feeds --mask knapsack)")
    p.add_argument("--reselect-every", type=int, default=64, help="decoding steps between re-selections (--mask knapsack)")
    p.add_argument("--json", action="store_true", help="print one JSON object per prompt")
    draft_args(p)
    p.add_argument("--drafter", choices=names["drafter"], default=DrafterSpec.name,
                   help="where drafts come from: the masked model (or the --draft-model), n-gram lookup over prompt "
                   f"and output, or lookup first and the masked model otherwise (default {DrafterSpec.name})")
    p.add_argument("--verifier", choices=names["verifier"], default="chain",
                   help="verify the draft chain, or SWIFT's token tree of top-k candidates per position (greedy; "
                   "sampling verifies the chain) (default chain)")
    p.add_argument("--lookahead", default=None, metavar="{" + ",".join(names["lookahead"]) + ",disco:FILE}",
                   help="draft-length rule: static --max-draft, stop below --draft-threshold, Self-SD's adaptive "
                   "threshold, HF's heuristic schedule, roc (transformers' assisted default: the threshold learned "
                   "from an ROC curve of past drafts), or a DISCO classifier file (its mask unless --mask is given) "
                   "(default confidence)")
    swift_args(p)  # SWIFT on the fly (--mask swift)
    # SD²: steer the layer-skip drafter or an independent draft model with a trained steering file.
    p.add_argument("--steering", help="steering file from `layersearch steer train` (uses its mask, or its draft model)")
    p.add_argument("--draft-model", metavar="MODEL",
                   help="draft with an independent model sharing the tokenizer (embedded name, HF id or directory; "
                   "MODEL@int8: its weights in int8, as bench's items; default with a --steering file trained for one: "
                   "that file's)")
    p.add_argument("--draft-quant", choices=QUANT_CHOICES, default=None,
                   help="quantize the draft (output still lossless): the --draft-model's weights (int8 only: torch's dynamic "
                   "int8 Linears, CPU only), or without one the model itself: every sub-layer the mask keeps, and the LM head, "
                   "run in int8 (CPU: fbgemm; CUDA: weight-only) or int4 (weight-only, groups of 128; CUDA: tinygemm, bf16; "
                   "CPU: the GPU's bf16 rounding emulated) (--skip-ratio 0 or no mask: the whole model)")
    # The deployable artefact: what this run decodes with, as a file, and running one.
    p.add_argument("--save-spec", metavar="FILE", help="write the decoder spec of this run (model, drafter, mask, lookahead, "
                   "verifier, sampling) as JSON")
    p.add_argument("--spec", metavar="FILE", help="run the decoder of a spec file (from --save-spec); --prompt, --prompts, "
                   "--max-new-tokens, --json and --threads still apply")
    # FR-Spec: the draft's LM head scores only the N most frequent tokens.
    p.add_argument("--draft-vocab", type=int, default=0, metavar="N",
                   help="the draft (masked model or --draft-model) scores only the N most frequent tokens of the "
                   "tokenizer, counted once from the train prompts and cached; output stays lossless "
                   "(default 0: the full vocabulary)")
    # Old spellings (merged into --mask, --verifier and --lookahead): one error line naming the new one.
    renamed_option(p, "--skip-ratio", "--mask uniform:{value} (SWIFT's skip ratio: --mask swift:{value})", metavar="R")
    renamed_option(p, "--dynamic", "--mask {value}", metavar="KIND")
    renamed_option(p, "--router", "--mask router:{value}", metavar="FILE")
    renamed_option(p, "--on-the-fly", "--mask {value} (with a skip ratio: --mask {value}:R)", metavar="KIND")
    renamed_option(p, "--verification", "--verifier {value}", metavar="NAME")
    renamed_option(p, "--adaptive-threshold", "--lookahead adaptive")
    p.set_defaults(command="generate")


def run(args: Any) -> int:
    """Generate for ``--prompt`` / ``--prompts`` and print text plus statistics."""
    from layersearch.data.user import read_rows, render

    if args.max_new_tokens is not None:
        positive_int(args.max_new_tokens, "--max-new-tokens")
    rows = None if args.prompt is not None else read_rows(args.prompts, distinct=False)  # every command's reader
    spec = spec_from_options(args, _option_defaults())  # every check that needs no model
    if args.compile is not None:  # a run option: it overrides a --spec file's setting
        spec = replace(spec, compile=args.compile)
    if args.save_spec:
        check_output(args.save_spec, "--save-spec")
    files = read_spec_files(spec)  # a bad DISCO or router file fails before the (slower) model load
    model = spec.model
    with named_spec(args.spec):  # what a spec file names (its model, its files) fails naming that file
        loaded = load(SimpleNamespace(model=model.ref.ref, device=model.device, dtype=model.dtype, threads=args.threads))
    max_new = spec.max_new_tokens if args.max_new_tokens is None else args.max_new_tokens
    length = "--max-new-tokens" if args.max_new_tokens is not None or not args.spec else f"{args.spec}'s max_new_tokens"
    # every prompt checked before any output (and under the option's name)
    where = (lambda i: "the prompt") if args.prompt is not None else (lambda i: f"{args.prompts}: prompt {i + 1}")
    prompts = [args.prompt] if rows is None else [render(row, loaded.tokenizer, args.prompts) for row in rows]
    encoded = encode_prompts(loaded, prompts, max_new, where, length)
    check_options_on_model(args, loaded)  # as --draft-vocab, before the spec's drafter.vocab
    with named_spec(args.spec):
        decoder = build_decoder(loaded, spec, files, kernels=args.kernels)
    for twins in decoder.twins:
        print(twins.describe(), file=sys.stderr)
    if decoder.spec.mask_source.kind == "mask":
        note_full_draft(args.spec or args.mask or "the plan", decoder.spec.mask_source.mask, decoder.spec.drafter.quant)
    for index, ids in enumerate(encoded):
        result = decoder.run(ids, max_new)
        text, stats = loaded.tokenizer.decode(result.token_ids, skip_special_tokens=True), decoder.run_stats(result)
        record = {"index": index, "token_ids": list(result.token_ids), "text": text, "stats": stats}
        print(json.dumps(record) if args.json else format_run(index, text, stats), flush=True)
    if args.save_spec:
        decoder.spec.save(args.save_spec)
    return 0


def _option_defaults() -> dict[str, Any]:
    """Every generate option's default (what ``--spec`` checks the options against)."""
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(), argparse.ArgumentParser)
    return vars(parser.parse_args(["generate", "--prompt", "-"]))


def input_paths(args: Any) -> list[tuple[str, str]]:
    """The files a ``--spec`` file names (its profile, mask file...): inputs no output may replace."""
    return spec_inputs(args.spec, "--spec")
