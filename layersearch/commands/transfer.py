"""``layersearch transfer``: each domain's mask on every domain's test prompts (speedup, M).

The work is :func:`layersearch.evaluation.transfer.run_transfer`'s. Prints two matrices and writes
``PREFIX.json`` and a heatmap ``PREFIX.png``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def output_paths(args: Any) -> dict[str, str]:
    """The files ``--out-prefix`` names: PREFIX.json and PREFIX.png."""
    prefix = Path(args.out_prefix)
    return {"--out-prefix's report": str(prefix.with_name(prefix.name + ".json")),
            "--out-prefix's picture": str(prefix.with_name(prefix.name + ".png"))}


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Add ``transfer`` to the CLI's sub-parsers."""
    from layersearch.commands.args import draft_args, model_args
    from layersearch.commands.renamed import removed_option

    p = sub.add_parser("transfer", help="each domain's mask on every domain's test prompts: speedup and M, heatmap")
    model_args(p)
    p.add_argument("--mask", action="append", required=True, metavar="DOMAIN=FILE",
                   help="a mask file and the domain it was searched on (repeat the option)")
    p.add_argument("--domains", help="comma-separated domains to evaluate on (default: the masks' domains)")
    p.add_argument("--prompts", metavar="FILE", help="your own prompts (JSONL: {\"prompt\": ...} or {\"messages\": [...]} per "
                   "line) as one more domain to evaluate on (the same as file:FILE in --domains)")
    p.add_argument("--samples", type=int, default=4, help="prompts per domain (default 4)")
    p.add_argument("--prompt-seed", type=int, default=0, help="which prompts of the split (default 0)")
    p.add_argument("--split", default="test", choices=("train", "validation", "test"), help="prompt split (default test)")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=1, help="measurement rounds (default 1)")
    p.add_argument("--spec-bench", metavar="FILE", help="Spec-Bench's question.jsonl, for spec-bench:<group> domains")
    p.add_argument("--out-prefix", default="transfer", help="writes PREFIX.json and PREFIX.png (default transfer)")
    draft_args(p)
    removed_option(p, "--adaptive-threshold", "transfer measures each mask with the confidence rule "
                   "(--max-draft, --draft-threshold); it never read this flag")
    p.set_defaults(command="transfer")


def run(args: Any) -> int:
    """Measure the matrix (:func:`layersearch.evaluation.transfer.run_transfer`), print it, write the JSON and the heatmap."""
    from layersearch.commands.common import load
    from layersearch.common.inputs import domain_options
    from layersearch.evaluation.transfer import TransferJob, format_matrix, run_transfer

    job = TransferJob(domain_options(args.mask, "--mask", "DOMAIN=FILE"), args.domains, args.prompts, args.samples,
                      args.prompt_seed, args.split, args.max_new_tokens, args.repeats, args.spec_bench, args.max_draft,
                      args.draft_threshold, args.out_prefix)
    result, json_path, png = run_transfer(job, lambda: load(args), lambda m: print(m, file=sys.stderr, flush=True))
    print(format_matrix(result))
    print(f"wrote {json_path} and {png}")
    return 0
