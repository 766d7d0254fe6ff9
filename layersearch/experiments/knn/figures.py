"""KNN-SSD's pictures: speedup against mix ratio per method, and a 2-D PCA of the representations.

The PCA picture is the paper's Figure 5: every prompt's representation projected on the first
two principal components of all of them, coloured by domain, the router's anchors ringed.
Drawing and atomic PNG writing reuse :mod:`layersearch.evaluation.plots`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from layersearch.common.errors import LayersearchError
from layersearch.common.outputs import OutputTarget
from layersearch.evaluation.plots import _figure_class, _save_atomic, check_png_output


def plot_mix_ratio(result, out: str | Path | OutputTarget) -> Path:
    """Speedup over plain decoding against mix ratio, one line per method (a KnnBenchResult)."""
    target = check_png_output(out)
    fig = _figure_class()(figsize=(6.0, 4.0))
    ax = fig.add_subplot()
    methods = [m for m in dict.fromkeys(r.method for r in result.rows) if m != "plain"]
    for method in methods:
        rows = sorted((r for r in result.rows if r.method == method and r.speedup is not None), key=lambda r: r.ratio)
        ax.plot([r.ratio for r in rows], [r.speedup for r in rows], marker="o", label=method)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="plain")
    ax.set_xlabel("mix ratio r (probability the next input changes domain)")
    ax.set_ylabel("speedup over plain generate")
    ax.set_title("KNN-SSD vs fixed masks on mixed streams", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save_atomic(fig, target)


def pca_2d(points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centre ``points`` ``[n, d]``; return their mean ``[d]``, the top-2 axes ``[2, d]`` and
    the projections ``[n, 2]`` (numpy SVD)."""
    points = np.asarray(points, dtype=np.float64)
    if points.ndim != 2 or len(points) < 2:
        raise LayersearchError("a PCA picture needs at least two representations")
    mean = points.mean(axis=0)
    _, _, vt = np.linalg.svd(points - mean, full_matrices=False)
    axes = vt[:2]
    return mean, axes, (points - mean) @ axes.T


def plot_representations(
    representations: Mapping[str, np.ndarray], anchors: np.ndarray, anchor_domains: Sequence[str], out: str | Path | OutputTarget,
    *, title: str = "prompt representations (PCA), anchors ringed",
) -> Path:
    """2-D PCA of each domain's representations ``[n_d, d]``, the anchors ``[A, d]`` ringed."""
    target = check_png_output(out)
    names = list(representations)
    pooled = np.concatenate([np.asarray(representations[n], dtype=np.float64) for n in names])
    mean, axes, projected = pca_2d(pooled)
    fig = _figure_class()(figsize=(6.0, 5.0))
    ax = fig.add_subplot()
    colours = [f"C{i % 10}" for i in range(len(names))]
    start = 0
    for name, colour in zip(names, colours):
        count = len(representations[name])
        ax.scatter(projected[start : start + count, 0], projected[start : start + count, 1], s=14, color=colour,
                   alpha=0.6, label=name)
        start += count
    anchor_xy = (np.asarray(anchors, dtype=np.float64) - mean) @ axes.T  # [A, 2]
    for name, colour in zip(names, colours):
        mine = np.array([d == name for d in anchor_domains])
        if mine.any():
            ax.scatter(anchor_xy[mine, 0], anchor_xy[mine, 1], s=70, facecolors="none", edgecolors=colour, linewidths=1.5)
    ax.scatter([], [], s=70, facecolors="none", edgecolors="black", label="anchors")
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save_atomic(fig, target)
