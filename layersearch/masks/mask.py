"""SkipMask: the draft plan, what the draft does with each attention and MLP sub-layer, and its file.

A plan gives every sub-layer of a model with ``num_layers`` decoder layers one of four
precisions: **skip** (the residual passes through), **int8** (a low-precision twin of its
Linears: weights int8 per output channel, activations int8 per token), **int4** (weight-only
int4 twins, one scale and zero per group of ``int4_group_size`` input columns:
:mod:`layersearch.models.int4`) or **full** (the target's own weights, the default); and the
LM head full, int8 or int4. A *skip mask* is the plan
with only full and skip, which is what every paper's search produces. The value is immutable
and knows nothing of torch; the runtime applies it (``layersearch.models.skipping``).

File format (schema_version 3; a plan is written with the oldest version that holds it: 1 for
a skip mask, 2 with int8 parts, 3 with int4 parts, so older readers keep reading what they can
run; a file of a version newer than this reader knows is refused, naming it)::

    {"schema_version": 3,
     "model": {"name": ..., "num_layers": ..., "hidden_size": ..., "fingerprint": ...},
     "num_layers": L, "attention": [...], "mlp": [...],
     "int8": {"attention": [...], "mlp": [...], "head": false},
     "int4": {"attention": [...], "mlp": [...], "head": false, "group_size": 128},
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

from layersearch.common.checks import check_finite, check_fraction, check_int, check_int_choice, check_schema_version
from layersearch.common.errors import LayersearchError
from layersearch.common.jsonfile import check_kind
from layersearch.common.modelfile import FileKind, ModelBoundJson, ModelInfo

SCHEMA_VERSION = 3
#: Versions a mask file may declare: 1 (skip masks), 2 (plans with int8 parts), 3 (int4 parts).
READ_VERSIONS = (1, 2, 3)
#: The precisions a plan gives a sub-layer.
PRECISIONS = ("full", "int8", "int4", "skip")
#: The precisions that run a low-bit twin (each with ``<name>_attention``, ``_mlp``, ``_head`` fields).
QUANTIZED = ("int8", "int4")
#: int4 group sizes (input columns sharing one scale and zero); 128 is the default.
INT4_GROUP_SIZES = (32, 64, 128, 256)
#: The file version that first holds each low-bit precision's section.
_SECTION_VERSION = {"int8": 2, "int4": 3}
#: Most decoder layers a mask may describe: far beyond any real model, small enough that a
#: hostile file cannot make drawing or checking a mask take unbounded time or memory.
MAX_LAYERS = 4096
#: The keys of a mask file's object; any other is refused (a misspelt section is no empty one).
FILE_KEYS = ("schema_version", "model", "num_layers", "attention", "mlp", "int8", "int4", "provenance")
PROVENANCE_KEYS = ("strategy", "objective", "score", "study", "trial", "created")
MASK_FILE = FileKind(tag=None, called="mask", made_for="mask was made for", schema_version=SCHEMA_VERSION)
SKIP_ONLY_FILE = FileKind(tag=None, called="mask", made_for="mask was made for", schema_version=1)
INT8_FILE = FileKind(tag=None, called="mask", made_for="mask was made for", schema_version=2)


@dataclass(frozen=True)
class SkipMask(ModelBoundJson):
    """A draft plan for a decoder with ``num_layers`` layers: skipped, int8 and int4 sub-layers
    (0-based layer indices, sorted, unique, disjoint) and whether the LM head runs in int8 or
    int4; every other sub-layer runs at full precision."""

    FILE = MASK_FILE

    num_layers: int
    attention: tuple[int, ...] = ()
    mlp: tuple[int, ...] = ()
    model: ModelInfo | None = None
    provenance: Mapping[str, Any] = field(default_factory=dict, compare=False)
    int8_attention: tuple[int, ...] = ()
    int8_mlp: tuple[int, ...] = ()
    int8_head: bool = False
    int4_attention: tuple[int, ...] = ()
    int4_mlp: tuple[int, ...] = ()
    int4_head: bool = False
    int4_group_size: int = 128

    def __post_init__(self) -> None:
        _require_int(self.num_layers, "num_layers", minimum=1)
        if self.num_layers > MAX_LAYERS:
            raise LayersearchError(f"num_layers {self.num_layers} is beyond any model (at most {MAX_LAYERS})")
        object.__setattr__(self, "attention", _checked_indices(self.attention, self.num_layers, "attention"))
        object.__setattr__(self, "mlp", _checked_indices(self.mlp, self.num_layers, "mlp"))
        for kind in ("attention", "mlp"):
            taken = {index: "skipped" for index in getattr(self, kind)}
            for quant in QUANTIZED:
                indices = _checked_indices(getattr(self, f"{quant}_{kind}"), self.num_layers, f"{quant} {kind}")
                both = [index for index in indices if index in taken]
                if both:
                    raise LayersearchError(f"{kind} sub-layer {both[0]} is both {taken[both[0]]} and {quant}: "
                                           "a sub-layer has one precision")
                taken.update({index: quant for index in indices})
                object.__setattr__(self, f"{quant}_{kind}", indices)
        if self.model is not None and not isinstance(self.model, ModelInfo):
            raise LayersearchError(f"model must be a ModelInfo or None, got {type(self.model).__name__}")
        if not isinstance(self.provenance, Mapping):
            raise LayersearchError(f"provenance must be a mapping, got {type(self.provenance).__name__}")
        _check_provenance_numbers(self.provenance)
        for quant in QUANTIZED:
            if not isinstance(getattr(self, f"{quant}_head"), bool):
                raise LayersearchError(f"{quant} head must be true or false, got {getattr(self, f'{quant}_head')!r}")
        if self.int8_head and self.int4_head:
            raise LayersearchError("the LM head is both int8 and int4: it has one precision")
        check_int_choice(self.int4_group_size, INT4_GROUP_SIZES, "int4 group_size")  # 64.0 is no group size
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
    def num_int4(self) -> int:
        """Number of sub-layers that run in int4."""
        return len(self.int4_attention) + len(self.int4_mlp)

    @property
    def has_int4(self) -> bool:
        """True when any sub-layer or the head runs in int4 (the draft needs the int4 twins)."""
        return bool(self.num_int4 or self.int4_head)

    @property
    def is_empty(self) -> bool:
        """True when the plan changes nothing (the draft would equal the target)."""
        return self.num_skipped == 0 and self.is_skip_only

    @property
    def is_skip_only(self) -> bool:
        """True for a skip mask: every sub-layer full or skipped, the head full."""
        return not (self.has_int8 or self.has_int4)

    @property
    def head_precision(self) -> str:
        """``"full"``, ``"int8"`` or ``"int4"``: how the draft's LM head runs."""
        return next((quant for quant in QUANTIZED if getattr(self, f"{quant}_head")), "full")

    def low_bit_parts(self) -> str:
        """The low-bit parts in words: ``int8 parts (attention 0,1,2, mlp 5, the LM head)``, then
        the int4 parts the same way ("" for a skip mask)."""
        texts = []
        for quant in QUANTIZED:
            parts = [f"{kind} {','.join(map(str, self.quantized(quant, kind)))}" for kind in ("attention", "mlp")
                     if self.quantized(quant, kind)]
            parts += ["the LM head"] if getattr(self, f"{quant}_head") else []
            if parts:
                texts.append(f"{quant} parts ({', '.join(parts)})")
        return " and ".join(texts)

    def quantized(self, quant: str, kind: str) -> tuple[int, ...]:
        """The layers whose ``kind`` (attention/mlp) sub-layer runs in ``quant`` (int8/int4)."""
        return tuple(getattr(self, f"{quant}_{kind}"))

    def precision(self, kind: str, layer: int) -> str:
        """``"full"``, ``"int8"``, ``"int4"`` or ``"skip"`` for sub-layer ``kind`` (attention/mlp) of ``layer``."""
        if layer in getattr(self, kind):
            return "skip"
        return next((quant for quant in QUANTIZED if layer in getattr(self, f"{quant}_{kind}")), "full")

    def short_string(self) -> str:
        """Compact readable form, e.g. ``A:3,7,11 M:14`` for a skip mask, with ``int8 A:0-2 M:- H``
        (and ``int4 A:.. M:.. g128``) after it for a plan (used in study user_attrs and table labels)."""
        text = f"A:{_ranges(self.attention)} M:{_ranges(self.mlp)}"
        if self.has_int8:
            text += f" int8 A:{_ranges(self.int8_attention)} M:{_ranges(self.int8_mlp)}" + (" H" if self.int8_head else "")
        if self.has_int4:
            text += (f" int4 A:{_ranges(self.int4_attention)} M:{_ranges(self.int4_mlp)}"
                     + (" H" if self.int4_head else "") + (f" g{self.int4_group_size}" if self.int4_group_size != 128 else ""))
        return text

    def _copy(self, **changes: Any) -> "SkipMask":
        values = {f: getattr(self, f) for f in ("num_layers", "attention", "mlp", "model", "provenance",
                                                  "int8_attention", "int8_mlp", "int8_head",
                                                  "int4_attention", "int4_mlp", "int4_head", "int4_group_size")}
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

    def with_int4(self, attention: Iterable[int], mlp: Iterable[int], head: bool) -> "SkipMask":
        """The same skips with these sub-layers (and the head, if ``head``) in int4."""
        return self._copy(int4_attention=attention, int4_mlp=mlp, int4_head=head)

    def kept_in(self, quant: str, head: bool = True) -> "SkipMask":
        """The plan that runs every sub-layer this one does not skip in ``quant`` (int8/int4),
        and the head in ``quant`` when ``head`` (or already so); other low-bit parts go back to
        full first, since a sub-layer has one precision."""
        if quant not in QUANTIZED:
            raise LayersearchError(f"unknown low-bit precision {quant!r} (choose from {', '.join(QUANTIZED)})")
        keep_attention = [i for i in range(self.num_layers) if i not in self.attention]
        keep_mlp = [i for i in range(self.num_layers) if i not in self.mlp]
        base = self._copy(**{f"{q}_{part}": () if part != "head" else False
                             for q in QUANTIZED for part in ("attention", "mlp", "head")})
        return base._copy(**{f"{quant}_attention": keep_attention, f"{quant}_mlp": keep_mlp,
                             f"{quant}_head": head or getattr(self, f"{quant}_head")})

    def kept_in_int8(self, head: bool = True) -> "SkipMask":
        """The plan that runs every sub-layer this one does not skip in int8 (``drafter.quant``
        ``"int8"`` on a self-draft), and the head in int8 when ``head``."""
        return self.kept_in("int8", head)

    def kept_in_int4(self, head: bool = True) -> "SkipMask":
        """The plan that runs every sub-layer this one does not skip in int4 (``drafter.quant``
        ``"int4"`` on a self-draft), and the head in int4 when ``head``."""
        return self.kept_in("int4", head)

    def skips_only(self) -> "SkipMask":
        """This plan's skip mask: its int8 and int4 sub-layers back at full precision."""
        return self._copy(int8_attention=(), int8_mlp=(), int8_head=False, int4_attention=(), int4_mlp=(), int4_head=False,
                          int4_group_size=128)

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
        """The JSON object of the mask file (version 1 for a skip mask, 2 for a plan with int8,
        3 with int4: the oldest version that holds the plan)."""
        provenance = {key: self.provenance.get(key) for key in PROVENANCE_KEYS}
        provenance.update({k: v for k, v in self.provenance.items() if k not in provenance})
        kind = self.FILE if self.has_int4 else INT8_FILE if self.has_int8 else SKIP_ONLY_FILE
        data = {
            **kind.header(),
            "model": self.model.to_dict() if self.model else None,
            "num_layers": self.num_layers,
            "attention": list(self.attention),
            "mlp": list(self.mlp),
        }
        if not self.is_skip_only:
            data["int8"] = {"attention": list(self.int8_attention), "mlp": list(self.int8_mlp), "head": self.int8_head}
        if self.has_int4:
            data["int4"] = {"attention": list(self.int4_attention), "mlp": list(self.int4_mlp), "head": self.int4_head,
                            "group_size": self.int4_group_size}
        return {**data, "provenance": provenance}

    @classmethod
    def from_dict(cls, data: Any) -> "SkipMask":
        """Parse and validate a mask file's JSON object; raises LayersearchError naming the problem."""
        check_kind(data, "a mask file")
        if not isinstance(data, dict):
            raise LayersearchError("mask file must hold a JSON object")
        version = check_schema_version(data.get("schema_version"), READ_VERSIONS)
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
        int8 = _quant_section(data, version, "int8")
        int4 = _quant_section(data, version, "int4")
        return cls(data["num_layers"], tuple(data["attention"]), tuple(data["mlp"]), model, provenance,
                   tuple(int8["attention"]), tuple(int8["mlp"]), int8["head"],
                   tuple(int4["attention"]), tuple(int4["mlp"]), int4["head"], int4.get("group_size", 128))


def _quant_section(data: dict[str, Any], version: int, quant: str) -> dict[str, Any]:
    """The file's ``int8`` (version 2 on) or ``int4`` (version 3 on) object, checked; empty where absent."""
    section = data.get(quant)
    if section is None:
        return {"attention": [], "mlp": [], "head": False}
    needed = _SECTION_VERSION[quant]
    if version < needed:
        raise LayersearchError(f"{quant} sub-layers need schema_version {needed} (this file declares {version})")
    keys = ("attention", "mlp", "head") + (("group_size",) if quant == "int4" else ())
    if not isinstance(section, dict):
        raise LayersearchError(f"{quant} must be an object with {', '.join(keys)}")
    unknown = sorted(set(section) - set(keys))
    if unknown:
        raise LayersearchError(f"{quant} has an unknown key {unknown[0]!r} (expected {', '.join(keys)})")
    for key in ("attention", "mlp"):
        if not isinstance(section.get(key, []), list):
            raise LayersearchError(f"{quant}.{key} must be a list of layer indices")
    return {"attention": section.get("attention", []), "mlp": section.get("mlp", []), "head": section.get("head", False),
            **({"group_size": section["group_size"]} if "group_size" in section else {})}


def _check_provenance_numbers(provenance: Mapping[str, Any]) -> None:
    """The numbers a plan's provenance records (its search score, its trial number), checked by
    type: they are shown beside the plan and must read as what they claim to be."""
    if provenance.get("score") is not None:
        check_finite(provenance["score"], "provenance.score")
    if provenance.get("trial") is not None:
        check_int(provenance["trial"], "provenance.trial", minimum=0)


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
    """``mask show``'s text drawing: one column per layer, rows for attention and MLP
    (x = skipped, 8 = int8, 4 = int4)."""
    width = len(str(mask.num_layers - 1))
    header = " ".join(str(i).rjust(width) for i in range(mask.num_layers))
    marks = {"skip": "x", "int8": "8", "int4": "4", "full": "."}

    def row(kind: str) -> str:
        return " ".join(marks[mask.precision(kind, i)].rjust(width) for i in range(mask.num_layers))

    model = mask.model.name if mask.model else "unknown model"
    summary = f"{mask.num_skipped} of {2 * mask.num_layers} sub-layers skipped (ratio {mask.skip_ratio:.2f})"
    if mask.has_int8:
        summary += f", {mask.num_int8} int8"
    if mask.has_int4:
        summary += f", {mask.num_int4} int4 (groups of {mask.int4_group_size})"
    if not mask.is_skip_only:
        summary += f", LM head {mask.head_precision}"
    legend = "x = skipped" + (", 8 = int8" if mask.has_int8 else "") + (", 4 = int4" if mask.has_int4 else "")
    lines = [
        f"{model}: {mask.num_layers} layers, {summary}",
        f"layer {header}",
        f"attn  {row('attention')}",
        f"mlp   {row('mlp')}",
        f"{legend}, . = full" if not mask.is_skip_only else "x = skipped, . = kept",
    ]
    strategy = mask.provenance.get("strategy")
    if strategy:
        lines.append(f"provenance: strategy={strategy} objective={mask.provenance.get('objective')} "
                     f"score={mask.provenance.get('score')} study={mask.provenance.get('study')} "
                     f"trial={mask.provenance.get('trial')}")
    return "\n".join(lines)
