"""K-means (k-means++ seeding, best of ``n_init`` restarts) and the anchors nearest each centroid.

numpy only: scikit-learn is not a dependency, and scipy's ``kmeans2`` has no restarts. KNN-SSD
clusters the representations and keeps the ``k`` vectors nearest each centroid as anchors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layersearch.common.errors import LayersearchError


@dataclass(frozen=True)
class Clustering:
    """Centroids ``[k, d]``, each point's cluster ``[n]`` and the within-cluster sum of squares."""

    centroids: np.ndarray
    labels: np.ndarray
    inertia: float


def kmeans(points: np.ndarray, k: int, *, n_init: int = 10, max_iter: int = 100, seed: int = 0) -> Clustering:
    """Lloyd's k-means on ``points`` ``[n, d]`` with k-means++ seeding; the best of ``n_init`` runs."""
    points = np.asarray(points, dtype=np.float64)
    if points.ndim != 2 or len(points) == 0:
        raise LayersearchError(f"k-means needs a non-empty [n, d] array, got shape {points.shape}")
    if not 1 <= k <= len(points):
        raise LayersearchError(f"k-means needs 1 <= clusters <= points ({len(points)}), got {k}")
    rng = np.random.default_rng(seed)
    best: Clustering | None = None
    for _ in range(n_init):
        run = _lloyd(points, _plus_plus(points, k, rng), max_iter)
        if best is None or run.inertia < best.inertia:
            best = run
    if best is None:
        raise LayersearchError(f"k-means needs at least one run (n_init >= 1), got n_init={n_init}")
    return best


def nearest_to_centroids(points: np.ndarray, clustering: Clustering, per_centroid: int) -> np.ndarray:
    """Indices of the ``per_centroid`` points of each cluster nearest its centroid (fewer when the
    cluster is smaller), cluster by cluster: ``[<= k * per_centroid]``."""
    points = np.asarray(points, dtype=np.float64)
    chosen = []
    for c, centroid in enumerate(clustering.centroids):
        members = np.flatnonzero(clustering.labels == c)
        distances = ((points[members] - centroid) ** 2).sum(axis=1)
        chosen.extend(members[np.argsort(distances, kind="stable")[:per_centroid]].tolist())
    return np.asarray(chosen, dtype=np.int64)


def _plus_plus(points: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++: each next centre drawn with probability proportional to squared distance."""
    centres = [points[rng.integers(len(points))]]
    closest = ((points - centres[0]) ** 2).sum(axis=1)  # [n]
    for _ in range(1, k):
        total = closest.sum()
        # All points on the chosen centres (duplicates): any point is as good as another.
        index = rng.integers(len(points)) if total <= 0 else rng.choice(len(points), p=closest / total)
        centres.append(points[index])
        closest = np.minimum(closest, ((points - points[index]) ** 2).sum(axis=1))
    return np.stack(centres)  # [k, d]


def _lloyd(points: np.ndarray, centres: np.ndarray, max_iter: int) -> Clustering:
    labels = np.zeros(len(points), dtype=np.int64)
    for _ in range(max_iter):
        distances = _squared_distances(points, centres)  # [n, k]
        new_labels = distances.argmin(axis=1)
        moved = [points[new_labels == c].mean(axis=0) if (new_labels == c).any() else centres[c] for c in range(len(centres))]
        new_centres = np.stack(moved)
        if np.array_equal(new_labels, labels) and np.allclose(new_centres, centres):
            break
        labels, centres = new_labels, new_centres
    distances = _squared_distances(points, centres)
    labels = distances.argmin(axis=1)
    return Clustering(centres, labels, float(distances[np.arange(len(points)), labels].sum()))


def _squared_distances(points: np.ndarray, centres: np.ndarray) -> np.ndarray:
    # [n, k] without forming [n, k, d]
    sq = (points**2).sum(axis=1)[:, None] - 2 * points @ centres.T + (centres**2).sum(axis=1)[None, :]
    return np.maximum(sq, 0.0)
