"""Measure a LatencyProfile in situ: the real decode path, on the current device and dtype.

Sub-layer costs are not timed in isolation: a micro-benchmark of one attention module would
miss the Python and dispatch overhead that a draft forward actually pays. Instead, one-token
forwards through :func:`~layersearch.runtime.forward.forward_tokens` onto a KV cache holding
``n`` positions are timed with four masks applied by
:func:`~layersearch.models.skipping.skipping`:

    full          nothing skipped                  T_full(n)
    no_attention  every attention sub-layer        T_noattn(n)
    no_mlp        every MLP sub-layer              T_nomlp(n)
    nothing       everything (layers bypassed)     T_base(n)

and the differences, divided by the layer count L, give one sub-layer's cost:
``t_attn(n) = (T_full - T_noattn) / L``, ``t_mlp = (T_full - T_nomlp) / L``,
``base = T_base``. What neither single-kind run removes (the two norms, residual adds and the
call of each layer, only saved when a whole layer is bypassed) is split equally between the two
sub-layers, so that the profile's target time reproduces the measured full forward. Then
``t_attn(n) = a*n + b`` is fitted by least squares with ``a, b >= 0``, and the cost of a
forward over ``k`` tokens relative to one is measured at the middle context (KnapSpec's
latency model; the verify ratio is what SWIFT Eq. 6 assumes to be 1).

Sliding-window layers read at most ``window - 1`` cached positions, so the fit is against the
layers' mean *effective* context ``mean_i min(n, w_i - 1)`` and the windows are stored in the
profile (:attr:`LatencyProfile.attention_windows`): attention cost stops growing past them.
A sliding layer keeps only its window, so it cannot be cropped back to a shorter context once
committed; such models get one prefill per measured context.

Precision: where the model can run int8 twins (:mod:`layersearch.models.precision`: CPU,
float32), four more settings are timed in the same interleaved rounds: every sub-layer int8,
int8 with every attention skipped, int8 with every MLP skipped, and ``nothing`` with the int8
LM head. The same differences give one int8 sub-layer's cost and the int8 head's saving.
Where it can run int4 twins (:mod:`layersearch.models.int4`: CPU float32 or bfloat16, CUDA
bfloat16) the same four settings are timed in int4, in groups of 128 (or the largest group
size that divides every width: a group's size barely moves the cost).

Kernels (:mod:`layersearch.kernels.select`): with ``kernels="auto"`` the verification sweep is
first timed under every kernel set, interleaved round by round, at the middle context; the
choice (:func:`~layersearch.profiling.profile.pick_kernels`) and every sweep are recorded in the profile,
and all of its timings are then measured with the chosen kernels.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from datetime import datetime, timezone
from typing import Callable, Sequence

import torch
from transformers import DynamicCache

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.models.skipping import decoder_layers, skipping
from layersearch.profiling.profile import KernelTiming, LatencyProfile, kernel_choice_text, pick_kernels
from layersearch.kernels.select import KERNELS, check_kernels, model_kernels, numba_available
from layersearch.runtime.cache import can_truncate, new_cache, sliding_windows, truncate_cache
from layersearch.runtime.forward import forward_tokens
from layersearch.runtime.timing import Clock

SETTINGS = ("full", "no_attention", "no_mlp", "nothing")
#: The int8 settings, timed where the model can run int8 twins.
INT8_SETTINGS = ("int8", "int8_no_attention", "int8_no_mlp", "int8_head")


def measure_profile(
    model: torch.nn.Module,
    info: ModelInfo,
    *,
    contexts: Sequence[int] = (64, 256, 512, 1024),
    max_verify: int = 16,
    repeats: int = 5,
    progress: Callable[[str], None] | None = None,
    kernels: str = "stock",
) -> LatencyProfile:
    """Measure ``model``'s latency profile on its device and dtype (median of ``repeats`` timings).

    ``kernels``: ``stock``, ``numba`` or ``auto`` (time both, keep the faster; see the module doc).
    ``progress(message)`` is called once per measured context and once for the verify sweep.
    The model is left as it was: masks and kernels are applied only inside ``with`` blocks.
    """
    num_layers = len(decoder_layers(model))
    contexts = _checked_arguments(model, info, num_layers, contexts, max_verify, repeats)
    report = progress or (lambda message: None)
    middle = contexts[len(contexts) // 2]
    candidates = _candidates(model, kernels)
    chosen, sweeps = candidates[0], ()
    if len(candidates) > 1:
        sweeps = _kernel_sweeps(model, middle, max_verify, repeats, candidates)
        chosen = pick_kernels(sweeps, baseline=candidates[0])
        for sweep in sweeps:
            report(f"{sweep.kernels} kernels at context {middle}: one token {sweep.one_token_seconds * 1e3:.2f} ms, "
                   f"verify({max_verify})/verify(1) = {sweep.verify_ratios[-1]:.2f}")
        report(kernel_choice_text(sweeps, chosen))
    with model_kernels(model, chosen):
        profile = _measure(model, info, contexts, middle, max_verify, repeats, report)
    if not sweeps:  # one kernel set: its sweep is the profile's own
        sweeps = (KernelTiming(chosen, profile.target_seconds(middle), profile.verify_ratios),)
    return replace(profile, kernels=chosen, kernel_timings=sweeps)


def _candidates(model: torch.nn.Module, kernels: str) -> tuple[str, ...]:
    """The kernel sets to time: all of them for ``auto`` on CPU (stock first, the baseline), stock
    alone where numba is not installed."""
    if kernels == "auto":
        return KERNELS if model.device.type == "cpu" and numba_available() else ("stock",)
    return (check_kernels(kernels),)


def _kernel_sweeps(
    model: torch.nn.Module, context: int, max_verify: int, repeats: int, candidates: Sequence[str]
) -> tuple[KernelTiming, ...]:
    """Each kernel set's verify sweep at ``context``, the sets interleaved round by round."""
    clock = Clock(model.device)
    samples = {name: [[] for _ in range(max_verify)] for name in candidates}
    with torch.inference_mode():
        cache = _prefilled_cache(model, context)
        for round_ in range(repeats + 1):  # round 0 is the warm-up
            order = candidates[round_ % len(candidates):] + candidates[: round_ % len(candidates)]
            for name in order:
                with model_kernels(model, name):
                    for k, seconds in enumerate(_verify_seconds(model, cache, context, max_verify, clock)):
                        if round_:
                            samples[name][k].append(seconds)
    sweeps = []
    for name in candidates:
        medians = [statistics.median(values) for values in samples[name]]
        sweeps.append(KernelTiming(name, medians[0], tuple(1.0 if k == 0 else t / medians[0] for k, t in enumerate(medians))))
    return tuple(sweeps)


def _measure(
    model: torch.nn.Module, info: ModelInfo, contexts: list[int], middle: int, max_verify: int, repeats: int, report
) -> LatencyProfile:
    """The profile's timings with whatever kernels the model runs now."""
    masks = _setting_masks(len(decoder_layers(model)), _can_run_int8(model), _int4_group(model))
    clock = Clock(model.device)
    timings: dict[int, dict[str, float]] = {}
    ratios: tuple[float, ...] = ()
    windows = sliding_windows(model)
    with torch.inference_mode():
        # One prefill at the longest context, cropped down for the shorter ones: the cache then
        # holds exactly n positions, as if prefilled to n, at a fraction of the prefill time.
        cache = _prefilled_cache(model, contexts[-1])
        for n in reversed(contexts):
            if not can_truncate(cache, n):  # sliding layers evicted what n needs: prefill again
                cache = _prefilled_cache(model, n)
            truncate_cache(cache, n)
            timings[n] = _time_settings(model, cache, n, masks, repeats, clock)
            report(_describe(n, timings[n]))
            if n == middle:
                ratios = _verify_ratios(model, cache, n, max_verify, repeats, clock)
                report(f"verify 1..{max_verify} tokens at context {n}: x{ratios[-1]:.2f} for {max_verify}")
    return _profile(model, info, timings, ratios, windows)


# ----- measurement ----------------------------------------------------------------------------
def _setting_masks(num_layers: int, int8: bool = False, int4_group: int | None = None) -> dict[str, SkipMask]:
    """The plan of each timed setting (the int8 ones only with ``int8``, the int4 ones in groups
    of ``int4_group`` only when it is given)."""
    every = tuple(range(num_layers))
    masks = {
        "full": SkipMask.none(num_layers),
        "no_attention": SkipMask(num_layers, attention=every),
        "no_mlp": SkipMask(num_layers, mlp=every),
        "nothing": SkipMask.everything(num_layers),
    }
    if int8:
        masks.update({
            "int8": SkipMask.none(num_layers).kept_in_int8(head=False),
            "int8_no_attention": SkipMask(num_layers, attention=every).kept_in_int8(head=False),
            "int8_no_mlp": SkipMask(num_layers, mlp=every).kept_in_int8(head=False),
            "int8_head": SkipMask.everything(num_layers).with_int8((), (), True),
        })
    if int4_group is not None:
        in_groups = lambda mask: replace(mask, int4_group_size=int4_group)  # noqa: E731
        masks.update({
            "int4": in_groups(SkipMask.none(num_layers).kept_in_int4(head=False)),
            "int4_no_attention": in_groups(SkipMask(num_layers, attention=every).kept_in_int4(head=False)),
            "int4_no_mlp": in_groups(SkipMask(num_layers, mlp=every).kept_in_int4(head=False)),
            "int4_head": in_groups(SkipMask.everything(num_layers).with_int4((), (), True)),
        })
    return masks


def _int4_group(model: torch.nn.Module) -> int | None:
    """The group size the int4 timings are taken with: 128 (the default) where it divides every
    Linear's width, else the largest that does (a group's size barely moves the cost); None
    where the model cannot run int4 twins (device, dtype) or no group size fits."""
    from layersearch.models.int4 import GROUP_SIZES, check_int4_device

    try:
        check_int4_device(model)
    except LayersearchError:
        return None
    widths = {m.in_features for m in model.modules() if isinstance(m, torch.nn.Linear)}
    fitting = [g for g in GROUP_SIZES if all(w % g == 0 for w in widths)]
    return 128 if 128 in fitting else max(fitting, default=None)


def _can_run_int8(model: torch.nn.Module) -> bool:
    """True where the model can run int8 twins (CPU, float32, torch's int8 engine present)."""
    from layersearch.models.precision import check_int8_device

    try:
        check_int8_device(model)
    except LayersearchError:
        return False
    return True


def _prefilled_cache(model: torch.nn.Module, length: int) -> DynamicCache:
    """A cache holding ``length`` positions of random token ids (content does not affect timing)."""
    generator = torch.Generator().manual_seed(0)
    vocab = model.get_input_embeddings().num_embeddings
    ids = torch.randint(vocab, (length,), generator=generator)
    cache = new_cache(model)
    forward_tokens(model, ids, 0, cache, keep=1)
    return cache


def _timed_forward(model: torch.nn.Module, cache: DynamicCache, n: int, tokens: list[int], clock: Clock, head=None) -> float:
    """Seconds of one forward of ``tokens`` at position ``n`` (``head``: a draft head in place of
    the LM head); the cache is cut back to ``n`` after."""
    start = clock.now()
    forward_tokens(model, tokens, n, cache, **({} if head is None else {"head": head, "keep": 1}))
    seconds = clock.now() - start
    # Outside the timed region: the decoder crops once per verification, not per draft step.
    truncate_cache(cache, n)
    return seconds


def _time_settings(
    model: torch.nn.Module, cache: DynamicCache, n: int, masks: dict[str, SkipMask], repeats: int, clock: Clock
) -> dict[str, float]:
    """Median one-token forward time at context ``n`` under each mask of :data:`SETTINGS`."""
    token = [n % model.get_input_embeddings().num_embeddings]
    names = tuple(masks)
    samples: dict[str, list[float]] = {name: [] for name in names}
    from layersearch.models.precision import plan_head

    heads = {name: plan_head(model, mask) for name, mask in masks.items()}  # None: the model's own
    # Round 0 is the warm-up. Settings are interleaved, in a rotating order, so slow drift and
    # bursts of load on a shared machine hit them all alike instead of biasing one difference.
    for round_ in range(repeats + 1):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            with skipping(model, masks[name]):
                seconds = _timed_forward(model, cache, n, token, clock, heads[name])
            if round_:
                samples[name].append(seconds)
    return {name: statistics.median(values) for name, values in samples.items()}


def _verify_ratios(
    model: torch.nn.Module, cache: DynamicCache, n: int, max_verify: int, repeats: int, clock: Clock
) -> tuple[float, ...]:
    """Median time of a full forward over k = 1..max_verify tokens at context ``n``, over k = 1."""
    vocab = model.get_input_embeddings().num_embeddings
    tokens = [(n + i) % vocab for i in range(max_verify)]
    samples: list[list[float]] = [[] for _ in range(max_verify)]
    for round_ in range(repeats + 1):  # round 0 is the warm-up
        for k, seconds in enumerate(_verify_seconds(model, cache, n, max_verify, clock)):
            if round_:
                samples[k].append(seconds)
    medians = [statistics.median(values) for values in samples]
    return tuple(1.0 if k == 1 else t / medians[0] for k, t in enumerate(medians, start=1))


def _verify_seconds(model: torch.nn.Module, cache: DynamicCache, n: int, max_verify: int, clock: Clock) -> list[float]:
    """Seconds of one full forward over k = 1..max_verify tokens at context ``n``."""
    vocab = model.get_input_embeddings().num_embeddings
    tokens = [(n + i) % vocab for i in range(max_verify)]
    return [_timed_forward(model, cache, n, tokens[:k], clock) for k in range(1, max_verify + 1)]


# ----- from timings to a profile ----------------------------------------------------------------
def _profile(
    model: torch.nn.Module,
    info: ModelInfo,
    timings: dict[int, dict[str, float]],
    ratios: tuple[float, ...],
    windows: tuple[int | None, ...] = (),
) -> LatencyProfile:
    contexts = sorted(timings)
    per_context = [_sublayer_seconds(timings[n], info.num_layers) for n in contexts]
    windows = windows if any(w is not None for w in windows) else ()
    effective = [mean_effective_context(n, windows) for n in contexts]
    slope, intercept = fit_line(effective, [attention for attention, _ in per_context])
    low_bit: dict[str, float] = {}
    for quant in ("int8", "int4"):  # the same differences, with every kept sub-layer's twin
        if not all(quant in timings[n] for n in contexts):
            continue
        per_context_q = [_sublayer_seconds(_as_full_settings(timings[n], quant), info.num_layers) for n in contexts]
        slope_q, intercept_q = fit_line(effective, [attention for attention, _ in per_context_q])
        low_bit.update({
            f"{quant}_attention_slope": slope_q, f"{quant}_attention_intercept": intercept_q,
            f"{quant}_mlp_seconds": statistics.fmean(mlp for _, mlp in per_context_q),
            f"{quant}_head_saving": max(0.0, statistics.fmean(timings[n]["nothing"] - timings[n][f"{quant}_head"] for n in contexts)),
        })
    return LatencyProfile(
        model=info,
        device=device_name(model.device),
        dtype=str(model.dtype).removeprefix("torch."),
        torch_version=torch.__version__,
        attention_slope=slope,
        attention_intercept=intercept,
        mlp_seconds=statistics.fmean(mlp for _, mlp in per_context),
        base_seconds=statistics.fmean(timings[n]["nothing"] for n in contexts),
        verify_ratios=ratios,
        contexts=tuple(contexts),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        attention_windows=windows,
        **low_bit,
    )


def _as_full_settings(times: dict[str, float], quant: str = "int8") -> dict[str, float]:
    """The ``quant`` timings under the names :func:`_sublayer_seconds` reads (``nothing`` is shared)."""
    return {"full": times[quant], "no_attention": times[f"{quant}_no_attention"], "no_mlp": times[f"{quant}_no_mlp"],
            "nothing": times["nothing"]}


def mean_effective_context(context: int, windows: Sequence[int | None]) -> float:
    """Mean over layers of the cached positions attention reads: ``min(n, w - 1)``, ``n`` if full."""
    if not windows:
        return float(context)
    return statistics.fmean(context if w is None else min(context, w - 1) for w in windows)


def _sublayer_seconds(times: dict[str, float], num_layers: int) -> tuple[float, float]:
    """(one attention, one MLP) sub-layer's seconds at one context, from the four timings."""
    attention = (times["full"] - times["no_attention"]) / num_layers
    mlp = (times["full"] - times["no_mlp"]) / num_layers
    layers = (times["full"] - times["nothing"]) / num_layers
    shared = max(0.0, layers - attention - mlp)  # norms, residual adds, the layer call
    # Noise can make a tiny sub-layer's difference negative; a cost is never below zero.
    return max(0.0, attention + shared / 2), max(0.0, mlp + shared / 2)


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``y = a*x + b`` with ``a, b >= 0`` (costs never fall with context length)."""
    if len(xs) != len(ys) or not xs:
        raise LayersearchError("fit_line needs equally many x and y values, at least one")
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread if spread else 0.0
    if slope <= 0:
        return 0.0, max(0.0, mean_y)
    intercept = mean_y - slope * mean_x
    if intercept < 0:
        # Best line through the origin instead: the constrained optimum when b would be negative.
        return sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs), 0.0
    return slope, intercept


def device_name(device: torch.device) -> str:
    """``"cpu"``, or ``"cuda (<GPU name>)"`` so a profile says which accelerator it describes."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return device.type


def _checked_arguments(
    model: torch.nn.Module, info: ModelInfo, num_layers: int, contexts: Sequence[int], max_verify: int, repeats: int
) -> list[int]:
    if info.num_layers != num_layers:
        raise LayersearchError(f"model info {info.name!r} says {info.num_layers} layers but the model has {num_layers}")
    values = sorted(set(contexts))
    if not values or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in values):
        raise LayersearchError(f"contexts must be integers >= 1, got {tuple(contexts)!r}")
    for what, value in (("max_verify", max_verify), ("repeats", repeats)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise LayersearchError(f"{what} must be an integer >= 1, got {value!r}")
    limit = getattr(model.config, "max_position_embeddings", None)
    if isinstance(limit, int) and values[-1] + max_verify > limit:
        raise LayersearchError(
            f"context {values[-1]} + {max_verify} verify tokens exceeds the model's {limit} positions"
        )
    return values


def _describe(n: int, times: dict[str, float]) -> str:
    ms = {name: 1000 * seconds for name, seconds in times.items()}
    return (
        f"context {n}: full {ms['full']:.2f} ms, no attention {ms['no_attention']:.2f} ms, "
        f"no MLP {ms['no_mlp']:.2f} ms, embedding+head {ms['nothing']:.2f} ms"
        + "".join(f"; {q} {ms[q]:.2f} ms, {q} head saves {ms['nothing'] - ms[q + '_head']:.2f} ms"
                  for q in ("int8", "int4") if q in ms)
    )


#: Contexts of :func:`quick_profile` unless a caller names its own.
QUICK_CONTEXTS = (64, 256, 1024)


def quick_profile(
    model: torch.nn.Module, info, *, contexts: Sequence[int] = QUICK_CONTEXTS, max_verify: int = 12,
    repeats: int = 2, progress=None, kernels: str = "stock",
):
    """A fast, rough latency profile for when none was given: the one helper every command and
    study uses. ``contexts`` that do not fit the model's position limit (with ``max_verify``
    tokens on top) are dropped; if none fits, the longest that does is measured."""
    limit = getattr(model.config, "max_position_embeddings", None) or 10**9
    fitting = tuple(sorted({n for n in contexts if n + max_verify <= limit})) or (max(1, limit - max_verify),)
    return measure_profile(model, info, contexts=fitting, max_verify=max_verify, repeats=repeats, progress=progress,
                           kernels=kernels)


# ----- validation: the profile's per-forward predictions against fresh timings -------------------
def validate_profile(
    model: torch.nn.Module,
    profile: LatencyProfile,
    masks: Sequence[SkipMask],
    *,
    contexts: Sequence[int] | None = None,
    verify_lengths: Sequence[int] = (1, 4, 8),
    repeats: int = 5,
    progress: Callable[[str], None] | None = None,
) -> list[dict]:
    """Time what the decode loop runs and compare it with ``profile``'s predictions.

    For each context ``n`` (default: the profile's own): a one-token forward under each mask
    (a draft forward; the empty mask is the target's one-token forward) against
    :meth:`LatencyProfile.draft_seconds`, and a full forward over ``k`` tokens against
    ``target_seconds(n) * verify_ratio(k)``. Rows: ``{"kind", "what", "context", "measured",
    "predicted", "ratio"}`` with seconds and ratio = measured / predicted. The caller checks
    that ``profile`` belongs to ``model`` (:meth:`LatencyProfile.check_model`).
    """
    contexts = tuple(contexts or profile.contexts)
    report = progress or (lambda message: None)
    clock = Clock(model.device)
    vocab = model.get_input_embeddings().num_embeddings
    rows: list[dict] = []
    with torch.inference_mode():
        cache = _prefilled_cache(model, max(contexts))
        for n in sorted(contexts, reverse=True):
            if not can_truncate(cache, n):
                cache = _prefilled_cache(model, n)
            truncate_cache(cache, n)
            token = [n % vocab]
            for mask in masks:
                seconds = _median_forward(model, cache, n, token, clock, repeats, mask)
                rows.append(_row("draft forward", mask.short_string() if not mask.is_empty else "full (target)", n,
                                 seconds, profile.draft_seconds(mask, n)))
            tokens = [(n + i) % vocab for i in range(max(verify_lengths))]
            for k in verify_lengths:
                seconds = _median_forward(model, cache, n, tokens[:k], clock, repeats, None)
                rows.append(_row("verify", f"{k} tokens", n, seconds, profile.target_seconds(n) * profile.verify_ratio(k)))
            report(f"validated context {n}")
    return rows


def _median_forward(model, cache, n: int, tokens: list[int], clock: Clock, repeats: int, mask: SkipMask | None) -> float:
    samples = []
    for round_ in range(repeats + 1):  # round 0 is the warm-up
        if mask is None:
            seconds = _timed_forward(model, cache, n, tokens, clock)
        else:
            with skipping(model, mask):
                seconds = _timed_forward(model, cache, n, tokens, clock)
        if round_:
            samples.append(seconds)
    return statistics.median(samples)


def _row(kind: str, what: str, context: int, measured: float, predicted: float) -> dict:
    return {"kind": kind, "what": what, "context": context, "measured": measured, "predicted": predicted,
            "ratio": measured / predicted if predicted > 0 else None}
