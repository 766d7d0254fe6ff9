"""The ``layersearch knn`` workflows as functions: build a router from each domain's training
prompts and mask, and run the mix-ratio bench. Each checks its inputs before ``load()`` loads
the model; the CLI (``commands/knn.py``) parses, resolves mask sources and calls one of them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from layersearch.common.checks import check_fraction, check_int
from layersearch.models.context import check_context
from layersearch.common.errors import LayersearchError
from layersearch.runtime import DRAFT_THRESHOLD, MAX_DRAFT


def check_mask(mask: Any, info: Any, where: str) -> None:
    """``mask.check_model(info)``, its error prefixed with ``where``."""
    try:
        mask.check_model(info)
    except LayersearchError as exc:
        raise LayersearchError(f"{where}: {exc}") from None


def threshold_margin(value: float) -> float | None:
    """``threshold_margin``: a finite number >= 0 (0: no OOD threshold, None)."""
    if not math.isfinite(value) or value < 0:
        raise LayersearchError(f"threshold_margin must be a finite number >= 0, got {value}", fields="threshold_margin")
    return None if value == 0 else value


@dataclass(frozen=True)
class BuildJob:
    """What ``knn build`` makes: a router over ``masks`` (domain -> SkipMask) from each domain's
    ``samples`` training prompts (see :func:`layersearch.knn.build_router`)."""

    masks: Mapping[str, Any]
    sources: Mapping[str, str]  # domain -> where its mask came from (recorded in the router)
    samples: int = 20
    clusters: int = 1
    anchors: int = 10
    threshold_margin: float = 1.25
    fallback: Any = None  # SkipMask for out-of-distribution inputs (None: plain decoding)
    seed: int = 0


def build_router_from(job: BuildJob, load: Callable[[], Any], say: Callable[..., None]) -> tuple[Any, dict[str, Any]]:
    """(router, domain -> training representations): every prompt represented by its prefill."""
    import numpy as np

    from layersearch.data import load_prompts, user
    from layersearch.knn import DomainSamples, build_router
    from layersearch.knn.represent import prompt_representation

    for value, name in ((job.samples, "samples"), (job.clusters, "clusters"), (job.anchors, "anchors")):
        check_int(value, name)
    if job.clusters > job.samples:
        raise LayersearchError(f"clusters ({job.clusters}) cannot exceed samples ({job.samples})", fields=("clusters", "samples"))
    margin = threshold_margin(job.threshold_margin)

    def texts_of(name: str, tokenizer=None) -> list[str]:
        return [p.text for p in load_prompts(name, job.samples, seed=job.seed, split="train", tokenizer=tokenizer)]

    # A bad domain or prompt file fails before the model loads; a prompt file's chat rows need its tokenizer.
    texts = {name: [] if user.is_user_domain(name) else texts_of(name) for name in job.masks}
    for name in job.masks:
        if user.is_user_domain(name):
            user.choose_rows(name[len(user.PREFIX):], job.samples, job.seed, "train")
    loaded = load()
    texts.update({name: texts_of(name, loaded.tokenizer) for name in job.masks if user.is_user_domain(name)})
    for name, mask in job.masks.items():
        check_mask(mask, loaded.info, f"domain {name}")
    if job.fallback is not None:
        check_mask(job.fallback, loaded.info, "fallback")
    samples = []
    for name, prompts in texts.items():
        reps = []
        for i, text in enumerate(prompts):
            ids = loaded.tokenizer(text, return_tensors="pt").input_ids
            check_context(loaded, ids.shape[1], f"{name} prompt {i + 1} ({ids.shape[1]} tokens)")
            reps.append(prompt_representation(loaded.model, ids))
            say(f"\r{name}: {i + 1}/{len(prompts)} training prompts represented", end="")
        say("")
        samples.append(DomainSamples(name, job.masks[name], np.stack(reps)))
    build = {"model": loaded.info.name, "split": "train", "sources": dict(job.sources)}
    router = build_router(loaded.info, samples, clusters=job.clusters, anchors_per_cluster=job.anchors,
                          threshold_margin=margin, fallback=job.fallback, seed=job.seed, build=build)
    return router, {s.name: s.representations for s in samples}


def parse_ratios(text: str) -> list[float]:
    """``mix_ratios``: distinct comma-separated numbers in [0, 1]."""
    values = []
    for part in text.split(","):
        if not part.strip():
            continue
        try:
            value = float(part)
        except ValueError:
            raise LayersearchError(f"mix_ratios must be comma-separated numbers in [0, 1], got {part!r}", fields="mix_ratios") from None
        values.append(check_fraction(value, "each mix_ratios value"))
    if not values:
        raise LayersearchError("mix_ratios is empty", fields="mix_ratios")
    if len(set(values)) != len(values):
        raise LayersearchError(f"mix_ratios repeats a value: {text}", fields="mix_ratios")
    return values


@dataclass(frozen=True)
class BenchJob:
    """What ``knn bench`` measures (see :func:`layersearch.experiments.knn.knn_bench`)."""

    router: str  # the router file
    mix_ratios: str = "0,0.3,0.7,1.0"
    domains: str | None = None  # comma-separated (None: the router's)
    instances: int = 12
    test_prompts: int = 4
    mixed_mask: str | None = None
    max_new_tokens: int = 32
    seed: int = 0
    routing_prompts: int = 0
    ood_domains: str = ""
    pca: bool = False  # the caller draws the held-out representations
    max_draft: int = MAX_DRAFT
    draft_threshold: float = DRAFT_THRESHOLD


def run_knn_bench(job: BenchJob, load: Callable[[], Any], say: Callable[[str], None]) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(router, result, held-out routing or None, report): the mix-ratio streams measured."""
    from layersearch.data import load_prompts
    from layersearch.experiments.knn.experiment import held_out_routing, knn_bench
    from layersearch.knn.router import Router
    from layersearch.masks.mask import SkipMask
    from layersearch.runtime.draft_policy import DraftPolicy

    for value, name in ((job.instances, "instances"), (job.test_prompts, "test_prompts"),
                        (job.max_new_tokens, "max_new_tokens")):
        check_int(value, name)
    if job.routing_prompts:
        check_int(job.routing_prompts, "routing_prompts")
    if job.pca and not job.routing_prompts:
        raise LayersearchError("pca draws the routing_prompts representations: give routing_prompts N", fields=("pca", "routing_prompts"))
    DraftPolicy(job.max_draft, job.draft_threshold)
    ratios = parse_ratios(job.mix_ratios)
    router = Router.load(job.router)
    domains = [d for d in (job.domains or ",".join(router.domain_names)).split(",") if d]
    if not domains:
        raise LayersearchError("domains is empty", fields="domains")
    for domain in domains:
        router.mask_of(domain)
    if len(domains) < 2 and any(r > 0 for r in ratios):
        raise LayersearchError("mix ratios above 0 need at least two domains", fields="domains")
    mixed = SkipMask.load(job.mixed_mask) if job.mixed_mask else None
    texts = {d: [p.text for p in load_prompts(d, job.test_prompts, seed=job.seed, split="test")] for d in domains}
    ood = [d for d in job.ood_domains.split(",") if d]
    if ood and not job.routing_prompts:
        raise LayersearchError("ood_domains are routed with routing_prompts N: give it", fields=("ood_domains", "routing_prompts"))
    routing_texts = {d: [p.text for p in load_prompts(d, job.routing_prompts, seed=job.seed + 1, split="test")]
                     for d in domains + ood} if job.routing_prompts else {}
    loaded = load()
    try:
        router.check_model(loaded.info)
    except LayersearchError as exc:
        raise LayersearchError(f"{job.router}: {exc}") from None
    if mixed is not None:
        check_mask(mixed, loaded.info, "mixed_mask")
    prompts = {}
    for domain, items in texts.items():
        prompts[domain] = [loaded.tokenizer(t, return_tensors="pt").input_ids for t in items]
        for i, ids in enumerate(prompts[domain]):
            check_context(loaded, ids.shape[1] + job.max_new_tokens, f"{domain} test prompt {i + 1} + max_new_tokens", ("max_new_tokens",))
    routing = None
    if routing_texts:
        held_out = {d: [loaded.tokenizer(t, return_tensors="pt").input_ids for t in items] for d, items in routing_texts.items()}
        for domain, tokenized in held_out.items():
            for i, ids in enumerate(tokenized):
                check_context(loaded, ids.shape[1], f"{domain} routing prompt {i + 1}")
        routing = held_out_routing(loaded, router, held_out, progress=say)
    result = knn_bench(loaded, router, prompts, ratios, job.instances, mixed_mask=mixed, max_new_tokens=job.max_new_tokens,
                       max_draft=job.max_draft, draft_threshold=job.draft_threshold, seed=job.seed, progress=say)
    report = {"model": loaded.info.to_dict(), "router": str(job.router), **result.to_dict()}
    if routing is not None:
        report["held_out_routing"] = routing.to_dict()
    return router, result, routing, report


def routing_lines(routing: Any, prompts: int) -> list[str]:
    """The held-out routing's accuracy and confusion, as ``knn bench`` prints them."""
    import json

    return [f"held-out routing ({prompts} test prompts per domain, prefill only): overall "
            f"{routing.overall:.3f}; " + ", ".join(f"{d} {a:.2f}" for d, a in routing.accuracy.items()),
            "confusion (true -> routed): " + json.dumps(routing.to_dict()["confusion"])]
