"""DecoderSpec: everything that decides what a decoder does, as one frozen, JSON-serialisable value.

The spec is the deployable artefact: ``generate`` writes the spec of what it ran and runs
one, as :func:`layersearch.load_decoder` does, and
:func:`layersearch.decoder.build.build_decoder` turns it into a decoder. It records the model (the
reference as given and, once bound, its fingerprint), the drafter, the mask source, a steering
file, the lookahead rule, the verifier, the sampling settings and the default length.

File format (``format`` 1)::

    {"kind": "layersearch-decoder-spec", "format": 1,
     "model": {"ref": "smollm2-135m", "path": false, "info": {...} | null, "device": "cpu", "dtype": null},
     "plain": false,
     "drafter": {"name": "layer-skip", "model": null | {"ref": ..., "path": ...}, "vocab": 0, "quant": null},
     "mask_source": {"kind": "mask", "mask": {<mask file>}, "file": "mask.json"},
     "steering": null, "profile": null,
     "lookahead": {"name": "confidence", "max_draft": 8, "threshold": 0.8, "file": null},
     "verifier": "chain",
     "sampling": {"do_sample": false, "temperature": 0.0, "top_p": 1.0, "seed": 0, "top_k": 0},
     "max_new_tokens": 64, "compile": "auto"}

``sampling.top_k`` (optional; absent = 0, every token) keeps the k most likely tokens, as
transformers' ``top_k`` does (its ``generate`` keeps 50 unless told otherwise).

``compile`` (optional; absent = ``auto``) says whether the target's forwards run captured:
``on``, ``off``, or ``auto`` (on for CUDA, off on CPU: :func:`compile_wanted`).

File paths in a saved spec (mask, router, DISCO, steering, profile files and model folders)
are relative to the spec file's folder. Names are checked against the plug-in registries:
drafters (:data:`layersearch.runtime.drafters.DRAFTERS`, whose entries say what each needs), lookahead rules
(:data:`layersearch.runtime.LOOKAHEADS`, plus ``disco`` with a file), verifiers
(:data:`layersearch.runtime.VERIFIERS`) and mask sources (:data:`layersearch.decoder.sources.MASK_SOURCES`).
This module imports no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

from layersearch.common.checks import (api_arguments, check_device_name, check_draft_length, check_dtype_name, check_finite,
                                      check_fraction, check_int, check_real, check_schema_version, check_seed)
from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.runtime import DRAFT_THRESHOLD, MAX_DRAFT
from layersearch.runtime.drafters import DEFAULT_DRAFTER

SPEC_KIND = "layersearch-decoder-spec"
SPEC_FORMAT = 1
#: Lookahead rules that read a trained file (``lookahead.file``), beside the runtime's registry.
FILE_LOOKAHEADS = ("disco",)
#: Values of ``compile``: captured forwards on, off, or where they pay (see :func:`compile_wanted`).
COMPILE_CHOICES = ("auto", "on", "off")


def compile_wanted(choice: str, device_type: str) -> bool:
    """Whether ``compile`` = ``choice`` runs captured forwards on a ``device_type`` device.

    ``auto`` is on for CUDA, where a captured step replays one CUDA graph instead of launching
    hundreds of kernels, and off on CPU, where the forwards are compute-bound and compiling
    costs tens of seconds per shape for no measured gain (docs/results.md, captured runtime)."""
    _require_name(choice, COMPILE_CHOICES, "compile")
    return choice == "on" or (choice == "auto" and device_type == "cuda")


def quant_plan_conflict(quant: str, mask: SkipMask) -> str:
    """The one error line of ``drafter.quant`` given with a plan that has low-bit parts of its own."""
    return (f"drafter.quant {quant} runs every sub-layer the plan keeps (and the LM head) in {quant}, but the "
            f"mask_source's plan sets its own precisions, {mask.low_bit_parts()}: give one of the two "
            "(the plan alone, or drafter.quant with a skip-only mask)")


def lookahead_names() -> tuple[str, ...]:
    from layersearch.runtime import LOOKAHEADS

    return (*LOOKAHEADS, *FILE_LOOKAHEADS)


def registry_names() -> dict[str, tuple[str, ...]]:
    """The names in each plug-in registry (the CLI's choices): ``drafter``, ``lookahead`` (without
    the file rules), ``verifier``, ``dynamic`` and ``on_the_fly`` mask sources."""
    from layersearch.runtime import LOOKAHEADS, VERIFIERS
    from layersearch.runtime.drafters import DRAFTERS
    from layersearch.decoder.sources import DYNAMIC_SOURCES, ON_THE_FLY_SOURCES

    return {"drafter": tuple(DRAFTERS), "lookahead": tuple(LOOKAHEADS), "verifier": tuple(VERIFIERS),
            "dynamic": DYNAMIC_SOURCES, "on_the_fly": ON_THE_FLY_SOURCES}


@dataclass(frozen=True)
class ModelRef:
    """A model as the user named it: an embedded name or hub id, or (``path``) a local folder or file."""

    ref: str
    path: bool = False

    def __post_init__(self) -> None:
        _require_str(self.ref, "model reference")
        _require_bool(self.path, "model path flag")

    @classmethod
    def given(cls, ref: str) -> "ModelRef":
        """The reference ``ref`` as a CLI option gave it (a path when it exists here)."""
        return cls(ref, os.path.exists(os.path.expanduser(ref)))


@dataclass(frozen=True)
class ModelSpec:
    """The verifier: its reference, where it runs, and (once bound) the model it must be."""

    ref: ModelRef
    info: ModelInfo | None = None  # None: not bound yet (any model loads)
    device: str = "cpu"
    dtype: str | None = None  # None: the device's default

    def __post_init__(self) -> None:
        object.__setattr__(self, "ref", _model_ref(self.ref, "model.ref"))
        if self.info is not None and not isinstance(self.info, ModelInfo):
            raise LayersearchError(f"model.info must be a ModelInfo or None, got {type(self.info).__name__}")
        _require_str(self.device, "model.device")
        _prefixed_check("model.device", check_device_name, self.device)  # the names the loader takes, before it runs
        if self.dtype is not None:
            _require_str(self.dtype, "model.dtype")
            _prefixed_check("model.dtype", check_dtype_name, self.dtype)


@dataclass(frozen=True)
class DrafterSpec:
    """Where drafts come from: a registered drafter, or an independent draft model."""

    name: str = DEFAULT_DRAFTER
    model: ModelRef | None = None  # an independent draft model sharing the tokenizer (layer-skip: replaced by it; hybrid: its fallback)
    vocab: int = 0  # FR-Spec: the draft scores only the tokenizer's N most frequent tokens (0: all)
    quant: str | None = None  # "int8": the draft model's weights, or (no draft model) every sub-layer the plan keeps and the head, in int8 or "int4"

    def __post_init__(self) -> None:
        from layersearch.runtime.drafters import DRAFTERS

        _require_name(self.name, tuple(DRAFTERS), "drafter")
        entry = DRAFTERS[self.name]  # what the drafter needs, as it declares it
        if self.model is not None:
            object.__setattr__(self, "model", _model_ref(self.model, "drafter.model"))
        check_int(self.vocab, "drafter.vocab", minimum=0)  # 0: the full vocabulary
        if self.vocab and not entry.takes_head:
            raise LayersearchError(f"drafter {self.name!r} runs no model head, so drafter.vocab has no head to reduce")
        if self.model is not None and not entry.takes_draft_model:
            with_one = [name for name, e in DRAFTERS.items() if e.takes_draft_model]
            raise LayersearchError(f"drafter {self.name!r} takes no draft model (only {', '.join(with_one)} draft with one)")
        if self.model is None and entry.needs_draft_model:
            raise LayersearchError(f"drafter {self.name!r} drafts with a draft model of its own: drafter.model names none")
        if self.quant is not None:
            from layersearch.models.quantize import check_quant

            check_quant(self.quant, self_draft=self.model is None)
            if self.model is None and not entry.takes_quant:
                raise LayersearchError(f"drafter {self.name!r} runs no draft of its own, so drafter.quant has nothing to quantize")


#: The drafter a spec that names only a model drafts with, by device type: prompt lookup, the
#: default that speculates on any model without a search, a second model or a trained file, costs
#: no forward per drafted token, and pays where text repeats its context (code, edits,
#: summaries: docs/results.md, "Prompt lookup", 1.54x on code with the 135M on CPU). A layer-skip
#: draft under an unsearched mask does not pay on a CPU (uniform 0.1: 0.64-0.89x) and drafts
#: nothing under the confidence rule; the GPU figures measure searched or exact masks, not an
#: unsearched one, so CUDA keeps prompt lookup too.
DEFAULT_DRAFTERS = {"cpu": "prompt-lookup", "cuda": "prompt-lookup"}


@dataclass(frozen=True)
class MaskSourceSpec:
    """Where the draft mask comes from (one of :data:`layersearch.decoder.sources.MASK_SOURCES`) and its settings."""

    kind: str = "default"
    mask: SkipMask | None = None  # kind "mask": the mask itself
    file: str | None = None  # kind "mask": the file it came from; "router": the router file
    skip_ratio: float | None = None  # kind "uniform"
    reselect_every: int | None = None  # kind "knapsack": decoding steps between re-selections
    swift: Mapping[str, Any] | None = None  # kind "swift": SwiftConfig's fields

    def __post_init__(self) -> None:
        from layersearch.decoder.sources import MASK_SOURCES

        _require_name(self.kind, tuple(MASK_SOURCES), "mask source")
        source = MASK_SOURCES[self.kind]
        given = {name for name in ("mask", "file", "skip_ratio", "reselect_every", "swift") if getattr(self, name) is not None}
        missing = [name for name in source.required if name not in given]
        extra = sorted(given - set(source.required) - set(source.optional))
        if missing or extra:
            problem = f"needs {', '.join(missing)}" if missing else f"takes no {', '.join(extra)}"
            raise LayersearchError(f"mask source {self.kind!r} {problem}")
        if self.mask is not None and not isinstance(self.mask, SkipMask):
            raise LayersearchError("mask_source.mask must be a mask")
        _path_field(self, "file")
        if self.file is not None:
            _require_str(self.file, "mask_source.file")
        if self.skip_ratio is not None:
            check_fraction(self.skip_ratio, "mask_source.skip_ratio")
        if self.reselect_every is not None:
            check_int(self.reselect_every, "mask_source.reselect_every")
        if self.swift is not None:
            if not isinstance(self.swift, Mapping) or not all(isinstance(k, str) for k in self.swift):
                raise LayersearchError("mask_source.swift must be an object of SWIFT settings")
            object.__setattr__(self, "swift", MappingProxyType(dict(self.swift)))
        if source.check is not None:  # the source's own settings, checked before any model loads
            _prefixed_check(f"mask_source.{self.kind}", source.check, self)


@dataclass(frozen=True)
class LookaheadSpec:
    """The draft-length rule, its cap and threshold, and the trained file a ``disco`` rule reads."""

    name: str = "confidence"
    max_draft: int = MAX_DRAFT
    threshold: float = DRAFT_THRESHOLD
    file: str | None = None

    def __post_init__(self) -> None:
        _require_name(self.name, lookahead_names(), "lookahead")
        check_draft_length(self.max_draft, "lookahead.max_draft")  # the bound the CLI has too
        check_fraction(self.threshold, "draft threshold")
        if (self.name in FILE_LOOKAHEADS) != (self.file is not None):
            raise LayersearchError(f"lookahead {self.name!r} " + ("needs a file" if self.file is None else "takes no file"))
        _path_field(self, "file")
        if self.file is not None:
            _require_str(self.file, "lookahead.file")


def check_sampling(do_sample: bool, temperature: float, do_sample_name: str = "do_sample",
                   temperature_name: str = "temperature") -> None:
    """The one sampling rule of specs, the API and the CLI: a temperature is a finite number >= 0;
    one > 0 samples and 0 is greedy, so ``do_sample`` true with temperature 0, or false with a
    temperature > 0, is refused."""
    check_real(temperature, temperature_name, low=0.0)  # a negative one would decode greedily without a word
    if do_sample and not temperature > 0:
        raise LayersearchError(f"{do_sample_name} true needs {temperature_name} > 0 (temperature 0 is greedy), got {temperature}")
    if not do_sample and temperature > 0:
        raise LayersearchError(f"{temperature_name} {temperature} samples, but {do_sample_name} is false "
                               f"(greedy decoding takes temperature 0)")


@dataclass(frozen=True)
class SamplingSpec:
    """Greedy (``do_sample`` false) or sampling from temperature -> top-k -> top-p (transformers'
    order) with a seed."""

    do_sample: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = 0
    # The k most likely tokens kept (0: every token, what `layersearch generate` has always
    # sampled; transformers' generate keeps 50 unless its config says otherwise: give 50 for its law).
    top_k: int = 0

    def __post_init__(self) -> None:
        _require_bool(self.do_sample, "sampling.do_sample")
        for name in ("temperature", "top_p"):
            check_finite(getattr(self, name), f"sampling.{name}")
        check_sampling(self.do_sample, self.temperature, "sampling.do_sample", "sampling.temperature")
        if not 0 < self.top_p <= 1:
            raise LayersearchError(f"top-p must be in (0, 1], got {self.top_p}")
        check_int(self.top_k, "sampling.top_k", minimum=0)  # by type: 50.0 and True are refused, not rounded
        if self.seed is not None:
            check_seed(self.seed, "sampling.seed")  # the bound the CLI has too

    @property
    def temperature_used(self) -> float:
        """The decode loop's temperature: 0 (greedy) unless sampling."""
        return float(self.temperature) if self.do_sample else 0.0


@dataclass(frozen=True)
class DecoderSpec:
    """What a decoder does (see the module docstring for the file).

    A spec that names only a model (no drafter, mask source, steering, DISCO or profile file:
    ``DecoderSpec("smollm2-135m")``) drafts by prompt lookup on CPU and on CUDA
    (:data:`DEFAULT_DRAFTERS`), with no mask: lossless, no search or second model needed, and
    it pays where the text repeats its context. Naming a mask source, a steering, DISCO or
    profile file gives the layer-skip drafter (``mask_source`` ``default``: the file's mask,
    else an evenly spread one skipping a quarter); the spec records the drafter it chose."""

    model: ModelSpec
    plain: bool = False  # transformers' generate, no drafting (the baseline)
    drafter: DrafterSpec = field(default_factory=lambda: _UNNAMED_DRAFTER)  # none named: see the class docstring
    mask_source: MaskSourceSpec = field(default_factory=MaskSourceSpec)
    steering: str | None = None  # SD² steering file
    lookahead: LookaheadSpec = field(default_factory=LookaheadSpec)
    verifier: str = "chain"
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    profile: str | None = None  # latency profile: KnapSpec's input, and the predicted speedup in the stats
    max_new_tokens: int = 64
    compile: str = "auto"  # captured forwards: auto (on for CUDA), on, off

    def __post_init__(self) -> None:
        from layersearch.runtime import VERIFIERS

        for name, (part, short) in _PARTS.items():  # a part's type first: a wrong one fails naming its field
            object.__setattr__(self, name, _part(getattr(self, name), part, short, name))
        _require_bool(self.plain, "plain")
        _require_name(self.compile, COMPILE_CHOICES, "compile")
        _require_name(self.verifier, tuple(VERIFIERS), "verification")
        check_int(self.max_new_tokens, "max new tokens")
        for name in ("steering", "profile"):
            _path_field(self, name)
            if getattr(self, name) is not None:
                _require_str(getattr(self, name), name)
        if self.drafter is _UNNAMED_DRAFTER:
            self._default_drafter()
        kind = self.mask_source.kind
        if self.plain and kind not in ("default", "none"):
            raise LayersearchError(f"a plain (baseline) spec takes no mask source, got {kind!r}")
        if self.drafter.model is not None and (kind not in ("default", "none") or self.plain or self.profile):
            raise LayersearchError("a spec drafting with an independent model takes no mask source, plain decoding or profile")
        self._check_quant_plan()
        if self.plain:  # plain decoding drafts nothing: a drafter setting would be ignored without a word
            default = DrafterSpec()
            unused = [f"drafter.{name}" for name in ("name", "vocab", "quant") if getattr(self.drafter, name) != getattr(default, name)]
            if unused:
                raise LayersearchError(f"plain decoding drafts nothing, so it takes no {', '.join(unused)} "
                                       f"(got {', '.join(repr(getattr(self.drafter, u[8:])) for u in unused)})",
                                       fields=("plain", *unused))

    def _default_drafter(self) -> None:
        """The drafter of a spec that names none: prompt lookup (:data:`DEFAULT_DRAFTERS`) when
        nothing else names a draft either, else the layer-skip drafter of the mask, steering,
        DISCO or profile file the spec names (a plain spec keeps it unused)."""
        if self.plain or self.mask_source.kind != "default" or self.steering or self.profile or self.lookahead.file:
            object.__setattr__(self, "drafter", DrafterSpec())
            return
        device = check_device_name(self.model.device).group(0).partition(":")[0]
        object.__setattr__(self, "drafter", DrafterSpec(DEFAULT_DRAFTERS[device]))
        object.__setattr__(self, "mask_source", MaskSourceSpec("none"))

    def _check_quant_plan(self) -> None:
        """``drafter.quant`` without a draft model runs every sub-layer the plan keeps in that
        precision: it would silently replace what a plan with int8 or int4 parts gives them."""
        mask = self.mask_source.mask
        if self.drafter.quant is not None and self.drafter.model is None and mask is not None and not mask.is_skip_only:
            raise LayersearchError(quant_plan_conflict(self.drafter.quant, mask), fields=("drafter.quant", "mask_source"))

    # ----- binding to a model ------------------------------------------------------------
    def check_model(self, model: ModelInfo) -> None:
        """Raise if this spec was made for another model than ``model`` (as a mask says it)."""
        info = self.model.info
        if info is not None and info.fingerprint != model.fingerprint:
            raise LayersearchError(
                f"spec was made for model {info.name!r} (fingerprint {info.fingerprint}), "
                f"not {model.name!r} (fingerprint {model.fingerprint})"
            )
        if info is not None and not info.same_model(model):  # the fingerprint agrees, the sizes written beside it do not
            raise LayersearchError(
                f"the spec's model.info says {info.num_layers} layers of width {info.hidden_size}, but model {model.name!r} "
                f"has {model.num_layers} of width {model.hidden_size} (the file was edited)"
            )

    # ----- JSON -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the spec file."""
        source: dict[str, Any] = {"kind": self.mask_source.kind}
        for name in ("mask", "file", "skip_ratio", "reselect_every", "swift"):
            value = getattr(self.mask_source, name)
            if value is not None:
                source[name] = value.to_dict() if isinstance(value, SkipMask) else dict(value) if name == "swift" else value
        model = self.model
        return {
            "kind": SPEC_KIND,
            "format": SPEC_FORMAT,
            "model": {"ref": model.ref.ref, "path": model.ref.path, "info": model.info.to_dict() if model.info else None,
                      "device": model.device, "dtype": model.dtype},
            "plain": self.plain,
            "drafter": {"name": self.drafter.name, "model": _ref_dict(self.drafter.model), "vocab": self.drafter.vocab,
                        "quant": self.drafter.quant},
            "mask_source": source,
            "steering": self.steering,
            "profile": self.profile,
            "lookahead": {f.name: getattr(self.lookahead, f.name) for f in fields(LookaheadSpec)},
            "verifier": self.verifier,
            "sampling": {f.name: getattr(self.sampling, f.name) for f in fields(SamplingSpec)},
            "max_new_tokens": self.max_new_tokens,
            "compile": self.compile,
        }

    @classmethod
    def from_dict(cls, data: Any) -> "DecoderSpec":
        """Parse and validate a spec file's JSON object; raises LayersearchError naming the problem."""
        if not isinstance(data, dict) or data.get("kind") != SPEC_KIND:
            from layersearch.common.jsonfile import file_kind

            kind = file_kind(data)
            raise LayersearchError(f"this is {kind}, not a decoder spec" if kind else
                                   f"not a decoder spec (expected an object with \"kind\": \"{SPEC_KIND}\")")
        check_schema_version(data.get("format"), (SPEC_FORMAT,), "format")  # true == 1 to Python, not to a file
        body = _object(data, "spec", required=_TOP_KEYS, optional=("kind", "format", "compile"))
        model = _object(body["model"], "model", required=("ref", "path", "info", "device", "dtype"))
        drafter = _object(body["drafter"], "drafter", required=("name", "model"), optional=("vocab", "quant"))
        source = _object(body["mask_source"], "mask_source", required=("kind",),
                         optional=("mask", "file", "skip_ratio", "reselect_every", "swift"))
        if "mask" in source:
            source["mask"] = _nested(SkipMask.from_dict, source["mask"], "mask_source.mask")
        lookahead = _object(body["lookahead"], "lookahead", required=tuple(f.name for f in fields(LookaheadSpec)))
        sampling = _object(body["sampling"], "sampling", required=_SAMPLING_KEYS, optional=("top_k",))  # absent: 0
        info = None if model["info"] is None else ModelInfo.from_dict(model["info"], "model.info")
        return cls(
            model=ModelSpec(_nested(lambda d: ModelRef(d["ref"], d["path"]), model, "model"), info, model["device"], model["dtype"]),
            plain=body["plain"],
            drafter=DrafterSpec(drafter["name"], None if drafter["model"] is None else _ref(drafter["model"], "drafter.model"),
                                drafter.get("vocab", 0), drafter.get("quant")),
            mask_source=MaskSourceSpec(**source),
            steering=body["steering"],
            lookahead=LookaheadSpec(**lookahead),
            verifier=body["verifier"],
            sampling=SamplingSpec(**sampling),
            profile=body["profile"],
            max_new_tokens=body["max_new_tokens"],
            compile=body.get("compile", "auto"),
        )

    def save(self, path: str | Path) -> Path:
        """Write the spec file atomically: paths inside the file's folder relative to it (the folder
        moves as a whole), paths elsewhere (a model in the cache) absolute."""
        from layersearch.common.jsonfile import write_json_atomic

        if not isinstance(path, (str, os.PathLike)):
            raise LayersearchError(f"spec file must be a path (str or Path), got {type(path).__name__}")
        folder = _folder_of(path)
        return write_json_atomic(path, self.with_paths(lambda p: _portable(p, folder)).to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "DecoderSpec":
        """Read and validate a spec file; its relative paths resolved from the file's folder."""
        from layersearch.common.jsonfile import read_json_file

        data = read_json_file(path, "spec")
        try:
            spec = cls.from_dict(data)
        except LayersearchError as exc:
            raise LayersearchError(f"{path}: {exc}") from None
        folder = _folder_of(path)
        return spec.with_paths(lambda p: p if os.path.isabs(p) else os.path.normpath(os.path.join(folder, p)))

    def with_paths(self, move: Callable[[str], str]) -> "DecoderSpec":
        """This spec with every file path passed through ``move`` (model references only when paths)."""
        def opt(value: str | None) -> str | None:
            return None if value is None else move(value)

        def ref(value: ModelRef) -> ModelRef:
            return value if not value.path else ModelRef(move(os.path.expanduser(value.ref)), True)

        draft = self.drafter.model
        return replace(
            self,
            model=replace(self.model, ref=ref(self.model.ref)),
            drafter=replace(self.drafter, model=None if draft is None else ref(draft)),
            mask_source=replace(self.mask_source, file=opt(self.mask_source.file)),
            steering=opt(self.steering),
            profile=opt(self.profile),
            lookahead=replace(self.lookahead, file=opt(self.lookahead.file)),
        )


def _model_ref(value: Any, where: str) -> ModelRef:
    """A ModelRef, or its short form: a model name or path (a path when it exists here)."""
    if isinstance(value, ModelRef):
        return value
    if isinstance(value, (str, os.PathLike)):
        ref = os.fspath(value)
        _require_str(ref, where)
        return ModelRef.given(ref)
    raise LayersearchError(f"{where} must be a ModelRef or a model name or path, got {type(value).__name__}")


def _model_short(value: Any) -> "ModelSpec":
    return ModelSpec(_model_ref(value, "model"))


def _mask_short(value: Any) -> "MaskSourceSpec":
    if isinstance(value, SkipMask):
        return MaskSourceSpec("mask", mask=value)
    raise LayersearchError(f"{value!r} is no mask source: give a MaskSourceSpec or a SkipMask (for a mask file: "
                           "MaskSourceSpec('mask', mask=SkipMask.load(path), file=path))")


#: DecoderSpec's parts: {field: (type, its short form's constructor: a name or path, a SkipMask...)}.
_PARTS: dict[str, tuple[type, Callable[[Any], Any] | None]] = {
    "model": (ModelSpec, lambda v: _model_short(v) if isinstance(v, (str, os.PathLike, ModelRef)) else None),
    "drafter": (DrafterSpec, lambda v: DrafterSpec(v) if isinstance(v, str) else None),
    "mask_source": (MaskSourceSpec, lambda v: _mask_short(v) if isinstance(v, (str, SkipMask)) else None),
    "lookahead": (LookaheadSpec, lambda v: LookaheadSpec(v) if isinstance(v, str) else None),
    "sampling": (SamplingSpec, None),
}


def _part(value: Any, part: type, short: Callable[[Any], Any] | None, name: str) -> Any:
    """``value`` as the ``part`` it must be: itself, its documented short form, or one error naming the field."""
    if isinstance(value, part):
        return value
    built = None
    try:
        built = short(value) if short is not None else None
    except LayersearchError as exc:
        raise LayersearchError(f"{name}: {exc}") from None
    if built is None:
        forms = {"model": " or a model name or path", "drafter": " or a drafter name", "lookahead": " or a rule name",
                 "mask_source": " or a SkipMask"}.get(name, "")
        raise LayersearchError(f"{name} must be a {part.__name__}{forms}, got {type(value).__name__}")
    return built


#: The sampling fields every spec file has; ``top_k`` came later (absent: 0, every token).
_SAMPLING_KEYS = ("do_sample", "temperature", "top_p", "seed")
_TOP_KEYS = ("model", "plain", "drafter", "mask_source", "steering", "profile", "lookahead", "verifier", "sampling",
             "max_new_tokens")


def _portable(path: str, folder: str) -> str:
    """``path`` relative to ``folder`` when it lies inside it, else absolute."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute, folder)
    return absolute if relative == os.pardir or relative.startswith(os.pardir + os.sep) else relative


def _folder_of(path: str | Path) -> str:
    return os.path.dirname(os.path.abspath(os.fspath(path)))


def _ref_dict(ref: ModelRef | None) -> dict[str, Any] | None:
    return None if ref is None else {"ref": ref.ref, "path": ref.path}


def _ref(data: Any, where: str) -> ModelRef:
    data = _object(data, where, required=("ref", "path"))
    return _nested(lambda d: ModelRef(d["ref"], d["path"]), data, where)


def _object(data: Any, where: str, *, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """``data`` as a dict with exactly the ``required`` keys (and maybe ``optional`` ones)."""
    if not isinstance(data, dict):
        raise LayersearchError(f"{where}: expected an object")
    missing = [key for key in required if key not in data]
    if missing:
        raise LayersearchError(f"{where}: missing {', '.join(missing)}")
    unknown = sorted(set(data) - set(required) - set(optional))
    if unknown:
        raise LayersearchError(f"{where}: unknown field {', '.join(map(repr, unknown))}")
    return dict(data)


def _nested(parse: Callable[[Any], Any], data: Any, where: str) -> Any:
    try:
        return parse(data)
    except LayersearchError as exc:
        raise LayersearchError(f"{where}: {exc}") from None


def _prefixed_check(where: str, check: Callable[[Any], Any], value: Any) -> None:
    """``check(value)``, its error prefixed with the spec field ``where``."""
    try:
        check(value)
    except LayersearchError as exc:
        raise LayersearchError(f"{where}: {exc}") from None


def _require_name(value: Any, names: tuple[str, ...], what: str) -> None:
    if value not in names:
        raise LayersearchError(f"unknown {what} {value!r} (choose from {', '.join(names)})")


def _path_field(spec: Any, name: str) -> None:
    """A file field given as a ``Path`` (as ``load_decoder`` takes one) held as its str, the file's form."""
    value = getattr(spec, name)
    if isinstance(value, os.PathLike):
        path = os.fspath(value)
        object.__setattr__(spec, name, path if isinstance(path, str) else value)


def _require_str(value: Any, what: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise LayersearchError(f"{what} must be a non-empty string, got {value!r}")


def _require_bool(value: Any, what: str) -> None:
    if not isinstance(value, bool):
        raise LayersearchError(f"{what} must be true or false, got {value!r}")


#: What ``drafter`` holds while a spec names none (told apart from an explicit ``DrafterSpec()``).
_UNNAMED_DRAFTER: DrafterSpec = DrafterSpec()
# A misspelt field (DecoderSpec("m", max_tokens=8)) is a LayersearchError naming the fields, as a bad value is.
for _spec_class in (ModelRef, ModelSpec, DrafterSpec, MaskSourceSpec, LookaheadSpec, SamplingSpec, DecoderSpec):
    setattr(_spec_class, "__init__", api_arguments(_spec_class.__init__))
setattr(DecoderSpec, "save", api_arguments(vars(DecoderSpec)["save"]))
setattr(DecoderSpec, "load", classmethod(api_arguments(vars(DecoderSpec)["load"].__func__)))


__all__ = ["DecoderSpec", "DrafterSpec", "LookaheadSpec", "MaskSourceSpec", "ModelRef", "ModelSpec", "SamplingSpec"]
