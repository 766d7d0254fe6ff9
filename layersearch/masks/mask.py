"""SkipMask: the draft plan, what the draft does with each attention and MLP sub-layer, and its file.

A plan gives every sub-layer of a model with ``num_layers`` decoder layers one of three
precisions: **skip** (the residual passes through), **int8** (a low-precision twin of its
Linears: weights int8 per output channel, activations int8 per token) or **full** (the
target's own weights, the default); and the LM head full or int8. A *skip mask* is the plan
with only full and skip, which is what every paper's search produces. The value is immutable
and knows nothing of torch; the runtime applies it (``layersearch.models.skipping``).

File format (schema_version 2; version 1 files, which have no ``int8`` key, stay valid, and a
plan without int8 sub-layers is still written as version 1)::

    {"schema_version": 2,
     "model": {"name": ..., "num_layers": ..., "hidden_size": ..., "fingerprint": ...},
     "num_layers": L, "attention": [...], "mlp": [...],
     "int8": {"attention": [...], "mlp": [...], "head": false},
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

from layersearch.common.checks import check_fraction, check_int
from layersearch.common.errors import LayersearchError
from layersearch.common.jsonfile import check_kind
from layersearch.common.modelfile import FileKind, ModelBoundJson, ModelInfo

SCHEMA_VERSION = 2
#: Versions a mask file may declare: 1 (skip masks) and 2 (plans with int8 sub-layers).
READ_VERSIONS = (1, 2)
#: The precisions a plan gives a sub-layer.
PRECISIONS = ("full", "int8", "skip")
#: Most decoder layers a mask may describe: far beyond any real model, small enough that a
#: hostile file cannot make drawing or checking a mask take unbounded time or memory.
MAX_LAYERS = 4096
#: The keys of a mask file's object; any other is refused (a misspelt section is no empty one).
FILE_KEYS = ("schema_version", "model", "num_layers", "attention", "mlp", "int8", "provenance")
PROVENANCE_KEYS = ("strategy", "objective", "score", "study", "trial", "created")
MASK_FILE = FileKind(tag=None, called="mask", made_for="mask was made for", schema_version=SCHEMA_VERSION)
SKIP_ONLY_FILE = FileKind(tag=None, called="mask", made_for="mask was made for", schema_version=1)


@dataclass(frozen=True)
class SkipMask(ModelBoundJson):
    """A draft plan for a decoder with ``num_layers`` layers: skipped and int8 sub-layers
    (0-based layer indices, sorted, unique, disjoint) and whether the LM head runs in int8;
    every other sub-layer runs at full precision."""

    FILE = MASK_FILE

    num_layers: int
    attention: tuple[int, ...] = ()
    mlp: tuple[int, ...] = ()
    model: ModelInfo | None = None
    provenance: Mapping[str, Any] = field(default_factory=dict, compare=False)
    int8_attention: tuple[int, ...] = ()
    int8_mlp: tuple[int, ...] = ()
    int8_head: bool = False

    def __post_init__(self) -> None:
        _require_int(self.num_layers, "num_layers", minimum=1)
        if self.num_layers > MAX_LAYERS:
            raise LayersearchError(f"num_layers {self.num_layers} is beyond any model (at most {MAX_LAYERS})")
        object.__setattr__(self, "attention", _checked_indices(self.attention, self.num_layers, "attention"))
        object.__setattr__(self, "mlp", _checked_indices(self.mlp, self.num_layers, "mlp"))
        for kind in ("attention", "mlp"):
            int8 = _checked_indices(getattr(self, f"int8_{kind}"), self.num_layers, f"int8 {kind}")
            both = sorted(set(int8) & set(getattr(self, kind)))
            if both:
                raise LayersearchError(f"{kind} sub-layer {both[0]} is both skipped and int8: a sub-layer has one precision")
            object.__setattr__(self, f"int8_{kind}", int8)
        if self.model is not None and not isinstance(self.model, ModelInfo):
            raise LayersearchError(f"model must be a ModelInfo or None, got {type(self.model).__name__}")
        if not isinstance(self.provenance, Mapping):
            raise LayersearchError(f"provenance must be a mapping, got {type(self.provenance).__name__}")
        if not isinstance(self.int8_head, bool):
            raise LayersearchError(f"int8 head must be true or false, got {self.int8_head!r}")
        if self.model is not None and self.model.num_layers != self.num_layers:
            raise LayersearchError(
                f"num_layers is {self.num_layers} but model.num_layers (the layers of {self.model.name!r} the plan "
                f"was made for) is {self.model.num_layers}: one of the two was edited"
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
        _require_int(num_layers, "num_layers", minimum=1)
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
        _require_int(num_layers, "num_layers", minimum=1)
        count = int(round(ratio * 2 * num_layers))
        attention = _spread(count - count // 2, num_layers)
        mlp = _spread(count // 2, num_layers)
        return cls(num_layers, attention, mlp, model)

    @classmethod
    def from_flat(cls, flat: Sequence[bool | int], model: ModelInfo | None = None, **kw: Any) -> "SkipMask":
        """Build from an interleaved 2L vector (index 2i: attention i, 2i+1: MLP i; truthy = skip)."""
        if isinstance(flat, (str, bytes)) or not isinstance(flat, Sequence):
            raise LayersearchError(f"a flat mask must be a list of 2 x layers flags, got {type(flat).__name__}")
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
    def num_int8(self) -> int:
        """Number of sub-layers that run in int8."""
        return len(self.int8_attention) + len(self.int8_mlp)

    @property
    def has_int8(self) -> bool:
        """True when any sub-layer or the head runs in int8 (the draft needs the int8 twins)."""
        return bool(self.num_int8 or self.int8_head)

    @property
    def is_empty(self) -> bool:
        """True when the plan changes nothing (the draft would equal the target)."""
        return self.num_skipped == 0 and not self.has_int8

    @property
    def is_skip_only(self) -> bool:
        """True for a skip mask: every sub-layer full or skipped, the head full."""
        return not self.has_int8

    def precision(self, kind: str, layer: int) -> str:
        """``"full"``, ``"int8"`` or ``"skip"`` for sub-layer ``kind`` (attention/mlp) of ``layer``."""
        if layer in getattr(self, kind):
            return "skip"
        return "int8" if layer in getattr(self, f"int8_{kind}") else "full"

    def short_string(self) -> str:
        """Compact readable form, e.g. ``A:3,7,11 M:14`` for a skip mask, with ``int8 A:0-2 M:- H``
        after it for a plan (used in study user_attrs and table labels)."""
        text = f"A:{_ranges(self.attention)} M:{_ranges(self.mlp)}"
        if not self.has_int8:
            return text
        return f"{text} int8 A:{_ranges(self.int8_attention)} M:{_ranges(self.int8_mlp)}" + (" H" if self.int8_head else "")

    def _copy(self, **changes: Any) -> "SkipMask":
        values = {f: getattr(self, f) for f in ("num_layers", "attention", "mlp", "model", "provenance",
                                                  "int8_attention", "int8_mlp", "int8_head")}
        return SkipMask(**{**values, **changes})

    def with_provenance(self, **provenance: Any) -> "SkipMask":
        """A copy with provenance fields set (unknown keys are kept as given)."""
        return self._copy(provenance={**self.provenance, **provenance})

    def with_model(self, model: ModelInfo) -> "SkipMask":
        """A copy bound to ``model`` (checks the layer count)."""
        return self._copy(model=model)

    def with_int8(self, attention: Iterable[int], mlp: Iterable[int], head: bool) -> "SkipMask":
        """The same skips with these sub-layers (and the head, if ``head``) in int8."""
        return self._copy(int8_attention=attention, int8_mlp=mlp, int8_head=head)  # checked by the constructor

    def kept_in_int8(self, head: bool = True) -> "SkipMask":
        """The plan that runs every sub-layer this one does not skip in int8 (``--draft-quant int8``
        on a self-draft), and the head in int8 when ``head``."""
        keep_attention = [i for i in range(self.num_layers) if i not in self.attention]
        keep_mlp = [i for i in range(self.num_layers) if i not in self.mlp]
        return self.with_int8(keep_attention, keep_mlp, head or self.int8_head)

    def skips_only(self) -> "SkipMask":
        """This plan's skip mask: its int8 sub-layers back at full precision."""
        return self._copy(int8_attention=(), int8_mlp=(), int8_head=False)

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
        """The JSON object of the mask file (version 1 for a skip mask, 2 for a plan with int8)."""
        provenance = {key: self.provenance.get(key) for key in PROVENANCE_KEYS}
        provenance.update({k: v for k, v in self.provenance.items() if k not in provenance})
        data = {
            **(SKIP_ONLY_FILE if self.is_skip_only else self.FILE).header(),
            "model": self.model.to_dict() if self.model else None,
            "num_layers": self.num_layers,
            "attention": list(self.attention),
            "mlp": list(self.mlp),
        }
        if not self.is_skip_only:
            data["int8"] = {"attention": list(self.int8_attention), "mlp": list(self.int8_mlp), "head": self.int8_head}
        return {**data, "provenance": provenance}

    @classmethod
    def from_dict(cls, data: Any) -> "SkipMask":
        """Parse and validate a mask file's JSON object; raises LayersearchError naming the problem."""
        check_kind(data, "a mask file")
        if not isinstance(data, dict):
            raise LayersearchError("mask file must hold a JSON object")
        version = data.get("schema_version")
        if isinstance(version, bool) or version not in READ_VERSIONS:
            raise LayersearchError(f"unsupported schema_version {version!r} (expected {' or '.join(map(str, READ_VERSIONS))})")
        unknown = [key for key in data if key not in FILE_KEYS]
        if unknown:  # a misspelt section (INT8, precision) must not quietly run as all full precision
            raise LayersearchError(f"unknown key {unknown[0]!r} (a plan holds {', '.join(FILE_KEYS)})")
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
        int8 = _int8_section(data, version)
        return cls(data["num_layers"], tuple(data["attention"]), tuple(data["mlp"]), model, provenance,
                   tuple(int8["attention"]), tuple(int8["mlp"]), int8["head"])


def _int8_section(data: dict[str, Any], version: int) -> dict[str, Any]:
    """The file's ``int8`` object (version 2 only), checked; empty for a skip mask."""
    section = data.get("int8")
    if section is None:
        return {"attention": [], "mlp": [], "head": False}
    if version < 2:
        raise LayersearchError("int8 sub-layers need schema_version 2 (this file declares 1)")
    if not isinstance(section, dict):
        raise LayersearchError("int8 must be an object with attention, mlp and head")
    unknown = sorted(set(section) - {"attention", "mlp", "head"})
    if unknown:
        raise LayersearchError(f"int8 has an unknown key {unknown[0]!r} (expected attention, mlp, head)")
    for key in ("attention", "mlp"):
        if not isinstance(section.get(key, []), list):
            raise LayersearchError(f"int8.{key} must be a list of layer indices")
    return {"attention": section.get("attention", []), "mlp": section.get("mlp", []), "head": section.get("head", False)}


def _ranges(indices: tuple[int, ...]) -> str:
    """``(0, 1, 2, 5)`` -> ``"0-2,5"`` (``"-"`` when empty): long int8 sets stay readable."""
    if not indices:
        return "-"
    parts: list[str] = []
    start = prev = indices[0]
    for index in (*indices[1:], None):
        if index is not None and index == prev + 1:
            prev = index
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}" if prev > start + 1 else f"{start},{prev}")
        if index is not None:
            start = prev = index
    return ",".join(parts)


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
    if isinstance(indices, (str, bytes, Mapping)) or not isinstance(indices, Iterable):
        raise LayersearchError(f"{what} must be a list of layer indices, got {type(indices).__name__}")
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


def render_mask(mask: SkipMask) -> str:
    """``mask show``'s text drawing: one column per layer, rows for attention and MLP (x = skipped, 8 = int8)."""
    width = len(str(mask.num_layers - 1))
    header = " ".join(str(i).rjust(width) for i in range(mask.num_layers))
    marks = {"skip": "x", "int8": "8", "full": "."}

    def row(kind: str) -> str:
        return " ".join(marks[mask.precision(kind, i)].rjust(width) for i in range(mask.num_layers))

    model = mask.model.name if mask.model else "unknown model"
    summary = f"{mask.num_skipped} of {2 * mask.num_layers} sub-layers skipped (ratio {mask.skip_ratio:.2f})"
    if mask.has_int8:
        summary += f", {mask.num_int8} int8, LM head {'int8' if mask.int8_head else 'full'}"
    lines = [
        f"{model}: {mask.num_layers} layers, {summary}",
        f"layer {header}",
        f"attn  {row('attention')}",
        f"mlp   {row('mlp')}",
        "x = skipped, 8 = int8, . = full" if mask.has_int8 else "x = skipped, . = kept",
    ]
    strategy = mask.provenance.get("strategy")
    if strategy:
        lines.append(f"provenance: strategy={strategy} objective={mask.provenance.get('objective')} "
                     f"score={mask.provenance.get('score')} study={mask.provenance.get('study')} "
                     f"trial={mask.provenance.get('trial')}")
    return "\n".join(lines)
