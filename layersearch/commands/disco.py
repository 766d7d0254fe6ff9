"""``layersearch disco collect | train | bench``: DISCO's data, classifier and benchmark
(see :mod:`layersearch.disco`)."""

from __future__ import annotations

import json
import sys
from typing import Any

from layersearch.commands.args import model_args
from layersearch.runtime import MAX_DRAFT


def add_parser(sub, parser_class) -> None:
    """Register ``disco`` and its actions on the main CLI's subparsers."""
    p = sub.add_parser("disco", help="DISCO: a trained classifier decides when the draft stops")
    actions = p.add_subparsers(dest="action", required=True, parser_class=parser_class)
    collect = actions.add_parser("collect", help="teacher-forced feature / label rows of a domain's split")
    _common(collect, splits=True)
    collect.add_argument("--split", choices=["train", "validation", "test"], default="train")
    collect.add_argument("--prompts", type=int, default=8, help="prompts of the split (default 8)")
    collect.add_argument("--out", required=True, help="rows file (.npz)")
    train = actions.add_parser("train", help="train the classifier, tune tau / SL_max on validation, write the file")
    _common(train, splits=True)
    train.add_argument("--train-prompts", type=int, default=8)
    train.add_argument("--val-prompts", type=int, default=4)
    train.add_argument("--rows", help="training rows from `disco collect` (instead of collecting now)")
    train.add_argument("--out", required=True, help="classifier file (JSON)")
    train.add_argument("--json", action="store_true", help="print the validation figures as JSON")
    bench = actions.add_parser("bench", help="every draft-length rule on test prompts, per domain, with transfer")
    _common(bench, splits=False)
    bench.add_argument("--domains", default="code,math", help="comma-separated domains (default code,math)")
    bench.add_argument("--train-prompts", type=int, default=8)
    bench.add_argument("--val-prompts", type=int, default=4)
    bench.add_argument("--test-prompts", type=int, default=4)
    bench.add_argument("--repeats", type=int, default=1, help="interleaved runs per rule (median reported)")
    bench.add_argument("--out", default="disco_bench.json", help="JSON report (default disco_bench.json)")
    p.set_defaults(command="disco")


def _common(p, splits: bool) -> None:
    model_args(p, threads=1)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--mask", help="mask JSON file (the layer-skip draft)")
    which.add_argument("--skip-ratio", type=float, help="an evenly spread mask skipping this share (default 0.15)")
    if splits:
        p.add_argument("--domain", required=True)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--max-draft", type=int, default=MAX_DRAFT, help="largest draft length tried (static 1..N, SL_max <= N)")
    p.add_argument("--loss", choices=["ce", "tv"], default="ce", help="cross-entropy on match labels, or soft targets 1 - TV")
    p.add_argument("--seed", type=int, default=0, help="prompt selection seed")


def run(args: Any) -> int:
    """Check every option (:func:`layersearch.commands.disco_options.check_options`), then run the action."""
    from layersearch.commands.disco_options import check_options

    mask_file, rows = check_options(args)
    return {"collect": _collect, "train": _train, "bench": _bench}[args.action](args, mask_file, rows)


def _collect(args, mask_file, rows) -> int:
    from layersearch.disco import collect
    from layersearch.experiments.disco import prompt_tokens
    from layersearch.runtime.loop import eos_ids

    loaded, mask = _load(args, mask_file)
    prompts = prompt_tokens(loaded, args.domain, args.prompts, args.seed, args.split)
    result = collect(loaded.model, mask, prompts, args.max_new_tokens, _say, eos_ids(loaded.model))
    path = result.save(args.out)
    print(f"wrote {len(result)} rows ({result.label.mean():.2f} accepted) to {path}")
    return 0


def _train(args, mask_file, rows) -> int:
    from layersearch.experiments.disco import prompt_tokens, train_domain
    from layersearch.commands.disco_options import trained_text

    loaded, mask = _load(args, mask_file)
    train = [] if rows is not None else prompt_tokens(loaded, args.domain, args.train_prompts, args.seed, "train")
    val = prompt_tokens(loaded, args.domain, args.val_prompts, args.seed, "validation")
    trained = train_domain(
        loaded.model, loaded.info, mask, train, val, new_tokens=args.max_new_tokens, max_draft=args.max_draft,
        loss=args.loss, say=_say, domain=args.domain, train_rows=rows,
    )
    trained.file.save(args.out)
    print(json.dumps({"out": args.out, **trained.tuned.to_dict()}) if args.json else trained_text(trained, args.out))
    return 0


def _bench(args, mask_file, rows) -> int:
    from layersearch.experiments.disco import BenchSettings, bench_domains
    from layersearch.common.jsonfile import write_json_atomic

    loaded, mask = _load(args, mask_file)
    settings = BenchSettings(args.train_prompts, args.val_prompts, args.test_prompts, args.seed, args.max_new_tokens,
                             args.max_draft, args.loss, args.repeats)
    report = bench_domains(loaded, mask, [d for d in args.domains.split(",") if d], settings, _say,
                           lambda table: print(table, flush=True))
    print(f"wrote {write_json_atomic(args.out, {'argv': sys.argv[1:], **report})}")
    return 0


def _load(args, mask_file):
    """The model and the draft's mask (:func:`layersearch.experiments.disco.draft_mask`)."""
    from layersearch.commands.common import load
    from layersearch.experiments.disco import draft_mask

    loaded = load(args)
    return loaded, draft_mask(loaded, mask_file, args.mask, args.skip_ratio, args.max_new_tokens)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
