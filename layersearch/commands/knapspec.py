"""``layersearch knapspec bench``: KnapSpec's long-context experiment (see :mod:`layersearch.experiments.knapspec`):
parse, check, load, run, print."""

from __future__ import annotations

import sys
from typing import Any


def add_parser(sub: Any, parser_class: Any) -> None:
    """Register ``knapspec`` and its action ``bench`` on the main CLI's subparsers."""
    p = sub.add_parser("knapspec", help="KnapSpec: context-aware masks chosen by a knapsack over sub-layers")
    actions = p.add_subparsers(dest="action", required=True, parser_class=parser_class)
    bench_args(actions.add_parser("bench", help="long-context experiment: context-aware vs fixed masks"))
    p.set_defaults(command="knapspec")


def bench_args(p: Any) -> None:
    """The options of ``knapspec bench``."""
    from layersearch.commands.args import model_args

    model_args(p, threads=1)
    p.add_argument("--contexts", default="256,1024,2048,4096", help="prompt lengths in tokens (default 256,1024,2048,4096)")
    p.add_argument("--max-new-tokens", type=int, default=32, help="tokens generated per run (default 32)")
    p.add_argument("--out", default="knapspec_bench.json", help="JSON report (default knapspec_bench.json)")
    p.add_argument("--profile", help="latency profile JSON; measured (at the --contexts) and saved there if missing")
    p.add_argument("--interval", type=int, default=64, help="decoding steps between re-selections (default 64)")
    p.add_argument("--window", type=int, default=5, help="reference tokens for the DP (default 5)")
    p.add_argument("--alpha-window", type=int, default=32, help="reference tokens for alpha (default 32; 0: the DP's own)")
    p.add_argument("--alpha-candidates", type=int, default=8, help="candidates whose alpha is measured (default 8)")
    p.add_argument("--max-draft", type=int, default=10, help="largest gamma of the TPT grid (default 10, KnapSpec's D)")
    p.add_argument("--draft-threshold", type=float, default=0.7, help="early stop of drafting (default 0.7, KnapSpec's)")
    p.add_argument("--method", choices=["hidden", "items"], default="hidden",
                   help="skip masks' candidate sets (default hidden: KnapSpec's DP; plans use the multiple-choice knapsack)")
    p.add_argument("--space", choices=["skips", "plans"], default="skips",
                   help="select skip masks (default, KnapSpec's) or draft plans: each sub-layer full, int8 or skipped "
                        "by a multiple-choice knapsack, the LM head full or int8 (needs a profile with int8 timings)")
    p.add_argument("--seed", type=int, default=0, help="which news articles make the prompt (default 0)")
    p.add_argument("--check-candidates", type=int, default=0, metavar="N",
                   help="also run the N contenders of largest predicted TPT at the first selection as fixed masks "
                        "and report whether the predicted best measures fastest (default 0: off)")


def run(args: Any) -> int:
    """Dispatch on the action."""
    return {"bench": bench}[args.action](args)


def bench(args: Any) -> int:
    """Run the experiment (:func:`layersearch.experiments.knapspec.run_experiment`), print the table, write the JSON report."""
    from layersearch.commands.common import load
    from layersearch.experiments.knapspec import BenchSettings, format_table, run_experiment
    from layersearch.common.outputs import announce, check_output

    out = check_output(args.out, "--out")
    settings = BenchSettings(**{k: getattr(args, k) for k in BenchSettings.__dataclass_fields__})
    report = run_experiment(settings, args.contexts, args.profile, out, lambda: load(args),
                            say=lambda message: print(message, file=sys.stderr, flush=True), argv=sys.argv[1:])
    print(format_table(report))
    announce(out, f"wrote {out}")
    return 0
