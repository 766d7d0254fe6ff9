"""``layersearch transfer``: each domain's mask on every domain's test prompts (speedup, M).

The parser is defined here (no torch at import, so ``--help`` stays fast); the work is in
:mod:`layersearch.transfer`. Prints two matrices and writes ``PREFIX.json`` and a heatmap
``PREFIX.png``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from layersearch.errors import LayersearchError


def output_paths(args: Any) -> dict[str, str]:
    """The files ``--out-prefix`` names: PREFIX.json and PREFIX.png."""
    prefix = Path(args.out_prefix)
    return {"--out-prefix's report": str(prefix.with_name(prefix.name + ".json")),
            "--out-prefix's picture": str(prefix.with_name(prefix.name + ".png"))}


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Add ``transfer`` to the CLI's sub-parsers."""
    from layersearch.commands.args import draft_args, model_args

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
    p.set_defaults(command="transfer")


def run(args: Any) -> int:
    """Measure the matrix, print it, write the JSON and the heatmap."""
    from layersearch.commands.common import domain_options, load, positive_int
    from layersearch.jsonfile import write_json_atomic
    from layersearch.mask import SkipMask
    from layersearch.plots import plot_transfer
    from layersearch.transfer import format_matrix, transfer_matrix

    for value, name in ((args.samples, "--samples"), (args.max_new_tokens, "--max-new-tokens"), (args.repeats, "--repeats")):
        positive_int(value, name)
    named = domain_options(args.mask, "--mask", "DOMAIN=FILE")
    domains = [d for d in (args.domains or ",".join(named)).split(",") if d]
    if args.prompts:
        from layersearch.data.user import choose_rows, domain_for

        choose_rows(args.prompts, args.samples, args.prompt_seed, args.split)  # a bad file fails before the model loads
        domains.append(domain_for(args.prompts))
    loaded = load(args)
    masks = {domain: SkipMask.load(path, model=loaded.info) for domain, path in named.items()}
    result = transfer_matrix(
        loaded, masks, domains, samples=args.samples, prompt_seed=args.prompt_seed, split=args.split,
        max_new_tokens=args.max_new_tokens, max_draft=args.max_draft, draft_threshold=args.draft_threshold,
        repeats=args.repeats, spec_bench=args.spec_bench, progress=lambda m: print(m, file=sys.stderr, flush=True),
    )
    print(format_matrix(result))
    prefix = Path(args.out_prefix)
    report = {"model": loaded.info.to_dict(), "split": args.split, "samples": args.samples,
              "max_new_tokens": args.max_new_tokens, "masks": dict(named), **result.to_dict()}
    json_path = write_json_atomic(prefix.with_name(prefix.name + ".json"), report)
    png = plot_transfer(result.grid("speedup"), result.grid("M"), result.mask_domains, result.eval_domains,
                        prefix.with_name(prefix.name + ".png"))
    print(f"wrote {json_path} and {png}")
    return 0


