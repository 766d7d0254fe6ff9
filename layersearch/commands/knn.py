"""``layersearch knn build | bench``: KNN-SSD's router and its mix-ratio evaluation
(see :mod:`layersearch.knn`). Routing at generation time is ``layersearch generate --mask router:FILE``."""

from __future__ import annotations

import sys
from typing import Any

DEFAULT_RATIOS = "0,0.3,0.7,1.0"


def add_parser(sub: Any, parser_class: Any) -> None:
    """Register ``knn`` and its actions on the main CLI's subparsers."""
    from layersearch.commands.args import draft_args, model_args

    p = sub.add_parser("knn", help="KNN-SSD: one mask per domain, chosen per input by nearest neighbour")
    actions = p.add_subparsers(dest="action", required=True, parser_class=parser_class)
    build = actions.add_parser("build", help="anchors of each domain's training prompts and their masks -> router file")
    model_args(build, threads=1)
    build.add_argument("--domain", action="append", required=True, metavar="NAME=SOURCE",
                       help="a prompt domain and its mask: a mask file, or study:STUDY[@STORAGE] for a study's best "
                       "trial (repeat the option)")
    build.add_argument("--samples", type=int, default=20, help="training prompts per domain (default 20)")
    build.add_argument("--clusters", type=int, default=1, help="K-means clusters per domain (default 1)")
    build.add_argument("--anchors", type=int, default=10, help="anchors nearest each centroid (default 10, as the paper)")
    build.add_argument("--fallback", help="mask file for out-of-distribution inputs (default: plain decoding)")
    build.add_argument("--threshold-margin", type=float, default=1.25,
                       help="OOD threshold = this x the largest leave-one-out anchor distance of the training "
                       "prompts; 0 disables the threshold (default 1.25)")
    build.add_argument("--seed", type=int, default=0, help="prompt selection and K-means seed (default 0)")
    build.add_argument("--pca", metavar="PNG", help="also draw the representations' 2-D PCA with the anchors")
    build.add_argument("--out", required=True, help="router file (JSON)")
    bench = actions.add_parser("bench", help="plain, SSD_F, SSD_M, KNN-SSD and oracle on mix-ratio streams of test prompts")
    model_args(bench, threads=1)
    bench.add_argument("--router", required=True, help="router file from `knn build`")
    bench.add_argument("--domains", help="comma-separated domains (default: the router's)")
    bench.add_argument("--mix-ratios", default=DEFAULT_RATIOS, help=f"comma-separated r values (default {DEFAULT_RATIOS})")
    bench.add_argument("--instances", type=int, default=12, help="inputs per stream (default 12)")
    bench.add_argument("--test-prompts", type=int, default=4, help="held-out test prompts per domain (default 4)")
    bench.add_argument("--mixed-mask", help="SSD_M's mask (one mask searched on the mixed distribution); "
                       "without it the SSD_M row is left out")
    bench.add_argument("--max-new-tokens", type=int, default=32)
    bench.add_argument("--seed", type=int, default=0, help="stream and prompt seed (default 0)")
    bench.add_argument("--out", default="knn_bench.json", help="JSON report (default knn_bench.json)")
    bench.add_argument("--plot", metavar="PNG", help="speedup vs mix ratio picture")
    bench.add_argument("--routing-prompts", type=int, default=0,
                       help="also route this many test prompts per domain by their prefill alone (accuracy only, no decoding)")
    bench.add_argument("--ood-domains", default="",
                       help="comma-separated domains the router lacks: their --routing-prompts should fall back (OOD)")
    bench.add_argument("--pca", metavar="PNG", help="2-D PCA of those held-out representations with the router's anchors")
    draft_args(bench)
    p.set_defaults(command="knn")


def run(args: Any) -> int:
    """Dispatch on the action."""
    return {"build": _build, "bench": _bench}[args.action](args)


# ----- build ----------------------------------------------------------------------------
def _build(args: Any) -> int:
    from layersearch.commands.common import load
    from layersearch.common.inputs import domain_options
    from layersearch.experiments.knn.workflow import BuildJob, build_router_from
    from layersearch.masks.mask import SkipMask
    from layersearch.common.outputs import check_output
    from layersearch.evaluation.plots import check_png_output
    from layersearch.study.export import mask_from_source

    out = check_output(args.out, "--out", suffixes=(".json",))
    pca = check_png_output(args.pca) if args.pca else None
    sources = domain_options(args.domain, "--domain", "NAME=MASK.json or NAME=study:STUDY[@STORAGE]")
    masks = {name: mask_from_source(name, source) for name, source in sources.items()}  # bad files fail before the load
    fallback = SkipMask.load(args.fallback) if args.fallback else None
    job = BuildJob(masks, sources, args.samples, args.clusters, args.anchors, args.threshold_margin, fallback, args.seed)
    router, representations = build_router_from(job, lambda: load(args), _say)
    path = router.save(out)
    threshold = "none" if router.threshold is None else f"{router.threshold:.4f}"
    print(f"wrote {path}: {len(router.domains)} domains, {len(router.anchors)} anchors, OOD threshold {threshold}, "
          f"fallback {'plain decoding' if fallback is None else fallback.short_string()}")
    if pca is not None:
        from layersearch.experiments.knn.figures import plot_representations

        names = [router.domain_names[i] for i in router.anchor_domains]
        print(f"wrote {plot_representations(representations, router.anchors, names, pca)}")
    return 0


# ----- bench ----------------------------------------------------------------------------
def _bench(args: Any) -> int:
    from layersearch.commands.common import load
    from layersearch.common.jsonfile import write_json_atomic
    from layersearch.experiments.knn.experiment import format_table
    from layersearch.experiments.knn.workflow import BenchJob, parse_ratios, routing_lines, run_knn_bench
    from layersearch.common.outputs import check_output
    from layersearch.evaluation.plots import check_png_output

    job = BenchJob(args.router, args.mix_ratios, args.domains, args.instances, args.test_prompts, args.mixed_mask,
                   args.max_new_tokens, args.seed, args.routing_prompts, args.ood_domains, bool(args.pca), args.max_draft,
                   args.draft_threshold)
    parse_ratios(args.mix_ratios)  # its error before the output checks, as ever
    out = check_output(args.out, "--out", suffixes=(".json",))
    plot = check_png_output(args.plot) if args.plot else None
    pca = check_png_output(args.pca) if args.pca else None
    router, result, routing, report = run_knn_bench(job, lambda: load(args), _say)
    print(format_table(result))
    if routing is not None:
        print("\n".join(routing_lines(routing, args.routing_prompts)))
    print(f"wrote {write_json_atomic(out, report)}")
    if plot is not None:
        from layersearch.experiments.knn.figures import plot_mix_ratio

        print(f"wrote {plot_mix_ratio(result, plot)}")
    if pca is not None:
        from layersearch.experiments.knn.figures import plot_representations

        names = [router.domain_names[i] for i in router.anchor_domains]
        title = "held-out test prompts (PCA), router anchors ringed"
        print(f"wrote {plot_representations(routing.representations, router.anchors, names, pca, title=title)}")
    return 0


def _say(message: str, end: str = "\n") -> None:
    print(message, end=end, file=sys.stderr, flush=True)
