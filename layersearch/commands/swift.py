"""``layersearch swift stream``: on-the-fly SWIFT against a fixed mask and plain decoding over a
stream of held-out prompts that switches domain every ``--per-domain`` inputs (SWIFT Fig. 7),
plus the chain/tree ablation table; see :mod:`layersearch.experiments.swift`. SWIFT on the fly in generation is ``generate --mask swift``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from layersearch.commands.args import draft_args, model_args, swift_args

DEFAULT_DOMAINS = "translation,math,code"


DEFAULT_PLOT = "plots/swift_stream.png"  # ours: its missing plots/ folder is made (a --plot folder must exist)

def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Register ``swift`` and its action ``stream`` on the main CLI's subparsers."""
    p = sub.add_parser("swift", help="SWIFT: masks optimised on the fly, during generation")
    actions = p.add_subparsers(dest="action", required=True, parser_class=parser_class)
    stream_args(actions.add_parser("stream", help="SWIFT on the fly vs a fixed mask vs plain over a domain-switching stream"))
    p.set_defaults(command="swift")


def stream_args(p: Any) -> None:
    """The options of ``swift stream``."""
    model_args(p, threads=1)
    p.add_argument("--domains", default=DEFAULT_DOMAINS, help=f"domains in stream order (default {DEFAULT_DOMAINS})")
    p.add_argument("--per-domain", type=int, default=3, help="inputs per domain before the switch (default 3)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens per input (default 64)")
    p.add_argument("--skip-ratio", type=float, default=None, help="SWIFT's r for both masks (default 0.45)")
    p.add_argument("--methods", default="plain,fixed,swift,fixed-tree,swift-tree",
                   help="plain, fixed, swift, fixed-tree, swift-tree (default all; plain always runs)")
    p.add_argument("--search-trials", type=int, default=30, help="candidates of the fixed mask's search on the first domain (default 30)")
    p.add_argument("--search-prompts", type=int, default=2, help="train prompts of the first domain it searches on (default 2)")
    p.add_argument("--seed", type=int, default=0, help="prompt choice and optimizer seed (default 0)")
    p.add_argument("--out", default="swift_stream.json", help="JSON report (default swift_stream.json)")
    p.add_argument("--plot", default=DEFAULT_PLOT, help="PNG of speedup and matchness over the stream")
    draft_args(p)
    swift_args(p)


def run(args: Any) -> int:
    """Dispatch on the action."""
    return {"stream": stream}[args.action](args)


def stream(args: Any) -> int:
    """Build the stream, search the fixed mask, decode the stream with every method, report
    (:func:`layersearch.experiments.swift.stream_experiment`)."""
    from layersearch.commands.common import load
    from layersearch.commands.args import swift_config
    from layersearch.common.outputs import check_output
    from layersearch.experiments.swift import StreamJob, stream_experiment

    job = StreamJob(args.domains, args.methods, args.per_domain, args.max_new_tokens, args.search_prompts,
                    args.search_trials, args.seed, args.max_draft, args.draft_threshold)
    job.check()
    config = swift_config(args)
    out = check_output(args.out, "--out", suffixes=(".json",))
    plot = check_output(args.plot, "--plot", suffixes=(".png",), default=args.plot == DEFAULT_PLOT)
    settings = {k: v for k, v in vars(args).items() if k not in ("func", "action") and _jsonable(v)}
    report = stream_experiment(job, config, lambda: load(args), out, plot, settings, _log)
    print(_table(report.summary()))
    print(f"wrote {args.out} and {args.plot}")
    return 0


def _table(rows: list[dict[str, Any]]) -> str:
    from layersearch.study.text import format_table

    return format_table(rows, ["method", "M", "alpha", "tokens_per_second", "speedup", "optimization_seconds"])


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except TypeError:
        return False
    return True


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
