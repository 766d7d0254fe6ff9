"""SkipMask: which attention and MLP sub-layers the draft model skips, and its JSON file.

A mask is an immutable value: 0-based layer indices of skipped attention sub-layers and
skipped MLP sub-layers of a model with ``num_layers`` decoder layers. It knows nothing of
torch; the runtime applies it (see ``layersearch.models.skipping``).

File format (schema_version 1)::

    {"schema_version": 1,
     "model": {"name": ..., "num_layers": ..., "hidden_size": ..., "fingerprint": ...},
     "num_layers": L, "attention": [...], "mlp": [...],
     "provenance": {"strategy": ..., "objective": ..., "score": ..., "study": ...,
                    "trial": ..., "created": ...}}

Other tools' conventions convert through :meth:`SkipMask.from_flat` (KnapSpec's
interleaved 2L vector: attention at 2i, MLP at 2i+1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

from layersearch.checks import check_fraction, check_int
from layersearch.errors import LayersearchError
from layersearch.jsonfile import check_kind
from layersearch.modelfile import FileKind, ModelBoundJson, ModelInfo

SCHEMA_VERSION = 1
#: Most decoder layers a mask may describe: far beyond any real model, small enough that a
#: hostile file cannot make drawing or checking a mask take unbounded time or memory.
MAX_LAYERS = 4096
PROVENANCE_KEYS = ("strategy", "objective", "score", "study", "trial", "created")
MASK_FILE = FileKind(tag=None, called="mask", made_for="mask was made for", schema_version=SCHEMA_VERSION)


@dataclass(frozen=True)
class SkipMask(ModelBoundJson):
    """Skipped sub-layers of a decoder with ``num_layers`` layers (0-based, sorted, unique)."""

    FILE = MASK_FILE

    num_layers: int
    attention: tuple[int, ...] = ()
    mlp: tuple[int, ...] = ()
    model: ModelInfo | None = None
    provenance: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        _require_int(self.num_layers, "num_layers", minimum=1)
        if self.num_layers > MAX_LAYERS:
            raise LayersearchError(f"num_layers {self.num_layers} is beyond any model (at most {MAX_LAYERS})")
        object.__setattr__(self, "attention", _checked_indices(self.attention, self.num_layers, "attention"))
        object.__setattr__(self, "mlp", _checked_indices(self.mlp, self.num_layers, "mlp"))
        if self.model is not None and self.model.num_layers != self.num_layers:
            raise LayersearchError(
                f"num_layers is {self.num_layers} but the model {self.model.name!r} has {self.model.num_layers} layers"
            )
        # Read-only view so the value stays immutable across module boundaries.
        object.__setattr__(self, "provenance", MappingProxyType(dict(self.provenance)))

    # ----- constructors -----------------------------------------------------------------
    @classmethod
    def none(cls, num_layers: int, model: ModelInfo | None = None) -> "SkipMask":
        """A mask that skips nothing: the draft is the full model."""
        return cls(num_layers, (), (), model)

    @classmethod
    def everything(cls, num_layers: int, model: ModelInfo | None = None) -> "SkipMask":
        """A mask that skips every sub-layer: the draft is embedding + LM head."""
        every = tuple(range(num_layers))
        return cls(num_layers, every, every, model)

    @classmethod
    def uniform(cls, num_layers: int, ratio: float, model: ModelInfo | None = None) -> "SkipMask":
        """Evenly spread mask skipping ``round(ratio * 2L)`` of the 2L sub-layers.

        Attention and MLP sub-layers each take half of the count (attention the odd one),
        spread evenly over the depth; equal counts skip whole layers, the uniform
        layer-skipping pattern of SWIFT's Figure 2.
        """
        check_fraction(ratio, "skip ratio")
        count = int(round(ratio * 2 * num_layers))
        attention = _spread(count - count // 2, num_layers)
        mlp = _spread(count // 2, num_layers)
        return cls(num_layers, attention, mlp, model)

    @classmethod
    def from_flat(cls, flat: Sequence[bool | int], model: ModelInfo | None = None, **kw: Any) -> "SkipMask":
        """Build from an interleaved 2L vector (index 2i: attention i, 2i+1: MLP i; truthy = skip)."""
        if len(flat) % 2 or not flat:
            raise LayersearchError(f"a flat mask needs an even, non-zero length (2 x layers), got {len(flat)}")
        attention = tuple(i for i in range(len(flat) // 2) if flat[2 * i])
        mlp = tuple(i for i in range(len(flat) // 2) if flat[2 * i + 1])
        return cls(len(flat) // 2, attention, mlp, model, **kw)

    # ----- views ------------------------------------------------------------------------
    def to_flat(self) -> tuple[bool, ...]:
        """Interleaved 2L vector (attention at 2i, MLP at 2i+1), True = skipped."""
        flat = [False] * (2 * self.num_layers)
        for i in self.attention:
            flat[2 * i] = True
        for i in self.mlp:
            flat[2 * i + 1] = True
        return tuple(flat)

    @property
    def num_skipped(self) -> int:
        """Number of skipped sub-layers."""
        return len(self.attention) + len(self.mlp)

    @property
    def skip_ratio(self) -> float:
        """Share of the 2L sub-layers that are skipped."""
        return self.num_skipped / (2 * self.num_layers)

    @property
    def is_empty(self) -> bool:
        """True when nothing is skipped (the draft equals the target)."""
        return self.num_skipped == 0

    def short_string(self) -> str:
        """Compact readable form, e.g. ``A:3,7,11 M:14`` (used in study user_attrs)."""
        attn = ",".join(map(str, self.attention)) or "-"
        mlp = ",".join(map(str, self.mlp)) or "-"
        return f"A:{attn} M:{mlp}"

    def with_provenance(self, **provenance: Any) -> "SkipMask":
        """A copy with provenance fields set (unknown keys are kept as given)."""
        merged = {**self.provenance, **provenance}
        return SkipMask(self.num_layers, self.attention, self.mlp, self.model, merged)

    def with_model(self, model: ModelInfo) -> "SkipMask":
        """A copy bound to ``model`` (checks the layer count)."""
        return SkipMask(self.num_layers, self.attention, self.mlp, model, self.provenance)

    def check_model(self, model: ModelInfo) -> None:
        """Raise if this mask was made for another model than ``model``."""
        if self.num_layers != model.num_layers:
            raise LayersearchError(
                f"mask is for {self.num_layers} layers but model {model.name!r} has {model.num_layers}"
            )
        if self.model is not None:  # an unbound mask fits any model of its depth
            self.FILE.check_model(self.model, model)

    # ----- JSON -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the mask file."""
        provenance = {key: self.provenance.get(key) for key in PROVENANCE_KEYS}
        provenance.update({k: v for k, v in self.provenance.items() if k not in provenance})
        return {
            **self.FILE.header(),
            "model": self.model.to_dict() if self.model else None,
            "num_layers": self.num_layers,
            "attention": list(self.attention),
            "mlp": list(self.mlp),
            "provenance": provenance,
        }

    @classmethod
    def from_dict(cls, data: Any) -> "SkipMask":
        """Parse and validate a mask file's JSON object; raises LayersearchError naming the problem."""
        check_kind(data, "a mask file")
        if not isinstance(data, dict):
            raise LayersearchError("mask file must hold a JSON object")
        cls.FILE.check_version(data)
        for key in ("num_layers", "attention", "mlp"):
            if key not in data:
                raise LayersearchError(f"mask file is missing {key!r}")
        model = None if data.get("model") is None else ModelInfo.from_dict(data["model"])
        provenance = data.get("provenance") or {}
        if not isinstance(provenance, dict):
            raise LayersearchError("provenance must be an object")
        for key in ("attention", "mlp"):
            if not isinstance(data[key], list):
                raise LayersearchError(f"{key} must be a list of layer indices")
        return cls(data["num_layers"], tuple(data["attention"]), tuple(data["mlp"]), model, provenance)


def parse_index_list(text: str, what: str) -> tuple[int, ...]:
    """Parse ``"3,7,11"`` (or empty) into layer indices; raises LayersearchError on junk."""
    text = text.strip()
    if not text:
        return ()
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise LayersearchError(f"--{what} must be comma-separated integers, got {text!r}") from None


def _spread(count: int, length: int) -> tuple[int, ...]:
    """``count`` indices spread evenly over ``range(length)``, centred in their strides."""
    return tuple(int(math.floor((i + 0.5) * length / count)) for i in range(count))


def _require_int(value: Any, what: str, minimum: int = 0) -> None:
    check_int(value, what, minimum=minimum)


def _checked_indices(indices: Iterable[Any], num_layers: int, what: str) -> tuple[int, ...]:
    values = tuple(indices)
    if len(values) > num_layers:  # more indices than layers: some repeat, found below without scanning all
        values = values[: num_layers + 1]
    for index in values:
        if isinstance(index, bool) or not isinstance(index, int):
            raise LayersearchError(f"{what}: layer index {index!r} is not an integer")
        if not 0 <= index < num_layers:
            raise LayersearchError(f"{what}: layer index {index} out of range 0..{num_layers - 1}")
    seen: set[int] = set()
    for index in values:  # linear: a long list must not cost quadratic time
        if index in seen:
            raise LayersearchError(f"{what}: duplicate layer index {index}")
        seen.add(index)
    return tuple(sorted(values))
