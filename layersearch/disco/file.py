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
from types import MappingProxyType
from typing import Any, Mapping

from layersearch.common.checks import check_draft_length, check_real
from layersearch.disco.classifier import Classifier
from layersearch.disco.features import FEATURE_SPEC, check_spec
from layersearch.disco.lookahead import DiscoLookahead
from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.common.modelfile import FileKind, ModelBoundJson, ModelInfo

SCHEMA_VERSION = 1
KIND = "disco-classifier"
DISCO_FILE = FileKind(tag=KIND, called="DISCO classifier", made_for="classifier was trained for", schema_version=SCHEMA_VERSION)


@dataclass(frozen=True)
class DiscoFile(ModelBoundJson):
    """A trained, tuned DISCO rule for one model and mask."""

    FILE = DISCO_FILE

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

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON object."""
        return {
            **self.FILE.header(), "model": self.model.to_dict(),
            "mask": self.mask.to_dict(), "features": dict(FEATURE_SPEC), "classifier": self.classifier.to_dict(),
            "tau": self.tau, "sl_max": self.sl_max, "training": dict(self.training),
        }

    @classmethod
    def from_dict(cls, data: Any) -> "DiscoFile":
        """Parse and validate; raises LayersearchError naming the problem."""
        cls.FILE.check_tag(data)
        cls.FILE.check_version(data)
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
