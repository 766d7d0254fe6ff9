"""Building a router from per-domain representations: K-means anchors and the OOD threshold.

For every domain, the representations of its training prompts are clustered (K-means, n_init
10) and the ``anchors_per_cluster`` vectors nearest each centroid become that domain's anchors
(KNN-SSD keeps 10). The out-of-distribution threshold is calibrated on the same training
prompts: each prompt's cosine distance to its nearest anchor *other than itself* (an anchor is
a training prompt, at distance 0 from itself), the largest of those times ``threshold_margin``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from layersearch.common.errors import LayersearchError
from layersearch.knn.kmeans import kmeans, nearest_to_centroids
from layersearch.knn.router import DomainMask, Router
from layersearch.masks.mask import ModelInfo, SkipMask

ANCHORS_PER_CLUSTER = 10
THRESHOLD_MARGIN = 1.25


@dataclass(frozen=True)
class DomainSamples:
    """One domain's mask and the representations ``[n, d]`` of its training prompts."""

    name: str
    mask: SkipMask
    representations: np.ndarray


def build_router(
    model: ModelInfo,
    samples: Sequence[DomainSamples],
    *,
    clusters: int = 1,
    anchors_per_cluster: int = ANCHORS_PER_CLUSTER,
    threshold_margin: float | None = THRESHOLD_MARGIN,
    fallback: SkipMask | None = None,
    seed: int = 0,
    build: Mapping[str, Any] | None = None,
) -> Router:
    """A router whose anchors are each domain's points nearest its K-means centroids.

    ``threshold_margin`` None: no OOD threshold (every input goes to its nearest domain).
    """
    if not samples:
        raise LayersearchError("a router needs at least one domain")
    if anchors_per_cluster < 1 or clusters < 1:
        raise LayersearchError("clusters and anchors per cluster must be >= 1")
    anchors, labels, sources = [], [], []  # sources: index of each anchor in the pooled points
    offset = 0
    for index, domain in enumerate(samples):
        points = np.asarray(domain.representations, dtype=np.float64)
        if points.ndim != 2 or points.shape[1] != model.hidden_size or len(points) < clusters:
            raise LayersearchError(
                f"domain {domain.name!r}: need at least {clusters} representation(s) of size {model.hidden_size}, "
                f"got shape {points.shape}"
            )
        chosen = nearest_to_centroids(points, kmeans(points, clusters, n_init=10, seed=seed), anchors_per_cluster)
        anchors.append(points[chosen])
        labels.extend([index] * len(chosen))
        sources.extend((offset + chosen).tolist())
        offset += len(points)
    pooled = np.concatenate([np.asarray(d.representations, dtype=np.float64) for d in samples])
    anchor_array = np.concatenate(anchors)
    threshold = None
    if threshold_margin is not None:
        threshold = min(2.0, threshold_margin * float(leave_one_out_distances(pooled, anchor_array, sources).max()))
    info = dict(build or {})
    info.update(clusters=clusters, anchors_per_cluster=anchors_per_cluster, threshold_margin=threshold_margin, seed=seed,
                samples={d.name: int(len(d.representations)) for d in samples})
    domains = tuple(DomainMask(d.name, d.mask) for d in samples)
    return Router(model, domains, anchor_array, np.asarray(labels), threshold, fallback, info)


def leave_one_out_distances(points: np.ndarray, anchors: np.ndarray, sources: Sequence[int]) -> np.ndarray:
    """Each point's cosine distance ``[n]`` to its nearest anchor, ignoring the anchor made from it
    (``sources[a]`` is the point anchor ``a`` was taken from); inf when no other anchor exists."""
    unit_p = points / np.linalg.norm(points, axis=1, keepdims=True)
    unit_a = anchors / np.linalg.norm(anchors, axis=1, keepdims=True)
    distances = 1.0 - unit_p @ unit_a.T  # [n, A]
    distances[np.asarray(sources), np.arange(len(anchors))] = np.inf
    nearest = distances.min(axis=1)
    finite = nearest[np.isfinite(nearest)]
    return nearest if finite.size else np.zeros(len(points))


def routing_accuracy(router: Router, representations: np.ndarray, domains: Sequence[str]) -> float:
    """Share of representations ``[n, d]`` routed to their own domain (OOD counts as wrong)."""
    if len(representations) != len(domains) or not len(domains):
        raise LayersearchError("routing accuracy needs one domain per representation")
    hits = sum(router.route(r).domain == d for r, d in zip(representations, domains))
    return hits / len(domains)
