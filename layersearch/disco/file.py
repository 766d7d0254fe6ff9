"""The DISCO file: the classifier, its feature spec, the model and mask it was trained for,
and the tuned tau / SL_max, as one JSON object (schema_version 1)::

    {"schema_version": 1, "kind": "disco-classifier",
     "model": {name, num_layers, hidden_size, fingerprint}, "mask": {...mask file object...},
     "features": {"top_k": 10, "entropy": true, "position": "log1p"},
     "classifier": {"mean", "scale", "w1", "b1", "w2", "b2"},
     "tau": 0.5, "sl_max": 6, "training": {...how it was trained and tuned...}}

Loading validates everything and, given the model, its fingerprint: any problem is one
LayersearchError naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from layersearch.checks import check_draft_length, check_real
from layersearch.disco.classifier import Classifier
from layersearch.disco.features import FEATURE_SPEC, check_spec
from layersearch.disco.lookahead import DiscoLookahead
from layersearch.errors import LayersearchError
from layersearch.jsonfile import read_json_file, write_json_atomic
from layersearch.mask import ModelInfo, SkipMask

SCHEMA_VERSION = 1
KIND = "disco-classifier"


@dataclass(frozen=True)
class DiscoFile:
    """A trained, tuned DISCO rule for one model and mask."""

    model: ModelInfo
    mask: SkipMask
    classifier: Classifier
    tau: float
    sl_max: int
    training: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        self.lookahead()  # validates tau and sl_max
        object.__setattr__(self, "training", MappingProxyType(dict(self.training)))

    def lookahead(self) -> DiscoLookahead:
        """The lookahead rule this file describes."""
        return DiscoLookahead(self.classifier, self.tau, self.sl_max)

    def check_model(self, model: ModelInfo) -> None:
        """Raise unless the file was trained for ``model``."""
        if self.model.fingerprint != model.fingerprint or self.model.num_layers != model.num_layers:
            raise LayersearchError(
                f"classifier was trained for model {self.model.name!r} (fingerprint {self.model.fingerprint}), "
                f"not {model.name!r} (fingerprint {model.fingerprint})"
            )

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON object."""
        return {
            "schema_version": SCHEMA_VERSION, "kind": KIND, "model": self.model.to_dict(),
            "mask": self.mask.to_dict(), "features": dict(FEATURE_SPEC), "classifier": self.classifier.to_dict(),
            "tau": self.tau, "sl_max": self.sl_max, "training": dict(self.training),
        }

    @classmethod
    def from_dict(cls, data: Any) -> "DiscoFile":
        """Parse and validate; raises LayersearchError naming the problem."""
        if not isinstance(data, dict) or data.get("kind") != KIND:
            raise LayersearchError(f"not a DISCO classifier file (expected \"kind\": \"{KIND}\")")
        if data.get("schema_version") != SCHEMA_VERSION:
            raise LayersearchError(f"unsupported schema_version {data.get('schema_version')!r} (expected {SCHEMA_VERSION})")
        missing = [k for k in ("model", "mask", "features", "classifier", "tau", "sl_max") if k not in data]
        if missing:
            raise LayersearchError(f"missing {', '.join(missing)}")
        try:
            check_spec(data["features"])
        except ValueError as exc:
            raise LayersearchError(str(exc)) from None
        model = ModelInfo.from_dict(data["model"])
        mask = SkipMask.from_dict(data["mask"])
        mask.check_model(model)
        tau = check_real(data["tau"], "tau", low=0.0, high=1.0)
        sl_max = check_draft_length(data["sl_max"], "sl_max")
        training = data.get("training") or {}
        if not isinstance(training, dict):
            raise LayersearchError("training must be an object")
        return cls(model, mask, Classifier.from_dict(data["classifier"]), tau, sl_max, training)

    def save(self, path: str | Path) -> Path:
        """Write atomically (never a partial file)."""
        return write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path, model: ModelInfo | None = None) -> "DiscoFile":
        """Read and validate a DISCO file; with ``model``, check it was trained for that model."""
        data = read_json_file(path, "DISCO classifier")
        try:
            loaded = cls.from_dict(data)
            if model is not None:
                loaded.check_model(model)
        except LayersearchError as exc:
            raise LayersearchError(f"{path}: {exc}") from None
        return loaded
