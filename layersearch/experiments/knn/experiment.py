"""KNN-SSD's evaluation: mix-ratio streams of held-out prompts, five ways of decoding them.

Rows (as the paper's Tables 2 and 7):

* ``plain``   transformers' ``generate`` (the reference for speedup),
* ``SSD_F``   the mask of the stream's first input's domain, kept for the whole stream,
* ``SSD_M``   one mask for every input (searched on the mixed distribution; given by the caller),
* ``KNN-SSD`` the router's choice per input (routing time included),
* ``oracle``  each input's own domain mask.

Self-SD keeps no state between inputs, so an input decoded with a given mask costs the same
wherever it sits in a stream: every (prompt, mask) pair and every prompt's KNN-SSD run is decoded
once, interleaved prompt by prompt so machine drift hits all methods alike, and each stream
pools the runs of its inputs. Speedup: :func:`layersearch.evaluation.measure.speedup` of the stream's pooled
runs (plain's seconds per token over the method's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from layersearch.common.errors import LayersearchError
from layersearch.runtime import DRAFT_THRESHOLD, MAX_DRAFT
from layersearch.knn.stream import StreamItem, mix_stream, switch_rate
from layersearch.masks.mask import SkipMask

METHODS = ("plain", "SSD_F", "SSD_M", "KNN-SSD", "oracle")


@dataclass(frozen=True)
class BenchRow:
    """One method on one mix ratio's stream."""

    ratio: float
    method: str
    speedup: float | None
    M: float
    alpha: float | None
    tokens_per_second: float
    routing_accuracy: float | None = None  # KNN-SSD only: share of inputs routed to their own domain


@dataclass(frozen=True)
class KnnBenchResult:
    """Every row, the held-out routing accuracy per domain, and each stream's observed switch rate."""

    rows: tuple[BenchRow, ...]
    routing: Mapping[str, float]
    switch_rates: Mapping[float, float]
    settings: Mapping[str, Any]

    def row(self, ratio: float, method: str) -> BenchRow:
        """The row of ``method`` at ``ratio``."""
        return next(r for r in self.rows if r.ratio == ratio and r.method == method)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"settings": dict(self.settings), "routing_accuracy": dict(self.routing),
                "switch_rates": {str(k): v for k, v in self.switch_rates.items()}, "rows": [vars(r) for r in self.rows]}


def knn_bench(
    loaded: Any,
    router: Any,
    prompts: Mapping[str, Sequence[Any]],
    ratios: Sequence[float],
    instances: int,
    *,
    mixed_mask: SkipMask | None = None,
    max_new_tokens: int = 32,
    max_draft: int = MAX_DRAFT,
    draft_threshold: float = DRAFT_THRESHOLD,
    seed: int = 0,
    progress: Callable[[str], None] = lambda message: None,
) -> KnnBenchResult:
    """Run the five methods over one stream per mix ratio; ``prompts`` maps each domain to its
    held-out token-id tensors ``[1, n]``."""
    domains = list(prompts)
    for domain in domains:
        router.mask_of(domain)  # every evaluated domain has its own mask (the oracle needs it)
    streams = {r: mix_stream(domains, instances, r, min(len(p) for p in prompts.values()), seed=seed) for r in ratios}
    runs = _decode_all(loaded, router, prompts, mixed_mask, max_new_tokens, max_draft, draft_threshold, progress)
    rows = []
    for ratio, stream in streams.items():
        rows.extend(_rows(ratio, stream, runs, router, mixed_mask))
    routing = {d: _share(runs["route"][(d, i)] == d for i in range(len(prompts[d]))) for d in domains}
    settings = dict(domains=domains, ratios=list(ratios), instances=instances, prompts_per_domain={d: len(p) for d, p in prompts.items()},
                    max_new_tokens=max_new_tokens, max_draft=max_draft, draft_threshold=draft_threshold, seed=seed,
                    mixed_mask=None if mixed_mask is None else mixed_mask.short_string())
    return KnnBenchResult(tuple(rows), routing, {r: switch_rate(s) for r, s in streams.items()}, settings)


def _decode_all(loaded, router, prompts, mixed_mask, max_new_tokens, max_draft, draft_threshold, progress) -> dict[str, Any]:
    """Stats of every (prompt, method-mask) pair and every prompt's route, interleaved per prompt."""
    from layersearch.decoder.build import assemble
    from layersearch.knn.controller import KnnController
    from layersearch.runtime.baseline import hf_generate
    from layersearch.runtime.draft_policy import DraftPolicy
    from layersearch.decoder.fragments import mask_spec

    policy = DraftPolicy(max_draft, draft_threshold)
    masks = {f"mask:{d.name}": d.mask for d in router.domains}
    if mixed_mask is not None:
        masks["mixed"] = mixed_mask
    fixed = {key: assemble(loaded.model, mask_spec(mask, policy)) for key, mask in masks.items()}
    controller = KnnController(router)
    knn = assemble(loaded.model, mask_spec(None, policy), controller=controller)  # the router chooses each prompt's mask
    runs: dict[str, Any] = {"plain": {}, "knn": {}, "route": {}, **{key: {} for key in masks}}
    # Warm-up: the first forwards of a process are slow (allocations, kernels); time none of them.
    first = next(iter(prompts.values()))[0]
    hf_generate(loaded.model, first, 2)
    knn.generate(first, 2)
    controller.routes.clear()
    methods = [("plain", lambda ids, n: hf_generate(loaded.model, ids, n)), ("knn", knn.generate),
               *((name, decoder.generate) for name, decoder in fixed.items())]
    total = sum(len(p) for p in prompts.values())
    done = 0
    for domain, items in prompts.items():
        for index, ids in enumerate(items):
            key = (domain, index)
            # Every method on this prompt back to back, the first one rotating with the prompt
            # (as layersearch.evaluation.measure.compare does): whatever runs first is measured slower.
            shift = done % len(methods)
            for name, generate in methods[shift:] + methods[:shift]:
                runs[name][key] = generate(ids, max_new_tokens).stats
                if name == "knn":
                    runs["route"][key] = controller.routes[-1].domain
            done += 1
            progress(f"decoded {done}/{total} held-out prompts ({domain} {index}: routed to {runs['route'][key]})")
    return runs


def _rows(ratio: float, stream: Sequence[StreamItem], runs: Mapping[str, Any], router, mixed_mask) -> list[BenchRow]:
    from layersearch.evaluation.measure import stats_speedup
    from layersearch.runtime.stats import combine

    keys = [(item.domain, item.index) for item in stream]
    first = f"mask:{stream[0].domain}"
    chosen = {
        "plain": [runs["plain"][k] for k in keys],
        "SSD_F": [runs[first][k] for k in keys],
        "KNN-SSD": [runs["knn"][k] for k in keys],
        "oracle": [runs[f"mask:{k[0]}"][k] for k in keys],
    }
    if mixed_mask is not None:
        chosen["SSD_M"] = [runs["mixed"][k] for k in keys]
    plain = combine(chosen["plain"])
    rows = []
    for method in METHODS:
        if method not in chosen:
            continue
        pooled = combine(chosen[method])
        accuracy = _share(runs["route"][k] == k[0] for k in keys) if method == "KNN-SSD" else None
        rows.append(BenchRow(ratio, method, stats_speedup(plain, pooled), pooled.mean_accepted_length,
                             pooled.acceptance_rate, pooled.tokens_per_second, accuracy))
    return rows


def _share(flags) -> float:
    flags = list(flags)
    if not flags:
        raise LayersearchError("nothing to score")
    return sum(bool(f) for f in flags) / len(flags)


def format_table(result: KnnBenchResult) -> str:
    """The mix-ratio table: one line per (ratio, method)."""
    lines = [f"{'r':>5} {'method':<8} {'speedup':>8} {'M':>6} {'alpha':>6} {'tok/s':>7} {'route-acc':>9}"]
    for row in result.rows:
        speed = "-" if row.speedup is None else f"{row.speedup:.3f}"
        alpha = "-" if row.alpha is None else f"{row.alpha:.3f}"
        acc = "" if row.routing_accuracy is None else f"{row.routing_accuracy:.2f}"
        lines.append(f"{row.ratio:>5.2f} {row.method:<8} {speed:>8} {row.M:>6.2f} {alpha:>6} {row.tokens_per_second:>7.1f} {acc:>9}")
    routing = ", ".join(f"{d} {a:.2f}" for d, a in result.routing.items())
    lines.append(f"routing accuracy on held-out prompts: {routing}")
    return "\n".join(lines)


@dataclass(frozen=True)
class RoutingReport:
    """Held-out routing: accuracy per domain, the confusion counts (true -> routed, "OOD" for the
    fallback) and the representations ``{domain: [n, d]}`` (for the PCA picture). A domain the
    router does not know is scored correct when it is routed to the fallback ("OOD")."""

    accuracy: Mapping[str, float]
    confusion: Mapping[str, Mapping[str, int]]
    representations: Mapping[str, Any]
    known: tuple[str, ...] = ()

    @property
    def overall(self) -> float:
        """Share of all held-out prompts routed to their own domain."""
        total = sum(sum(row.values()) for row in self.confusion.values())
        return sum(row.get(self.expected(d), 0) for d, row in self.confusion.items()) / total

    def expected(self, domain: str) -> str:
        """The right route of ``domain``'s prompts: itself, or "OOD" for a domain the router lacks."""
        return domain if domain in self.known else "OOD"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (no representations)."""
        return {"overall": self.overall, "per_domain": dict(self.accuracy),
                "confusion": {d: dict(row) for d, row in self.confusion.items()}}


def held_out_routing(loaded: Any, router: Any, prompts: Mapping[str, Sequence[Any]],
                     progress: Callable[[str], None] = lambda message: None) -> RoutingReport:
    """Route every held-out prompt (token ids ``[1, n]``) by its prefill alone: no decoding."""
    import numpy as np

    from layersearch.knn.represent import prompt_representation

    confusion: dict[str, dict[str, int]] = {}
    representations = {}
    for domain, items in prompts.items():
        reps = [prompt_representation(loaded.model, ids) for ids in items]
        representations[domain] = np.stack(reps)
        row: dict[str, int] = {}
        for rep in reps:
            routed = router.route(rep).domain or "OOD"
            row[routed] = row.get(routed, 0) + 1
        confusion[domain] = row
        right = domain if domain in router.domain_names else "OOD"
        progress(f"routing {domain}: {row.get(right, 0)}/{len(items)} held-out prompts to {right}")
    known = router.domain_names
    accuracy = {d: row.get(d if d in known else "OOD", 0) / max(1, sum(row.values())) for d, row in confusion.items()}
    return RoutingReport(accuracy, confusion, representations, known)
