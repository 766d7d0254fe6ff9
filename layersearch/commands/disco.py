"""``layersearch disco collect | train | bench``: DISCO's data, classifier and benchmark
(see :mod:`layersearch.disco`)."""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

from layersearch.errors import LayersearchError


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
    p.add_argument("--model", default="smollm2-135m", help="embedded name, HF id or local directory")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None)
    p.add_argument("--threads", type=int, default=1, help="CPU threads for torch (default 1)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--mask", help="mask JSON file (the layer-skip draft)")
    which.add_argument("--skip-ratio", type=float, help="an evenly spread mask skipping this share (default 0.15)")
    if splits:
        p.add_argument("--domain", required=True)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--max-draft", type=int, default=8, help="largest draft length tried (static 1..N, SL_max <= N)")
    p.add_argument("--loss", choices=["ce", "tv"], default="ce", help="cross-entropy on match labels, or soft targets 1 - TV")
    p.add_argument("--seed", type=int, default=0, help="prompt selection seed")


def run(args: Any) -> int:
    """Dispatch on the action."""
    from layersearch.commands.common import positive_int

    for name in ("max_new_tokens", "max_draft", "prompts", "train_prompts", "val_prompts", "test_prompts", "repeats"):
        if getattr(args, name, None) is not None:
            positive_int(getattr(args, name), "--" + name.replace("_", "-"))
    if args.max_new_tokens < 2:
        raise LayersearchError("--max-new-tokens must be >= 2 (rows start at the second token)")
    if args.skip_ratio is not None and not 0 < args.skip_ratio < 1:
        raise LayersearchError(f"--skip-ratio must be between 0 and 1 (exclusive), got {args.skip_ratio}")
    from layersearch.outputs import check_output

    check_output(args.out)  # before any work: a directory or a missing folder is refused now, not after training
    mask_file = _mask_file(args)
    if args.action == "bench":
        domains = [d for d in args.domains.split(",") if d]
        if not domains:
            raise LayersearchError("--domains is empty")
        _check_domains(domains)
    else:
        _check_domains([args.domain])
    rows = None
    if getattr(args, "rows", None):
        from layersearch.disco import Rows

        rows = Rows.load(args.rows)
    return {"collect": _collect, "train": _train, "bench": _bench}[args.action](args, mask_file, rows)


def _collect(args, mask_file, rows) -> int:
    from layersearch.disco import collect
    from layersearch.runtime.decoder import eos_ids

    loaded, mask = _load(args, mask_file)
    prompts = _prompts(loaded, args.domain, args.prompts, args.seed, args.split)
    result = collect(loaded.model, mask, prompts, args.max_new_tokens, _say, eos_ids(loaded.model))
    path = result.save(args.out)
    print(f"wrote {len(result)} rows ({result.label.mean():.2f} accepted) to {path}")
    return 0


def _train(args, mask_file, rows) -> int:
    from layersearch.disco.bench import train_domain

    loaded, mask = _load(args, mask_file)
    train = [] if rows is not None else _prompts(loaded, args.domain, args.train_prompts, args.seed, "train")
    val = _prompts(loaded, args.domain, args.val_prompts, args.seed, "validation")
    trained = train_domain(
        loaded.model, loaded.info, mask, train, val, new_tokens=args.max_new_tokens, max_draft=args.max_draft,
        loss=args.loss, say=_say, domain=args.domain, train_rows=rows,
    )
    trained.file.save(args.out)
    summary = trained.tuned.to_dict()
    if args.json:
        print(json.dumps({"out": args.out, **summary}))
    else:
        f1 = summary["f1"]
        print(f"validation F1: classifier {f1['classifier']:.3f}, best static length {trained.tuned.static_length}: "
              f"{f1['best_static']:.3f}; tau {trained.file.tau:g}, SL_max {trained.file.sl_max}; wrote {args.out}")
    return 0


def _bench(args, mask_file, rows) -> int:
    from layersearch.bench import PLAIN, run_domain
    from layersearch.disco import collect
    from layersearch.disco.bench import format_table, oracle_row, record_costs, rule_configs, table_rows, train_domain
    from layersearch.jsonfile import write_json_atomic
    from layersearch.runtime.decoder import eos_ids
    import torch

    loaded, mask = _load(args, mask_file)
    domains = [d for d in args.domains.split(",") if d]
    trained = {}
    for domain in domains:
        train = _prompts(loaded, domain, args.train_prompts, args.seed, "train")
        val = _prompts(loaded, domain, args.val_prompts, args.seed, "validation")
        trained[domain] = train_domain(loaded.model, loaded.info, mask, train, val, new_tokens=args.max_new_tokens,
                                       max_draft=args.max_draft, loss=args.loss, say=_say, domain=domain)
    report: dict[str, Any] = {"argv": sys.argv[1:], "model": loaded.info.to_dict(), "mask": mask.to_dict(), "domains": {}}
    for domain in domains:
        prompts = _prompts(loaded, domain, args.test_prompts, args.seed, "test")
        ids = [torch.tensor([p]) for p in prompts]
        steps: dict[str, list] = {}
        configs = rule_configs(loaded.model, mask, args.max_draft, trained, domain, steps)
        _say(f"{domain}: {len(ids)} test prompts x {len(configs)} rules x {args.repeats} repeats")
        measured = run_domain(configs, ids, args.max_new_tokens, args.repeats, _say, device=loaded.model.device)
        statics = [c.name for c in configs if c.name.startswith("static ") and not measured[c.name].error]
        best = min(statics, key=lambda n: statistics.median(measured[n].totals))
        costs = record_costs(steps, args.max_draft)
        rows_ = table_rows(configs, measured, best, steps, costs)
        test_rows = collect(loaded.model, mask, prompts, args.max_new_tokens, None, eos_ids(loaded.model))
        plain_ms = next(r["ms_per_token"] for r in rows_ if r["config"] == PLAIN)
        rows_.append(oracle_row(test_rows, costs, measured, plain_ms))
        tuned = trained[domain].tuned
        report["domains"][domain] = {"rows": rows_, "validation": dict(trained[domain].file.training), "costs": costs.to_dict(),
                                     "test_acceptance": float(test_rows.label.mean())}
        print(format_table(domain, rows_, tuned), flush=True)
    path = write_json_atomic(args.out, report)
    print(f"wrote {path}")
    return 0


def _mask_file(args):
    from layersearch.mask import SkipMask

    return SkipMask.load(args.mask) if args.mask else None  # a bad mask fails before the model loads


def _load(args, mask_file):
    from layersearch.commands.common import check_context, load
    from layersearch.mask import SkipMask

    loaded = load(args)
    check_context(loaded, args.max_new_tokens + 1, f"--max-new-tokens {args.max_new_tokens}")  # prompts come on top
    if mask_file is not None:
        try:
            mask_file.check_model(loaded.info)
        except LayersearchError as exc:
            raise LayersearchError(f"{args.mask}: {exc}") from None
        mask = mask_file
    else:
        mask = SkipMask.uniform(loaded.info.num_layers, 0.15 if args.skip_ratio is None else args.skip_ratio, loaded.info)
    if mask.is_empty:
        raise LayersearchError("the mask skips nothing: the draft would be the target")
    return loaded, mask


def _check_domains(domains) -> None:
    from layersearch.data import DOMAINS, user

    unknown = [d for d in domains if d not in DOMAINS and not user.is_user_domain(d)]
    if unknown:
        raise LayersearchError(f"unknown domain {unknown[0]!r}: choose one of {', '.join(DOMAINS)} (or file:PROMPTS.jsonl)")
    for domain in domains:
        if user.is_user_domain(domain):
            user.read_rows(domain[len(user.PREFIX):])  # a bad prompt file fails before the model loads


def _prompts(loaded, domain: str, n: int, seed: int, split: str) -> list[list[int]]:
    from layersearch.data import load_prompts

    texts = [p.text for p in load_prompts(domain, n, seed=seed, split=split, tokenizer=loaded.tokenizer)]
    return [loaded.tokenizer(t, return_tensors="pt").input_ids[0].tolist() for t in texts]


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
