"""LatencyProfile: measured sub-layer costs of one model on one device, and what they predict.

A profile holds the cost of one attention sub-layer as a function of context length
(``t_attn(n) = a*n + b``), of one MLP sub-layer, of everything outside the decoder layers
(embedding, final norm, LM head, per-forward overhead), and of verifying ``k`` tokens in one
forward relative to one token. ``layersearch.profiling.profiler`` measures it; this module is the
value type, its JSON file, and the latency model built on it:

* the draft cost coefficient ``c`` (draft forward time / target forward time), which for a
  profile without base cost is KNN-SSD's Eq. 11;
* the expected speedup from the mean generated length ``M`` and acceptance rate ``alpha``
  (SWIFT Eq. 6 / KNN-SSD Eq. 10), generalized so verification is not assumed free;
* KnapSpec's tokens-per-time (TPT) and the draft length that maximizes it.

Sliding-window attention (Mistral, Qwen2, Gemma 2/3, Phi-3): a layer with a window of ``w``
tokens attends to at most ``w - 1`` cached positions, so its cost stops growing there.
``attention_windows`` holds each layer's window (``None`` = full attention; empty = every layer
full, as in files written before windows were recorded); the latency model evaluates layer
``i``'s attention at its *effective context* ``min(n, w_i - 1)``, and ``a, b`` are fitted
against the layers' mean effective context.

It knows nothing of torch, so a mask and its profile can be read anywhere.

File format (schema_version 1)::

    {"schema_version": 1, "kind": "latency-profile",
     "model": {"name": ..., "num_layers": ..., "hidden_size": ..., "fingerprint": ...},
     "device": "cpu", "dtype": "float32", "torch_version": "2.13.0",
     "attention_slope": a, "attention_intercept": b, "mlp_seconds": ..., "base_seconds": ...,
     "verify_ratios": [1.0, ...], "contexts": [64, ...], "created": "...",
     "attention_windows": [null, 4096, ...],        (optional; absent or [] = all full)
     "kernels": "numba",                           (optional; absent = "stock")
     "kernel_timings": [{"kernels": "stock", "one_token_seconds": ..., "verify_ratios": [...]}, ...],
     "kernel_dtypes": ["float32", "bfloat16", "float16"]}      (optional; absent = [])

``kernels`` names the CPU kernels every timing of the profile was measured with, and the ones
``kernels="auto"`` then runs; ``kernel_timings`` holds the verification sweep of each kernel set
that was timed to make that choice (:func:`pick_kernels`). ``kernel_dtypes`` names the dtypes the
numba kernels ran when the profile was measured (:data:`~layersearch.kernels.KERNEL_DTYPES`;
older files name none: numba then ran float32 alone, so their numba timings of a bfloat16 model
were stock's, and ``auto`` does not take numba from them for one).

Precision (draft plans, :class:`~layersearch.masks.mask.SkipMask` with int8 sub-layers): where the
device runs int8 twins, the profile also holds one int8 attention sub-layer's cost
(``int8_attention_slope``, ``int8_attention_intercept``), one int8 MLP sub-layer's
(``int8_mlp_seconds``) and what the int8 LM head saves on the base (``int8_head_saving``); all
``null`` where not measured (older files, GPU profiles), and a plan with int8 sub-layers then
cannot be costed (one error line naming ``layersearch profile``). The int4 twins' costs
(``int4_attention_slope``, ``int4_attention_intercept``, ``int4_mlp_seconds``,
``int4_head_saving``) mirror them, measured where the device runs int4 twins (CPU: the
bf16 emulation, which costs what it costs here, not what tinygemm costs on a GPU).

Provenance (schema_version 2; version 1 files still read, with these fields empty): a profile
predicts for the device it was measured on, so it says which (``device``: ``"cpu: <CPU model>"``
or ``"cuda: <GPU name>"``), with ``transformers_version``, ``commit`` (the layersearch checkout
or version), ``compile_mode`` (``eager``, or ``captured:<dynamo backend>`` where the forwards
were compiled over a static cache, as the runtime runs them on a GPU), ``random_weights`` (the
model was built from its config alone: costs depend on shapes and dtype, not values),
``step_overhead_seconds`` (the decode loop's own time per step beside its forwards; ``null``
where not measured) and ``architecture``, the config fields that determine costs (model type,
layers, widths, heads, head size, vocabulary, dtype). A profile is bound to the architecture,
not to the weights: measured on a GPU from random weights, it costs the plans a search on
another machine finds for the trained model of that architecture, and every prediction names
the device it is for (:attr:`LatencyProfile.predicts_for`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from layersearch.common.checks import check_int, check_schema_version
from layersearch.common.errors import LayersearchError
from layersearch.kernels import KERNEL_DTYPES, KERNEL_NAMES
from layersearch.masks.mask import SkipMask
from layersearch.common.modelfile import FileKind, ModelBoundJson, ModelInfo

SCHEMA_VERSION = 2
#: Versions this reader accepts: version 1 files predate the provenance fields.
READ_VERSIONS = (1, 2)
KIND = "latency-profile"
PROFILE_FILE = FileKind(tag=KIND, called="profile", made_for="profile was measured for", schema_version=SCHEMA_VERSION)
_TIME_FIELDS = ("attention_slope", "attention_intercept", "mlp_seconds", "base_seconds")
#: The int8 timings (optional: None where the profile did not measure int8 twins).
INT8_FIELDS = ("int8_attention_slope", "int8_attention_intercept", "int8_mlp_seconds", "int8_head_saving")
#: The int4 timings, the same four (None where the profile did not measure int4 twins).
INT4_FIELDS = ("int4_attention_slope", "int4_attention_intercept", "int4_mlp_seconds", "int4_head_saving")
#: Each low-bit precision's optional timings.
QUANT_FIELDS = {"int8": INT8_FIELDS, "int4": INT4_FIELDS}
_REQUIRED = ("model", "device", "dtype", "torch_version", *_TIME_FIELDS, "verify_ratios")
#: Config fields that determine a model's costs (with the dtype): what a profile is bound to.
ARCHITECTURE_FIELDS = ("model_type", "num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                       "num_key_value_heads", "head_dim", "vocab_size", "dtype")
#: The architecture fields that are sizes (integers >= 1, or null where the config has none).
ARCHITECTURE_SIZES = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                      "head_dim", "vocab_size")
#: Compile modes a profile records: eager forwards, or forwards captured by a dynamo backend.
COMPILE_MODES = ("eager", "captured:inductor", "captured:eager")


@dataclass(frozen=True)
class KernelTiming:
    """One kernel set's verification sweep at the profile's middle context: the one-token
    forward's seconds and time(k tokens) / time(1 token) for k = 1, 2, ..."""

    kernels: str
    one_token_seconds: float
    verify_ratios: tuple[float, ...]

    def __post_init__(self) -> None:
        if self.kernels not in KERNEL_NAMES:
            raise LayersearchError(f"kernel timing: unknown kernels {self.kernels!r}; choose from {', '.join(KERNEL_NAMES)}")
        object.__setattr__(self, "one_token_seconds", _non_negative(self.one_token_seconds, "one_token_seconds"))
        object.__setattr__(self, "verify_ratios", _checked_ratios(self.verify_ratios))

    def seconds(self, k: int) -> float:
        """Seconds of a forward over ``k`` tokens (k within the sweep)."""
        return self.one_token_seconds * self.verify_ratios[k - 1]

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of one entry of ``kernel_timings``."""
        return {"kernels": self.kernels, "one_token_seconds": self.one_token_seconds, "verify_ratios": list(self.verify_ratios)}

    @classmethod
    def from_dict(cls, data: Any) -> "KernelTiming":
        """Parse one ``kernel_timings`` entry."""
        if not isinstance(data, dict) or not isinstance(data.get("verify_ratios"), list):
            raise LayersearchError("kernel_timings entries must be objects with kernels, one_token_seconds, verify_ratios")
        kernels: Any = data.get("kernels")  # JSON values: __post_init__ checks them
        seconds: Any = data.get("one_token_seconds")
        return cls(kernels, seconds, tuple(data["verify_ratios"]))


#: The draft the kernel choice weighs: 4 tokens, each half a forward (a typical static or confidence
#: draft of a mask or int8 plan), then their verification over 5 tokens.
STEP_DRAFT_TOKENS = 4
STEP_DRAFT_COST = 0.5
#: Steps predicted within this share of each other are a tie: noise between two profiles is larger.
STEP_NOISE = 0.05


def step_seconds(timing: KernelTiming, draft_tokens: int = STEP_DRAFT_TOKENS, draft_cost: float = STEP_DRAFT_COST) -> float:
    """Predicted seconds of one speculative step with ``timing``'s kernels: ``draft_tokens`` draft
    forwards of ``draft_cost`` one-token forward each, and verification over ``draft_tokens + 1``
    tokens (the longest draft the sweep covers)."""
    k = max(1, min(draft_tokens, len(timing.verify_ratios) - 1))
    return k * draft_cost * timing.one_token_seconds + timing.seconds(k + 1)


def pick_kernels(timings: Sequence[KernelTiming], baseline: str = "stock") -> str:
    """The kernel set whose speculative step is predicted cheapest (:func:`step_seconds`), not
    the one whose one-token forward is: two kernel sets' one-token times differ by a few percent,
    within a profile's noise, while their verification curves can differ twofold. Steps within
    :data:`STEP_NOISE` of the cheapest are a tie, won by the flattest verification curve (the
    choice that stays cheap when drafts grow), then by ``baseline``."""
    by_name = {t.kernels: t for t in timings}
    if baseline not in by_name:
        raise LayersearchError(f"kernel timings lack the {baseline!r} baseline")
    cheapest = min(step_seconds(t) for t in timings)
    tied = [t for t in timings if step_seconds(t) <= cheapest * (1 + STEP_NOISE)]
    return min(tied, key=lambda t: (t.verify_ratios[-1], t.kernels != baseline)).kernels


def kernel_choice_text(timings: Sequence[KernelTiming], chosen: str) -> str:
    """One line: the choice and each kernel set's predicted step, one-token forward and verify ratio."""
    parts = [f"{t.kernels}: step {step_seconds(t) * 1e3:.1f} ms (one token {t.one_token_seconds * 1e3:.1f} ms, "
             f"verify({len(t.verify_ratios)})/verify(1) {t.verify_ratios[-1]:.2f})" for t in timings]
    return f"kernels: {chosen} ({STEP_DRAFT_TOKENS} draft tokens at {STEP_DRAFT_COST} of a forward, then verify; " + \
        "; ".join(parts) + ")"


@dataclass(frozen=True)
class LatencyProfile(ModelBoundJson):
    """Per-sub-layer forward costs (seconds, one token) of ``model`` on ``device`` in ``dtype``."""

    FILE = PROFILE_FILE

    model: ModelInfo
    device: str
    dtype: str
    torch_version: str
    attention_slope: float  # a: seconds per context token, one attention sub-layer
    attention_intercept: float  # b: seconds, one attention sub-layer at context 0
    mlp_seconds: float  # one MLP sub-layer, one token
    base_seconds: float  # embedding + final norm + LM head + per-forward overhead, one token
    verify_ratios: tuple[float, ...]  # [k-1]: time(forward of k tokens) / time(forward of 1 token)
    contexts: tuple[int, ...] = ()  # context lengths measured (for the record)
    created: str = ""
    attention_windows: tuple[int | None, ...] = ()  # [L] per-layer window, None = full; () = all full
    kernels: str = "stock"  # the CPU kernels these timings were measured with
    kernel_timings: tuple[KernelTiming, ...] = ()  # each kernel set's verification sweep (the choice)
    kernel_dtypes: tuple[str, ...] = ()  # the dtypes the numba kernels ran when timed (older files: none)
    int8_attention_slope: float | None = None  # an int8 attention sub-layer: seconds per context token
    int8_attention_intercept: float | None = None  # ... and at context 0
    int8_mlp_seconds: float | None = None  # an int8 MLP sub-layer, one token
    int8_head_saving: float | None = None  # seconds the int8 LM head saves on base_seconds, one token
    int4_attention_slope: float | None = None  # the same four for int4 twins
    int4_attention_intercept: float | None = None
    int4_mlp_seconds: float | None = None
    int4_head_saving: float | None = None
    # ----- provenance (schema 2): where and how the timings were taken ----------------------------
    transformers_version: str = ""
    commit: str = ""  # the layersearch checkout's commit, or "layersearch <version>"
    compile_mode: str = "eager"  # one of COMPILE_MODES
    random_weights: bool = False  # built from the config alone (costs depend on shapes, not values)
    step_overhead_seconds: float | None = None  # the loop's own seconds per step beside its forwards
    architecture: dict[str, Any] = field(default_factory=dict, hash=False)  # ARCHITECTURE_FIELDS -> value

    def __post_init__(self) -> None:
        if not isinstance(self.model, ModelInfo):
            raise LayersearchError("profile model must be a ModelInfo")
        for name in ("device", "dtype", "torch_version", "created", "transformers_version", "commit"):
            if not isinstance(getattr(self, name), str):
                raise LayersearchError(f"profile {name} must be a string, got {getattr(self, name)!r}")
        for name in _TIME_FIELDS:
            object.__setattr__(self, name, _non_negative(getattr(self, name), name))
        object.__setattr__(self, "verify_ratios", _checked_ratios(self.verify_ratios))
        object.__setattr__(self, "contexts", _checked_contexts(self.contexts))
        object.__setattr__(self, "attention_windows", _checked_windows(self.attention_windows, self.model.num_layers))
        if self.kernels not in KERNEL_NAMES:  # refused with the file named, not later by the kernel switch
            raise LayersearchError(f"profile kernels: unknown kernels {self.kernels!r}; choose from {', '.join(KERNEL_NAMES)}")
        object.__setattr__(self, "kernel_timings", tuple(self.kernel_timings))
        if any(not isinstance(t, KernelTiming) for t in self.kernel_timings):
            raise LayersearchError("profile kernel_timings must hold KernelTiming values")
        object.__setattr__(self, "kernel_dtypes", tuple(self.kernel_dtypes))
        if any(name not in KERNEL_DTYPES for name in self.kernel_dtypes):
            raise LayersearchError(f"profile kernel_dtypes must name dtypes of {', '.join(KERNEL_DTYPES)}, got {list(self.kernel_dtypes)!r}")
        for name in (*INT8_FIELDS, *INT4_FIELDS):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _non_negative(getattr(self, name), name))
        if self.target_seconds(0) <= 0:
            raise LayersearchError("profile has zero cost for a full forward (all times are 0)")
        self._check_provenance()

    def _check_provenance(self) -> None:
        if self.compile_mode not in COMPILE_MODES:
            raise LayersearchError(f"profile compile_mode must be one of {', '.join(COMPILE_MODES)}, got {self.compile_mode!r}")
        if not isinstance(self.random_weights, bool):
            raise LayersearchError(f"profile random_weights must be true or false, got {self.random_weights!r}")
        if self.step_overhead_seconds is not None:
            object.__setattr__(self, "step_overhead_seconds", _non_negative(self.step_overhead_seconds, "step_overhead_seconds"))
        if not isinstance(self.architecture, dict) or any(key not in ARCHITECTURE_FIELDS for key in self.architecture):
            raise LayersearchError(f"profile architecture must be an object with the fields {', '.join(ARCHITECTURE_FIELDS)}")
        for key, value in self.architecture.items():  # sizes compared with a model's config: integers, as there
            if value is not None and key in ARCHITECTURE_SIZES:
                check_int(value, f"profile architecture.{key}")
            elif value is not None and not isinstance(value, str):
                raise LayersearchError(f"profile architecture.{key} must be a string or null, got {value!r}")

    # ----- what the profile is for ----------------------------------------------------------
    @property
    def predicts_for(self) -> str:
        """The device its predictions are for, as the file names it ("cuda: NVIDIA H100 80GB HBM3");
        older files' ``cuda (<name>)`` reads the same way."""
        device = self.device
        if device.startswith("cuda (") and device.endswith(")"):
            return f"cuda: {device[len('cuda ('):-1]}"
        return device

    def predicted_text(self, speedup: float | None) -> str:
        """``predicted 1.62x on cuda: NVIDIA H100 80GB HBM3`` (``predicted - on ...`` for no value)."""
        value = "-" if speedup is None else f"{speedup:.2f}x"
        return f"predicted {value} on {self.predicts_for}"

    def check_model(self, model: ModelInfo, architecture: dict[str, Any] | None = None) -> None:
        """Raise unless the profile was measured for ``model``'s architecture (its fingerprint covers
        the structural config fields; the weights never matter). ``architecture``
        (:func:`~layersearch.profiling.profiler.model_architecture` of the model at hand) adds the
        head size to the comparison and names both architectures in the error."""
        mine = {k: v for k, v in self.architecture.items() if k != "dtype"}
        theirs = {k: v for k, v in (architecture or {}).items() if k != "dtype"}
        shared = set(mine) & set(theirs)
        differs = any(mine[k] != theirs[k] for k in shared)
        if differs or not self.model.same_model(model):
            raise LayersearchError(
                f"profile was measured for architecture {architecture_text(self.architecture, self.model)}, "
                f"not {architecture_text(architecture or {}, model)} (a profile is bound to the architecture: "
                f"measure one for this model with `layersearch profile`, from its config alone where its weights are elsewhere)",
                fields="profile")

    # ----- per-forward costs --------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        """Decoder layers of the profiled model."""
        return self.model.num_layers

    def effective_context(self, context: float, layer: int) -> float:
        """Cached positions layer ``layer``'s attention reads at ``context``: ``min(n, window - 1)``."""
        window = self.attention_windows[layer] if self.attention_windows else None
        return context if window is None else min(context, window - 1)

    def attention_seconds(self, context: int, layer: int | None = None) -> float:
        """Attention sub-layer ``layer`` (default: the mean over layers), one new token after ``context``."""
        if isinstance(context, bool) or not isinstance(context, (int, float)) or context < 0:
            raise LayersearchError(f"context length must be a number >= 0, got {context!r}")
        if layer is None:
            if not self.attention_windows:
                return self.attention_slope * context + self.attention_intercept
            return sum(self.attention_seconds(context, i) for i in range(self.num_layers)) / self.num_layers
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.num_layers:
            raise LayersearchError(f"layer must be in 0..{self.num_layers - 1}, got {layer!r}")
        return self.attention_slope * self.effective_context(context, layer) + self.attention_intercept

    @property
    def has_int8(self) -> bool:
        """True when the profile measured int8 sub-layers (it can cost plans with int8)."""
        return all(getattr(self, name) is not None for name in INT8_FIELDS)

    @property
    def has_int4(self) -> bool:
        """True when the profile measured int4 sub-layers (it can cost plans with int4)."""
        return all(getattr(self, name) is not None for name in INT4_FIELDS)

    def check_costs(self, mask: SkipMask) -> None:
        """One error line (naming ``layersearch profile``) where this profile cannot cost ``mask``'s
        low-bit parts: checked before a run, not after its first draft."""
        for quant in QUANT_FIELDS:
            if getattr(mask, f"has_{quant}"):
                self._check_quant(quant)

    def sublayer_seconds(self, kind: str, precision: str, context: int, layer: int | None = None) -> float:
        """One sub-layer's cost (one token after ``context``): ``kind`` attention or mlp at
        ``precision`` full, int8, int4 or skip (0); ``layer`` matters for sliding-window attention."""
        if precision == "skip":
            return 0.0
        if precision in QUANT_FIELDS:
            self._check_quant(precision)
            if kind == "mlp":
                return getattr(self, f"{precision}_mlp_seconds")
            full_intercept = self.attention_seconds(context, layer) - self.attention_intercept
            slope = getattr(self, f"{precision}_attention_slope")
            scale = slope / self.attention_slope if self.attention_slope else 1.0
            return full_intercept * scale + getattr(self, f"{precision}_attention_intercept")
        if precision != "full":
            raise LayersearchError(f"unknown precision {precision!r} (full, int8, int4 or skip)")
        return self.mlp_seconds if kind == "mlp" else self.attention_seconds(context, layer)

    def draft_seconds(self, mask: SkipMask, context: int) -> float:
        """One draft forward (one token): base (with the low-bit head's saving where the plan asks
        for it) plus every sub-layer at the plan's precision."""
        self._check_mask(mask)
        head = 0.0
        if mask.head_precision != "full":
            self._check_quant(mask.head_precision)
            head = getattr(self, f"{mask.head_precision}_head_saving")
        if mask.is_skip_only and not self.attention_windows:  # the common case, in closed form
            attention = (self.num_layers - len(mask.attention)) * self.attention_seconds(context)
            return self.base_seconds + attention + (self.num_layers - len(mask.mlp)) * self.mlp_seconds
        per_layer = (self.sublayer_seconds(kind, mask.precision(kind, i), context, i)
                     for i in range(self.num_layers) for kind in ("attention", "mlp"))
        return max(self.base_seconds - head, 0.0) + sum(per_layer)

    def target_seconds(self, context: int) -> float:
        """One full forward (one token): base plus every sub-layer."""
        return self.base_seconds + self.num_layers * (self.attention_seconds(context) + self.mlp_seconds)

    def cost_coefficient(self, mask: SkipMask, context: int) -> float:
        """``c = t_draft / t_target`` (Leviathan et al.; SWIFT Eq. 6; KNN-SSD Eq. 11 when base is 0)."""
        return self.draft_seconds(mask, context) / self.target_seconds(context)

    def verify_ratio(self, k: int) -> float:
        """Cost of a forward over ``k`` tokens in units of a one-token forward.

        Measured for ``k <= len(verify_ratios)``; beyond that, a straight line through the
        last two measured points. A negative slope there can only be noise (more tokens never
        cost less), so it is taken as flat; with a single measured point the line is flat too,
        which is the papers' "verification is free" assumption.
        """
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise LayersearchError(f"verify length must be an integer >= 1, got {k!r}")
        measured = self.verify_ratios
        if k <= len(measured):
            return measured[k - 1]
        slope = max(0.0, measured[-1] - measured[-2]) if len(measured) >= 2 else 0.0
        return measured[-1] + slope * (k - len(measured))

    # ----- predictions --------------------------------------------------------------------
    def expected_speedup(
        self, M: float, alpha: float, mask: SkipMask, context: int, *, drafts: float | None = None
    ) -> float:
        """Expected wall-clock speedup over plain decoding (SWIFT Eq. 6 with a measured verify cost).

        One verification cycle emits ``M`` tokens (``M - 1`` accepted drafts plus the target's
        own). At acceptance rate ``alpha`` that took ``d = (M - 1) / alpha`` draft forwards of
        cost ``c`` each, then one target forward over ``d + 1`` tokens of cost
        ``verify_ratio(round(d) + 1)``, all in units of a one-token target forward::

            speedup = M / (d * c + verify_ratio(round(d) + 1))

        With every verify ratio 1 this is exactly Eq. 6, ``M*alpha / ((M - 1)*c + alpha)``.

        When nothing is accepted (``M == 1``) the draft count is not determined by M and alpha:

        * ``alpha > 0`` (or ``alpha`` anything with ``drafts=0``): no draft was proposed, the
          cycle is a plain forward, speedup ``1 / verify_ratio(1) = 1``;
        * ``alpha == 0``: drafts were proposed (the rate is accepted / drafted) and all
          rejected, but their number is unknown; we assume the least, one per cycle, giving
          ``1 / (c + verify_ratio(2))``, the most optimistic no-acceptance case (still < 1).

        Pass ``drafts`` (mean draft forwards per cycle, e.g. observed) to override ``d``.
        ``alpha == 0`` with ``M > 1`` is contradictory and raises.
        """
        if isinstance(M, bool) or not isinstance(M, (int, float)) or not M >= 1 or math.isinf(M):
            raise LayersearchError(f"mean generated length M must be a finite number >= 1, got {M!r}")
        _check_rate(alpha)
        d = self._drafts_per_cycle(M, alpha) if drafts is None else drafts
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d < math.inf:
            raise LayersearchError(f"drafts per cycle must be a finite number >= 0, got {d!r}")
        c = self.cost_coefficient(mask, context)
        return M / (d * c + self.verify_ratio(round(d) + 1))

    def step_seconds(self, context: int, drafted: int, draft_forwards: int, mask: SkipMask | None) -> float:
        """Predicted seconds of one decoding step at ``context``: ``draft_forwards`` masked
        forwards (the i-th at ``context + i``) and one target forward over ``drafted + 1`` tokens."""
        drafting = 0.0
        if draft_forwards and mask is not None:
            drafting = sum(self.draft_seconds(mask, context + i) for i in range(draft_forwards))
        return drafting + self.target_seconds(context) * self.verify_ratio(drafted + 1)

    def predicted_speedup_of_steps(self, steps: Sequence[Any]) -> float | None:
        """Speedup over plain decoding that the profile predicts for a run's own steps.

        ``steps`` are the loop's per-step records (``position``, ``drafted``, ``draft_forwards``,
        ``emitted``, ``mask``: :class:`~layersearch.runtime.step.StepOutcome`). Unlike
        :meth:`expected_speedup`, nothing is inferred from M and alpha: each step's actual draft
        forwards, verified length and context are costed, and plain decoding is costed as one
        target forward per emitted token at its own context.
        """
        speculative = plain = 0.0
        for step in steps:
            speculative += self.step_seconds(step.position, step.drafted, step.draft_forwards, step.mask)
            plain += sum(self.target_seconds(step.position + i) for i in range(step.emitted))
        return plain / speculative if speculative > 0 else None

    def tpt(self, alpha: float, gamma: int, mask: SkipMask, context: int) -> float:
        """KnapSpec tokens-per-time (tokens / second) for drafts of ``gamma`` tokens.

        ``E[tokens] = (1 - alpha**(gamma+1)) / (1 - alpha)`` (``gamma + 1`` when ``alpha == 1``)
        over ``gamma * t_draft + t_verify(gamma + 1)``, where the verification of
        ``gamma + 1`` tokens costs ``t_target * verify_ratio(gamma + 1)`` (measured, not free).
        """
        _check_rate(alpha)
        if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 0:
            raise LayersearchError(f"draft length gamma must be an integer >= 0, got {gamma!r}")
        tokens = gamma + 1.0 if alpha == 1 else (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)
        seconds = gamma * self.draft_seconds(mask, context) + self.target_seconds(context) * self.verify_ratio(gamma + 1)
        return tokens / seconds

    def best_tpt(self, alpha: float, mask: SkipMask, context: int, max_draft: int = 18) -> tuple[float, int]:
        """``(tpt, gamma)`` maximizing :meth:`tpt` over ``gamma = 1..max_draft`` (smallest on ties)."""
        if isinstance(max_draft, bool) or not isinstance(max_draft, int) or max_draft < 1:
            raise LayersearchError(f"max_draft must be an integer >= 1, got {max_draft!r}")
        best = (-math.inf, 0)
        for gamma in range(1, max_draft + 1):
            value = self.tpt(alpha, gamma, mask, context)
            if value > best[0]:
                best = (value, gamma)
        return best

    # ----- JSON ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the profile file."""
        return {
            **self.FILE.header(),
            "model": self.model.to_dict(),
            "device": self.device,
            "dtype": self.dtype,
            "torch_version": self.torch_version,
            "attention_slope": self.attention_slope,
            "attention_intercept": self.attention_intercept,
            "mlp_seconds": self.mlp_seconds,
            "base_seconds": self.base_seconds,
            "verify_ratios": list(self.verify_ratios),
            "contexts": list(self.contexts),
            "created": self.created,
            "attention_windows": list(self.attention_windows),
            "kernels": self.kernels,
            "kernel_timings": [t.to_dict() for t in self.kernel_timings],
            "kernel_dtypes": list(self.kernel_dtypes),
            **{name: getattr(self, name) for name in (*INT8_FIELDS, *INT4_FIELDS)},
            # provenance (schema 2)
            "transformers_version": self.transformers_version,
            "commit": self.commit,
            "compile_mode": self.compile_mode,
            "random_weights": self.random_weights,
            "step_overhead_seconds": self.step_overhead_seconds,
            "architecture": dict(self.architecture),
        }

    @classmethod
    def from_dict(cls, data: Any) -> "LatencyProfile":
        """Parse and validate a profile file's JSON object; raises LayersearchError naming the problem."""
        from layersearch.common.jsonfile import check_kind

        check_kind(data, "a latency profile")
        if not isinstance(data, dict):
            raise LayersearchError("profile file must hold a JSON object")
        if data.get("kind", KIND) != KIND:  # files from before the tag have none
            raise LayersearchError(f"not a latency profile (kind {data.get('kind')!r})")
        check_schema_version(data.get("schema_version"), READ_VERSIONS)
        if not isinstance(data.get("architecture", {}), dict):
            raise LayersearchError("architecture must be an object")
        missing = [key for key in _REQUIRED if key not in data]
        if missing:
            raise LayersearchError(f"profile file is missing {', '.join(repr(k) for k in missing)}")
        for key in ("verify_ratios", "contexts", "attention_windows", "kernel_timings", "kernel_dtypes"):
            if not isinstance(data.get(key, []), list):
                raise LayersearchError(f"{key} must be a list")
        return cls(
            model=ModelInfo.from_dict(data["model"]),
            device=data["device"],
            dtype=data["dtype"],
            torch_version=data["torch_version"],
            **{name: data[name] for name in _TIME_FIELDS},
            verify_ratios=tuple(data["verify_ratios"]),
            contexts=tuple(data.get("contexts", ())),
            created=data.get("created", ""),
            attention_windows=tuple(data.get("attention_windows", ())),
            kernels=data.get("kernels", "stock"),
            kernel_timings=tuple(KernelTiming.from_dict(t) for t in data.get("kernel_timings", [])),
            kernel_dtypes=tuple(data.get("kernel_dtypes", [])),
            **_optional_fields(data, (*INT8_FIELDS, *INT4_FIELDS)),
            transformers_version=data.get("transformers_version", ""),
            commit=data.get("commit", ""),
            compile_mode=data.get("compile_mode", "eager"),
            random_weights=data.get("random_weights", False),
            step_overhead_seconds=data.get("step_overhead_seconds"),
            architecture=dict(data.get("architecture", {})),
        )

    # ----- helpers ------------------------------------------------------------------------
    def _check_mask(self, mask: SkipMask) -> None:
        mask.check_model(self.model)

    def _check_int8(self) -> None:
        self._check_quant("int8")

    def _check_quant(self, quant: str) -> None:
        if not getattr(self, f"has_{quant}"):
            before = "plans" if quant == "int8" else "int4 plans"
            raise LayersearchError(f"this latency profile has no {quant} timings (measured before {before}, or on a device "
                                   f"without {quant} twins): measure it again with `layersearch profile` to cost {quant} plans")

    @staticmethod
    def _drafts_per_cycle(M: float, alpha: float) -> float:
        # See expected_speedup: M - 1 accepted drafts at rate alpha took (M - 1) / alpha drafts.
        if M == 1:
            return 1.0 if alpha == 0 else 0.0
        if alpha == 0:
            raise LayersearchError(f"acceptance rate 0 contradicts M = {M} > 1 (some drafts were accepted)")
        return (M - 1) / alpha


def _check_rate(alpha: Any) -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
        raise LayersearchError(f"acceptance rate alpha must be in [0, 1], got {alpha!r}")


def _non_negative(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LayersearchError(f"{what} must be a finite number, got {value!r}")
    if value < 0:
        raise LayersearchError(f"{what} is negative ({value!r}); times must be >= 0")
    return float(value)


def _checked_ratios(ratios: Any) -> tuple[float, ...]:
    values = tuple(ratios)
    if not values:
        raise LayersearchError("verify_ratios is empty (need at least the 1-token ratio 1.0)")
    for k, value in enumerate(values, start=1):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise LayersearchError(f"verify_ratios[{k - 1}] (k={k}) must be a finite number > 0, got {value!r}")
    if abs(values[0] - 1.0) > 1e-9:
        raise LayersearchError(f"verify_ratios[0] must be 1.0 (one token vs one token), got {values[0]!r}")
    return tuple(float(v) for v in values)


def _optional_fields(data: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The optional fields ``names`` of a profile's JSON object, None where absent (unchecked JSON
    values: LatencyProfile's __post_init__ checks them)."""
    return {name: data.get(name) for name in names}


def _checked_windows(windows: Any, num_layers: int) -> tuple[int | None, ...]:
    values = tuple(windows)
    if values and len(values) != num_layers:
        raise LayersearchError(f"attention_windows has {len(values)} entries but the model has {num_layers} layers")
    for value in values:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise LayersearchError(f"attention_windows must hold integers >= 1 or null, got {value!r}")
    return values


def _checked_contexts(contexts: Any) -> tuple[int, ...]:
    values = tuple(contexts)
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise LayersearchError(f"contexts must be integers >= 0, got {value!r}")
    return values


def architecture_text(architecture: dict[str, Any], info: ModelInfo) -> str:
    """``llama (30 layers, hidden 576, intermediate 1536, 9 heads, 3 kv heads, head dim 64, vocab 49152,
    bfloat16; fingerprint ...)``: the architecture fields known, else the model info's."""
    a = architecture
    parts = [f"{a.get('num_hidden_layers', info.num_layers)} layers", f"hidden {a.get('hidden_size', info.hidden_size)}"]
    for key, word in (("intermediate_size", "intermediate"), ("num_attention_heads", "heads"),
                      ("num_key_value_heads", "kv heads"), ("head_dim", "head dim"), ("vocab_size", "vocab")):
        if a.get(key) is not None:
            parts.append(f"{a[key]} {word}" if word in ("heads", "kv heads") else f"{word} {a[key]}")
    if a.get("dtype"):
        parts.append(str(a["dtype"]))
    return f"{a.get('model_type') or info.name} ({', '.join(parts)}; fingerprint {info.fingerprint})"


# ----- text of ``layersearch profile`` and its validation --------------------------------------------
def describe_profile(profile: "LatencyProfile") -> str:
    """One line: attention cost fit, MLP and base costs, the verify ratio at the longest length measured (at most 8)."""
    longest = min(8, len(profile.verify_ratios))  # never a ratio extrapolated past the sweep
    windows = [w for w in profile.attention_windows if w is not None]
    # A sliding layer reads at most window - 1 positions: say so, or the slope reads as per token of context.
    sliding = f" (n capped at window - 1 in {len(windows)} sliding layers)" if windows else ""
    return (
        f"t_attn(n) = {profile.attention_slope * 1e6:.3f} us * n + {profile.attention_intercept * 1e3:.3f} ms{sliding}, "
        f"t_mlp = {profile.mlp_seconds * 1e3:.3f} ms, base = {profile.base_seconds * 1e3:.2f} ms, "
        f"verify({longest})/verify(1) = {profile.verify_ratio(longest):.2f} on {profile.predicts_for} {profile.dtype}, "
        f"{profile.kernels} kernels, {profile.compile_mode}"
        + (", random weights" if profile.random_weights else "")
        + (f", loop overhead {profile.step_overhead_seconds * 1e3:.3f} ms/step" if profile.step_overhead_seconds is not None else "")
    )


def validation_mask(spec: str, info: ModelInfo) -> SkipMask:
    """A mask the validation of a profile times: ``uniform:R`` or a mask file, for this model."""
    if spec.startswith("uniform:"):
        from layersearch.common.checks import check_fraction

        ratio = check_fraction(_number(spec[len("uniform:"):], spec), f"mask {spec!r}")
        return SkipMask.uniform(info.num_layers, ratio, info)
    return SkipMask.load(spec, info)


def _number(text: str, spec: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise LayersearchError(f"mask {spec!r}: expected uniform:RATIO with a number, or a mask file") from None


def format_validation(rows: list[dict]) -> str:
    """Table: kind, what, context, measured ms, predicted ms, measured / predicted; then the spread."""
    lines = [f"{'kind':<14} {'what':<34} {'context':>7} {'measured':>10} {'predicted':>10} {'ratio':>6}"]
    for r in rows:
        lines.append(f"{r['kind']:<14} {r['what'][:34]:<34} {r['context']:>7} {1e3 * r['measured']:>8.2f}ms "
                     f"{1e3 * r['predicted']:>8.2f}ms {r['ratio']:>6.2f}")
    errors = sorted(abs(r["ratio"] - 1) for r in rows if r["ratio"] is not None)
    if errors:
        median = errors[len(errors) // 2] if len(errors) % 2 else sum(errors[len(errors) // 2 - 1 : len(errors) // 2 + 1]) / 2
        lines.append(f"|measured / predicted - 1|: median {median:.3f}, worst {errors[-1]:.3f} over {len(errors)} rows")
    return "\n".join(lines)
