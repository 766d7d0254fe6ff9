"""``layersearch knn build | bench``: KNN-SSD's router and its mix-ratio evaluation
(see :mod:`layersearch.knn`). Routing at generation time is ``layersearch generate --mask router:FILE``."""

from __future__ import annotations

import json
import sys
from typing import Any

from layersearch.errors import LayersearchError

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
    import numpy as np

    from layersearch.commands.common import check_context, domain_options, load, positive_int
    from layersearch.data import load_prompts
    from layersearch.knn import DomainSamples, build_router
    from layersearch.knn.represent import prompt_representation
    from layersearch.mask import SkipMask
    from layersearch.outputs import check_output
    from layersearch.plots import check_png_output

    for value, name in ((args.samples, "--samples"), (args.clusters, "--clusters"), (args.anchors, "--anchors")):
        positive_int(value, name)
    if args.clusters > args.samples:
        raise LayersearchError(f"--clusters ({args.clusters}) cannot exceed --samples ({args.samples})")
    margin = _margin(args.threshold_margin)
    out = check_output(args.out, suffixes=(".json",))
    pca = check_png_output(args.pca) if args.pca else None
    sources = domain_options(args.domain, "--domain", "NAME=MASK.json or NAME=study:STUDY[@STORAGE]")
    masks = {name: _mask_source(name, source) for name, source in sources.items()}  # bad files fail before the load
    fallback = SkipMask.load(args.fallback) if args.fallback else None
    from layersearch.data import user

    def texts_of(name: str, tokenizer=None) -> list[str]:
        return [p.text for p in load_prompts(name, args.samples, seed=args.seed, split="train", tokenizer=tokenizer)]

    # A bad domain or prompt file fails before the model loads; a prompt file's chat rows need its tokenizer.
    texts = {name: [] if user.is_user_domain(name) else texts_of(name) for name in sources}
    for name in sources:
        if user.is_user_domain(name):
            user.choose_rows(name[len(user.PREFIX):], args.samples, args.seed, "train")
    loaded = load(args)
    texts.update({name: texts_of(name, loaded.tokenizer) for name in sources if user.is_user_domain(name)})
    for name, mask in masks.items():
        _check_mask(mask, loaded.info, f"--domain {name}")
    if fallback is not None:
        _check_mask(fallback, loaded.info, "--fallback")
    samples = []
    for name, prompts in texts.items():
        reps = []
        for i, text in enumerate(prompts):
            ids = loaded.tokenizer(text, return_tensors="pt").input_ids
            check_context(loaded, ids.shape[1], f"{name} prompt {i + 1} ({ids.shape[1]} tokens)")
            reps.append(prompt_representation(loaded.model, ids))
            _say(f"\r{name}: {i + 1}/{len(prompts)} training prompts represented", end="")
        _say("")
        samples.append(DomainSamples(name, masks[name], np.stack(reps)))
    build = {"model": loaded.info.name, "split": "train", "sources": dict(sources)}
    router = build_router(loaded.info, samples, clusters=args.clusters, anchors_per_cluster=args.anchors,
                          threshold_margin=margin, fallback=fallback, seed=args.seed, build=build)
    path = router.save(out)
    threshold = "none" if router.threshold is None else f"{router.threshold:.4f}"
    print(f"wrote {path}: {len(router.domains)} domains, {len(router.anchors)} anchors, OOD threshold {threshold}, "
          f"fallback {'plain decoding' if fallback is None else fallback.short_string()}")
    if pca is not None:
        from layersearch.knn.figures import plot_representations

        names = [router.domain_names[i] for i in router.anchor_domains]
        print(f"wrote {plot_representations({s.name: s.representations for s in samples}, router.anchors, names, pca)}")
    return 0


def _margin(value: float) -> float | None:
    import math

    if not math.isfinite(value) or value < 0:
        raise LayersearchError(f"--threshold-margin must be a finite number >= 0, got {value}")
    return None if value == 0 else value


def _mask_source(name: str, source: str):
    """A mask file, or ``study:STUDY[@STORAGE]``: that study's best trial."""
    from layersearch.mask import SkipMask

    if not source.startswith("study:"):
        return SkipMask.load(source)
    study, _, storage = source[len("study:"):].partition("@")
    if not study:
        raise LayersearchError(f"--domain {name}=study: needs a study name, e.g. study:{name}-search@sqlite:///{name}.db")
    from layersearch.study.export import study_mask

    return study_mask(study, storage=storage or None).with_provenance(source=source)


def _check_mask(mask, info, where: str) -> None:
    try:
        mask.check_model(info)
    except LayersearchError as exc:
        raise LayersearchError(f"{where}: {exc}") from None


# ----- bench ----------------------------------------------------------------------------
def _bench(args: Any) -> int:
    from layersearch.checks import check_fraction
    from layersearch.commands.common import check_context, load, positive_int
    from layersearch.data import load_prompts
    from layersearch.jsonfile import write_json_atomic
    from layersearch.knn.bench import format_table, held_out_routing, knn_bench
    from layersearch.knn.router import Router
    from layersearch.mask import SkipMask
    from layersearch.outputs import check_output
    from layersearch.plots import check_png_output
    from layersearch.runtime.drafting import DraftPolicy

    for value, name in ((args.instances, "--instances"), (args.test_prompts, "--test-prompts"),
                        (args.max_new_tokens, "--max-new-tokens")):
        positive_int(value, name)
    if args.routing_prompts:
        positive_int(args.routing_prompts, "--routing-prompts")
    if args.pca and not args.routing_prompts:
        raise LayersearchError("--pca draws the --routing-prompts representations: give --routing-prompts N")
    DraftPolicy(args.max_draft, args.draft_threshold)
    ratios = _ratios(args.mix_ratios, check_fraction)
    out = check_output(args.out, suffixes=(".json",))
    plot = check_png_output(args.plot) if args.plot else None
    pca = check_png_output(args.pca) if args.pca else None
    router = Router.load(args.router)
    domains = [d for d in (args.domains or ",".join(router.domain_names)).split(",") if d]
    if not domains:
        raise LayersearchError("--domains is empty")
    for domain in domains:
        router.mask_of(domain)
    if len(domains) < 2 and any(r > 0 for r in ratios):
        raise LayersearchError("mix ratios above 0 need at least two --domains")
    mixed = SkipMask.load(args.mixed_mask) if args.mixed_mask else None
    texts = {d: [p.text for p in load_prompts(d, args.test_prompts, seed=args.seed, split="test")] for d in domains}
    ood = [d for d in args.ood_domains.split(",") if d]
    if ood and not args.routing_prompts:
        raise LayersearchError("--ood-domains are routed with --routing-prompts N: give it")
    routing_texts = {d: [p.text for p in load_prompts(d, args.routing_prompts, seed=args.seed + 1, split="test")]
                     for d in domains + ood} if args.routing_prompts else {}
    loaded = load(args)
    try:
        router.check_model(loaded.info)
    except LayersearchError as exc:
        raise LayersearchError(f"{args.router}: {exc}") from None
    if mixed is not None:
        _check_mask(mixed, loaded.info, "--mixed-mask")
    prompts = {}
    for domain, items in texts.items():
        prompts[domain] = [loaded.tokenizer(t, return_tensors="pt").input_ids for t in items]
        for i, ids in enumerate(prompts[domain]):
            check_context(loaded, ids.shape[1] + args.max_new_tokens, f"{domain} test prompt {i + 1} + --max-new-tokens")
    routing = None
    if routing_texts:
        held_out = {d: [loaded.tokenizer(t, return_tensors="pt").input_ids for t in items] for d, items in routing_texts.items()}
        for domain, items in held_out.items():
            for i, ids in enumerate(items):
                check_context(loaded, ids.shape[1], f"{domain} routing prompt {i + 1}")
        routing = held_out_routing(loaded, router, held_out, progress=_say)
    result = knn_bench(loaded, router, prompts, ratios, args.instances, mixed_mask=mixed, max_new_tokens=args.max_new_tokens,
                       max_draft=args.max_draft, draft_threshold=args.draft_threshold, seed=args.seed,
                       progress=lambda m: _say(m))
    print(format_table(result))
    report = {"model": loaded.info.to_dict(), "router": str(args.router), **result.to_dict()}
    if routing is not None:
        report["held_out_routing"] = routing.to_dict()
        print(f"held-out routing ({args.routing_prompts} test prompts per domain, prefill only): overall "
              f"{routing.overall:.3f}; " + ", ".join(f"{d} {a:.2f}" for d, a in routing.accuracy.items()))
        print("confusion (true -> routed): " + json.dumps(routing.to_dict()["confusion"]))
    print(f"wrote {write_json_atomic(out, report)}")
    if plot is not None:
        from layersearch.knn.figures import plot_mix_ratio

        print(f"wrote {plot_mix_ratio(result, plot)}")
    if pca is not None:
        from layersearch.knn.figures import plot_representations

        names = [router.domain_names[i] for i in router.anchor_domains]
        title = "held-out test prompts (PCA), router anchors ringed"
        print(f"wrote {plot_representations(routing.representations, router.anchors, names, pca, title=title)}")
    return 0


def _ratios(text: str, check) -> list[float]:
    values = []
    for part in text.split(","):
        if not part.strip():
            continue
        try:
            value = float(part)
        except ValueError:
            raise LayersearchError(f"--mix-ratios must be comma-separated numbers in [0, 1], got {part!r}") from None
        values.append(check(value, "each --mix-ratios value"))
    if not values:
        raise LayersearchError("--mix-ratios is empty")
    if len(set(values)) != len(values):
        raise LayersearchError(f"--mix-ratios repeats a value: {text}")
    return values


def _say(message: str, end: str = "\n") -> None:
    print(message, end=end, file=sys.stderr, flush=True)
