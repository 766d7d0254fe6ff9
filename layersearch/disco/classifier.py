"""DISCO's classifier: a 2-layer feed-forward network giving C_i, the chance that the draft
token at a position is accepted (disco.txt Sec. 3-4: "a shallow 2-layer FFN").

Trained in torch with (binary) cross-entropy on standardized features. ``loss="tv"`` is the
paper's total-variation variant, read here as soft targets 1 - TV(draft, target): the exact
probability that speculative sampling accepts a sampled draft token. The trained network is
an immutable value of plain float tuples, so it serializes to JSON and scores one position
with a few small matrix products.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import torch

from layersearch.disco.collect import Rows
from layersearch.disco.features import NUM_FEATURES
from layersearch.common.errors import LayersearchError

LOSSES = ("ce", "tv")


@dataclass(frozen=True)
class Classifier:
    """Standardize, Linear(F, H), ReLU, Linear(H, 1), sigmoid."""

    mean: tuple[float, ...]  # [F]
    scale: tuple[float, ...]  # [F]
    w1: tuple[tuple[float, ...], ...]  # [H][F]
    b1: tuple[float, ...]  # [H]
    w2: tuple[float, ...]  # [H]
    b2: float

    def __post_init__(self) -> None:
        # The tensors the scorer uses, built once (the value itself stays plain tuples).
        object.__setattr__(self, "_tensors", tuple(torch.tensor(v, dtype=torch.float32) for v in
                                                   (self.mean, self.scale, self.w1, self.b1, self.w2)))

    def scores(self, x: torch.Tensor | np.ndarray) -> torch.Tensor:
        """C for feature rows ``x`` [n, F] -> [n] in (0, 1)."""
        mean, scale, w1, b1, w2 = self._tensors  # type: ignore[attr-defined]
        x = torch.as_tensor(x, dtype=torch.float32)
        hidden = torch.relu(((x - mean) / scale) @ w1.T + b1)  # [n, H]
        return torch.sigmoid(hidden @ w2 + self.b2)  # [n]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready weights."""
        return {"mean": list(self.mean), "scale": list(self.scale), "w1": [list(r) for r in self.w1],
                "b1": list(self.b1), "w2": list(self.w2), "b2": self.b2}

    @classmethod
    def from_dict(cls, data: Any) -> "Classifier":
        """Parse and check shapes; raises LayersearchError naming what is wrong."""
        if not isinstance(data, Mapping):
            raise LayersearchError("classifier: expected an object with mean, scale, w1, b1, w2, b2")
        missing = [k for k in ("mean", "scale", "w1", "b1", "w2", "b2") if k not in data]
        if missing:
            raise LayersearchError(f"classifier: missing {', '.join(map(repr, missing))}")
        if not isinstance(data["w1"], list):
            raise LayersearchError("classifier: w1 must be a list of rows")
        mean, scale = _vector(data["mean"], "mean"), _vector(data["scale"], "scale")
        w1 = tuple(_vector(row, f"w1[{i}]") for i, row in enumerate(data["w1"]))
        b1, w2, b2 = _vector(data["b1"], "b1"), _vector(data["w2"], "w2"), _vector([data["b2"]], "b2")[0]
        hidden = len(b1)
        if (len(mean), len(scale)) != (NUM_FEATURES, NUM_FEATURES) or len(w1) != hidden or len(w2) != hidden \
                or any(len(r) != NUM_FEATURES for r in w1) or hidden == 0 or min(scale) <= 0:
            raise LayersearchError(f"classifier: weight shapes do not match {NUM_FEATURES} features")
        return cls(mean, scale, w1, b1, w2, b2)


@dataclass(frozen=True)
class TrainReport:
    """How training went: epochs run and the best validation loss."""

    epochs: int
    validation_loss: float


def train(
    rows: Rows, validation: Rows, *, loss: str = "ce", hidden: int = 32, epochs: int = 400,
    lr: float = 0.01, seed: int = 0,
) -> tuple[Classifier, TrainReport]:
    """Fit the network on ``rows`` (full batch, Adam); keep the epoch with the lowest validation loss."""
    if loss not in LOSSES:
        raise LayersearchError(f"unknown loss {loss!r} (choose from {', '.join(LOSSES)})")
    if len(rows) < 2 or len(validation) < 1:
        raise LayersearchError(f"too few rows to train on ({len(rows)} train, {len(validation)} validation): use more prompts or tokens")
    generator = torch.Generator().manual_seed(seed)
    x = torch.as_tensor(rows.x, dtype=torch.float32)
    mean = x.mean(0)
    scale = x.std(0).clamp_min(1e-6)
    net = torch.nn.Sequential(torch.nn.Linear(NUM_FEATURES, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
    with torch.no_grad():
        for p in net.parameters():  # seeded init, independent of the global RNG
            p.copy_(torch.empty_like(p).uniform_(-1, 1, generator=generator) / p.shape[-1] ** 0.5)
    inputs, target = (x - mean) / scale, _target(rows, loss)
    val_inputs = (torch.as_tensor(validation.x, dtype=torch.float32) - mean) / scale
    val_target = _target(validation, loss)
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    best: tuple[float, int, list[torch.Tensor] | None] = (float("inf"), 0, None)  # (loss, epoch, weights)
    with torch.enable_grad():
        for epoch in range(epochs):
            optimizer.zero_grad()
            bce(net(inputs).squeeze(-1), target).backward()
            optimizer.step()
            with torch.no_grad():
                val = float(bce(net(val_inputs).squeeze(-1), val_target))
            if val < best[0]:
                best = (val, epoch + 1, [p.detach().clone() for p in net.parameters()])
    if best[2] is None:
        raise LayersearchError(f"the classifier's validation loss was never finite in {epochs} epochs: nothing to keep")
    w1, b1, w2, b2 = best[2]
    classifier = Classifier(
        tuple(mean.tolist()), tuple(scale.tolist()), tuple(map(tuple, w1.tolist())), tuple(b1.tolist()),
        tuple(w2[0].tolist()), float(b2[0]),
    )
    return classifier, TrainReport(best[1], best[0])


def f1(predicted: np.ndarray, label: np.ndarray) -> float:
    """F1 of predicting "accepted" (0 when nothing is predicted or nothing is positive)."""
    predicted, label = np.asarray(predicted, bool), np.asarray(label, bool)
    tp = int((predicted & label).sum())
    denominator = int(predicted.sum()) + int(label.sum())
    return 2 * tp / denominator if denominator else 0.0


def _target(rows: Rows, loss: str) -> torch.Tensor:
    if loss == "tv":
        return torch.as_tensor(1.0 - rows.tv, dtype=torch.float32).clamp(0, 1)
    return torch.as_tensor(rows.label, dtype=torch.float32)


def _vector(values: Any, name: str) -> tuple[float, ...]:
    """``values`` as floats: a list of finite real numbers (no strings, booleans, NaN or infinities)."""
    if not isinstance(values, list):
        raise LayersearchError(f"classifier: {name} must be a list of numbers")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise LayersearchError(f"classifier: {name} holds {v!r}; weights must be finite numbers")
    return tuple(float(v) for v in values)
