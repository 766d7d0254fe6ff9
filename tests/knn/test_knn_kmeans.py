"""k-means++ with restarts finds well-separated clusters; anchors are the points nearest each centroid."""

from __future__ import annotations

import numpy as np
import pytest

from layersearch.common.errors import LayersearchError
from layersearch.knn.kmeans import kmeans, nearest_to_centroids


def blobs(seed=0, per=30, centres=((0, 0), (10, 0), (0, 10))):
    rng = np.random.default_rng(seed)
    points = np.concatenate([rng.normal(c, 0.5, size=(per, 2)) for c in centres])
    truth = np.repeat(np.arange(len(centres)), per)
    return points, truth


def test_kmeans_recovers_separated_blobs():
    points, truth = blobs()
    result = kmeans(points, 3, n_init=10, seed=1)
    # Each found cluster is exactly one true blob (labels up to a permutation).
    pairs = {(int(a), int(b)) for a, b in zip(result.labels, truth)}
    assert len(pairs) == 3 and len({a for a, _ in pairs}) == 3
    assert sorted(np.round(result.centroids).tolist()) == [[0, 0], [0, 10], [10, 0]]


def test_restarts_never_worse_than_one_run():
    points, _ = blobs(seed=3, centres=((0, 0), (3, 0), (0, 3), (3, 3), (1.5, 6)))
    single = [kmeans(points, 5, n_init=1, seed=s).inertia for s in range(10)]
    best = kmeans(points, 5, n_init=10, seed=0).inertia
    assert best <= np.median(single) + 1e-9


def test_anchors_are_the_nearest_members_of_each_cluster():
    points, _ = blobs(per=20)
    result = kmeans(points, 3, seed=0)
    chosen = nearest_to_centroids(points, result, 5)
    assert len(chosen) == 15 and len(set(chosen.tolist())) == 15
    for c, centroid in enumerate(result.centroids):
        members = np.flatnonzero(result.labels == c)
        mine = [i for i in chosen if result.labels[i] == c]
        cutoff = max(np.sum((points[mine] - centroid) ** 2, axis=1))
        others = [i for i in members if i not in mine]
        assert all(np.sum((points[i] - centroid) ** 2) >= cutoff for i in others)


def test_small_cluster_gives_all_its_points():
    points = np.array([[0.0, 0.0], [0.1, 0.0], [9.0, 9.0]])
    result = kmeans(points, 2, seed=0)
    assert sorted(nearest_to_centroids(points, result, 10).tolist()) == [0, 1, 2]


@pytest.mark.parametrize("k", [0, 4])
def test_bad_cluster_count(k):
    with pytest.raises(LayersearchError, match="clusters"):
        kmeans(np.zeros((3, 2)), k)
