"""The KNN-SSD router: per-domain masks, the anchors that vote for them, and its JSON file.

A :class:`Router` routes one input representation (the prompt's mean last-layer hidden state,
:mod:`layersearch.knn.represent`) by 1-NN cosine over all anchors to a domain and that domain's
mask; an input farther than ``threshold`` (cosine distance) from every anchor is
out of distribution and gets the ``fallback`` mask (None: plain decoding).

File format (schema_version 1, one JSON object; anchors inline, a few hundred KB)::

    {"schema_version": 1, "kind": "knn-router",
     "model": {name, num_layers, hidden_size, fingerprint},
     "domains": [{"name": "math", "mask": {...mask file object with provenance...}}, ...],
     "anchors": [[d floats], ...], "anchor_domains": [domain index per anchor],
     "threshold": 0.12 | null, "fallback": {...mask...} | null, "build": {...how it was built...}}

Loading validates everything (like mask files): any problem is one LayersearchError naming the file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.common.modelfile import FileKind, ModelBoundJson, ModelInfo

SCHEMA_VERSION = 1
KIND = "knn-router"
ROUTER_FILE = FileKind(tag=KIND, called="KNN-SSD router", made_for="router was built for", schema_version=SCHEMA_VERSION)
#: Most anchors a file may hold (the paper keeps 10 per cluster): bounds a hostile file's cost.
MAX_ANCHORS = 100_000


@dataclass(frozen=True)
class DomainMask:
    """One domain of the router and the mask searched for it (provenance says where from)."""

    name: str
    mask: SkipMask


@dataclass(frozen=True)
class Route:
    """Where one input went: its domain (None: out of distribution), the cosine distance to its
    nearest anchor, and the mask to draft with (an empty mask means plain decoding)."""

    domain: str | None
    distance: float
    mask: SkipMask

    @property
    def fallback(self) -> bool:
        """True when the input was beyond the threshold."""
        return self.domain is None

    def record(self) -> dict[str, Any]:
        """JSON-ready record for ``stats.selections``."""
        return {"router": "knn", "domain": self.domain, "distance": round(self.distance, 6),
                "fallback": self.fallback, "mask": self.mask.short_string()}


@dataclass(frozen=True, eq=False)  # arrays inside: identity, not element-wise ==
class Router(ModelBoundJson):
    """Per-domain masks, anchors ``[A, d]`` with their domain indices ``[A]``, the OOD threshold."""

    FILE = ROUTER_FILE

    model: ModelInfo
    domains: tuple[DomainMask, ...]
    anchors: np.ndarray
    anchor_domains: np.ndarray
    threshold: float | None = None
    fallback: SkipMask | None = None
    build: Mapping[str, Any] = field(default_factory=dict, compare=False)
    _unit: np.ndarray = field(init=False, repr=False, compare=False)  # [A, d] unit anchors, set in __post_init__

    def __post_init__(self) -> None:
        anchors = np.array(self.anchors, dtype=np.float32)  # a private copy, made read-only below
        labels = np.array(self.anchor_domains, dtype=np.int64)
        _check_domains(self.domains, self.model)
        _check_anchors(anchors, labels, self.model.hidden_size, len(self.domains))
        if self.threshold is not None:
            if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)) or not (
                math.isfinite(self.threshold) and 0 <= self.threshold <= 2
            ):
                raise LayersearchError(f"threshold must be a cosine distance in [0, 2] or null, got {self.threshold!r}")
            object.__setattr__(self, "threshold", float(self.threshold))
        if self.fallback is not None:
            self.fallback.check_model(self.model)
        anchors.flags.writeable = False
        labels.flags.writeable = False
        object.__setattr__(self, "anchors", anchors)
        object.__setattr__(self, "anchor_domains", labels)
        object.__setattr__(self, "build", MappingProxyType(dict(self.build)))
        unit = anchors / np.linalg.norm(anchors, axis=1, keepdims=True)
        unit.flags.writeable = False
        object.__setattr__(self, "_unit", unit)  # [A, d], for cosine routing

    @property
    def domain_names(self) -> tuple[str, ...]:
        """The domains in file order."""
        return tuple(d.name for d in self.domains)

    def mask_of(self, domain: str) -> SkipMask:
        """The mask of ``domain``."""
        for entry in self.domains:
            if entry.name == domain:
                return entry.mask
        raise LayersearchError(f"the router has no domain {domain!r} (it has {', '.join(self.domain_names)})")

    def distances(self, representation: np.ndarray) -> np.ndarray:
        """Cosine distance ``[A]`` from one representation ``[d]`` to every anchor."""
        vector = np.asarray(representation, dtype=np.float64).reshape(-1)
        if vector.shape[0] != self.model.hidden_size:
            raise LayersearchError(f"representation has {vector.shape[0]} values, the router's model {self.model.hidden_size}")
        norm = np.linalg.norm(vector)
        if not np.isfinite(norm) or norm == 0:
            return np.full(len(self._unit), 1.0)  # no direction: as far as an orthogonal vector
        return 1.0 - self._unit.astype(np.float64) @ (vector / norm)

    def route(self, representation: np.ndarray) -> Route:
        """1-NN by cosine over all anchors; beyond ``threshold``: the fallback (or plain decoding)."""
        distances = self.distances(representation)
        nearest = int(distances.argmin())
        distance = float(distances[nearest])
        if self.threshold is not None and distance > self.threshold:
            return Route(None, distance, self.fallback or SkipMask.none(self.model.num_layers, self.model))
        entry = self.domains[int(self.anchor_domains[nearest])]
        return Route(entry.name, distance, entry.mask)

    # ----- JSON -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The file's JSON object."""
        return {
            **self.FILE.header(), "model": self.model.to_dict(),
            "domains": [{"name": d.name, "mask": d.mask.to_dict()} for d in self.domains],
            "anchors": [[float(x) for x in row] for row in self.anchors],
            "anchor_domains": [int(i) for i in self.anchor_domains],
            "threshold": self.threshold,
            "fallback": None if self.fallback is None else self.fallback.to_dict(),
            "build": dict(self.build),
        }

    @classmethod
    def from_dict(cls, data: Any) -> "Router":
        """Parse and validate; raises LayersearchError naming the problem."""
        cls.FILE.check_tag(data)
        cls.FILE.check_version(data)
        missing = [k for k in ("model", "domains", "anchors", "anchor_domains", "threshold") if k not in data]
        if missing:
            raise LayersearchError(f"missing {', '.join(missing)}")
        model = ModelInfo.from_dict(data["model"])
        if not isinstance(data["domains"], list):
            raise LayersearchError("domains must be a list of {name, mask} objects")
        domains = tuple(_domain_from_dict(item, i) for i, item in enumerate(data["domains"]))
        anchors = _anchor_array(data["anchors"], model.hidden_size)
        labels = data["anchor_domains"]
        if not isinstance(labels, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in labels):
            raise LayersearchError("anchor_domains must be a list of domain indices")
        if domains and any(not 0 <= x < len(domains) for x in labels):  # before numpy: 10**25 fits no integer type
            raise LayersearchError(f"anchor_domains must be domain indices 0..{len(domains) - 1}")
        fallback = None if data.get("fallback") is None else _mask(data["fallback"], "fallback")
        build = data.get("build") or {}
        if not isinstance(build, dict):
            raise LayersearchError("build must be an object")
        return cls(model, domains, anchors, np.asarray(labels, dtype=np.int64).reshape(-1), data["threshold"], fallback, build)


def _domain_from_dict(item: Any, index: int) -> DomainMask:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or "mask" not in item:
        raise LayersearchError(f"domains[{index}] must be an object with a name string and a mask")
    return DomainMask(item["name"], _mask(item["mask"], f"domains[{index}] ({item['name']})"))


def _mask(data: Any, where: str) -> SkipMask:
    try:
        return SkipMask.from_dict(data)
    except LayersearchError as exc:
        raise LayersearchError(f"{where}: {exc}") from None


def _anchor_array(rows: Any, hidden: int) -> np.ndarray:
    """The anchors as ``[A, hidden]`` float32, every row a list of ``hidden`` finite numbers."""
    if not isinstance(rows, list) or not rows:
        raise LayersearchError("anchors must be a non-empty list of vectors")
    if len(rows) > MAX_ANCHORS:
        raise LayersearchError(f"{len(rows)} anchors (at most {MAX_ANCHORS})")
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != hidden:
            got = f"{len(row)} values" if isinstance(row, list) else type(row).__name__
            raise LayersearchError(f"anchors[{i}] must be a list of {hidden} numbers (the model's hidden size), got {got}")
        if any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in row):
            raise LayersearchError(f"anchors[{i}] holds a value that is not a number")
    return np.asarray(rows, dtype=np.float32)


def _check_domains(domains: tuple[DomainMask, ...], model: ModelInfo) -> None:
    if not domains:
        raise LayersearchError("a router needs at least one domain")
    names = [d.name for d in domains]
    if any(not n.strip() for n in names):
        raise LayersearchError("domain names must not be empty")
    if len(set(names)) != len(names):
        raise LayersearchError(f"duplicate domain names: {', '.join(sorted(n for n in set(names) if names.count(n) > 1))}")
    for d in domains:
        try:
            d.mask.check_model(model)
        except LayersearchError as exc:
            raise LayersearchError(f"domain {d.name!r}: {exc}") from None


def _check_anchors(anchors: np.ndarray, labels: np.ndarray, hidden: int, num_domains: int) -> None:
    if anchors.ndim != 2 or anchors.shape[0] == 0 or anchors.shape[1] != hidden:
        raise LayersearchError(f"anchors must be [count, {hidden}] (the model's hidden size), got shape {anchors.shape}")
    if not np.isfinite(anchors).all():
        raise LayersearchError("anchors hold NaN or infinite values")
    if (np.linalg.norm(anchors, axis=1) == 0).any():
        raise LayersearchError("an anchor is the zero vector (it has no direction for cosine routing)")
    if labels.shape != (anchors.shape[0],):
        raise LayersearchError(f"anchor_domains has {labels.size} entries for {anchors.shape[0]} anchors")
    if labels.size and (labels.min() < 0 or labels.max() >= num_domains):
        raise LayersearchError(f"anchor_domains must be domain indices 0..{num_domains - 1}")
    orphans = sorted(set(range(num_domains)) - set(labels.tolist()))
    if orphans:
        raise LayersearchError(f"domain(s) {orphans} have no anchor")
