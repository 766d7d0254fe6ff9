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

Captured (``compile_mode="captured:<backend>"``, what the runtime runs on a GPU): the same
settings and the verification sweep are timed through compiled forwards over one static KV cache
(:class:`~layersearch.runtime.backend.CapturedForwards`, one compiled forward per setting and per
verified length, each compiled in the warm-up round, outside the timings). A static cache's
attention reads its whole capacity, so the attention slope there is the mask's small share; the
capacity is the longest context plus the verified tokens, rounded up as the runtime rounds it.
Tests pass the ``eager`` backend (the same full-graph capture without code generation); on CUDA
the default ``inductor`` backend makes each forward a CUDA graph. Where the model runs int8 twins,
the int8 settings are timed captured as well, as the runtime runs int8 plans.

Both modes also time the decode loop's own per-step overhead: our loop's plain decoding (nothing
skipped, in the profile's mode) for a few tokens, the time outside its forwards per step.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

import torch
from transformers import Cache, PreTrainedModel

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.models.skipping import decoder_layers, skipping
from layersearch.profiling.profile import KernelTiming, LatencyProfile, kernel_choice_text, pick_kernels
from layersearch.kernels import KERNEL_DTYPES
from layersearch.kernels.select import KERNELS, check_kernels, model_kernels, numba_available
from layersearch.runtime.backend import compile_key
from layersearch.runtime.cache import can_truncate, new_cache, sliding_windows, truncate_cache
from layersearch.runtime.forward import forward_tokens
from layersearch.runtime.timing import Clock

#: Tokens of the plain decode timed for the loop's per-step overhead.
OVERHEAD_TOKENS = 16

SETTINGS = ("full", "no_attention", "no_mlp", "nothing")
#: The int8 settings, timed where the model can run int8 twins.
INT8_SETTINGS = ("int8", "int8_no_attention", "int8_no_mlp", "int8_head")


def measure_profile(
    model: PreTrainedModel,
    info: ModelInfo,
    *,
    contexts: Sequence[int] = (64, 256, 512, 1024),
    max_verify: int = 16,
    repeats: int = 5,
    progress: Callable[[str], None] | None = None,
    kernels: str = "stock",
    compile_mode: str = "eager",
    random_weights: bool = False,
) -> LatencyProfile:
    """Measure ``model``'s latency profile on its device and dtype (median of ``repeats`` timings).

    ``kernels``: ``stock``, ``numba`` or ``auto`` (time both, keep the faster; see the module doc).
    ``compile_mode``: ``eager``, or ``captured:inductor`` / ``captured:eager`` (the forwards
    compiled by that dynamo backend over a static cache, see the module doc). ``random_weights``
    records that ``model`` was built from its config alone (:func:`random_weights_model`).
    ``progress(message)`` is called once per measured context and once for the verify sweep.
    The model is left as it was: masks and kernels are applied only inside ``with`` blocks.
    """
    num_layers = len(decoder_layers(model))
    contexts = _checked_arguments(model, info, num_layers, contexts, max_verify, repeats)
    report = progress or (lambda message: None)
    middle = contexts[len(contexts) // 2]
    backend = _captured_backend(compile_mode)
    if backend is not None:
        from layersearch.runtime.cache import has_sliding_window

        if has_sliding_window(model):
            raise LayersearchError("a captured profile needs a static cache, and sliding-window attention keeps a ring "
                                   "cache: measure this model eager", fields="compile_mode")
        profile = _measure_captured(model, info, contexts, middle, max_verify, repeats, report, backend)
        profile = replace(profile, kernel_timings=(KernelTiming("stock", profile.target_seconds(middle), profile.verify_ratios),))
        return _with_provenance(profile, model, compile_mode, random_weights, report)
    candidates = _candidates(model, kernels)
    chosen = candidates[0]
    sweeps: tuple[KernelTiming, ...] = ()
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
        # The dtypes numba ran: a profile from before half precision was routed names none.
        timed = KERNEL_DTYPES if any(sweep.kernels == "numba" for sweep in sweeps) else ()
        return _with_provenance(replace(profile, kernels=chosen, kernel_timings=sweeps, kernel_dtypes=timed), model,
                                compile_mode, random_weights, report)


def _captured_backend(compile_mode: str) -> str | None:
    """The dynamo backend of a captured ``compile_mode`` (None for eager)."""
    from layersearch.profiling.profile import COMPILE_MODES

    if compile_mode not in COMPILE_MODES:
        raise LayersearchError(f"compile_mode must be one of {', '.join(COMPILE_MODES)}, got {compile_mode!r}",
                               fields="compile_mode")
    return None if compile_mode == "eager" else compile_mode.split(":", 1)[1]


def _with_provenance(profile: LatencyProfile, model: PreTrainedModel, compile_mode: str, random_weights: bool,
                     report: Callable[[str], None]) -> LatencyProfile:
    """``profile`` with where and how it was measured, and the loop's per-step overhead."""
    from layersearch.common.provenance import layersearch_commit, package_version

    overhead = loop_overhead(model, _captured_backend(compile_mode))
    report(f"decode loop: {overhead * 1e3:.3f} ms per step outside its forwards")
    return replace(profile, device=device_name(model.device), transformers_version=package_version("transformers"),
                   commit=layersearch_commit(), compile_mode=compile_mode, random_weights=random_weights,
                   step_overhead_seconds=overhead, architecture=model_architecture(model))


def model_architecture(model: PreTrainedModel) -> dict:
    """The config fields that determine ``model``'s costs (:data:`~layersearch.profiling.profile.ARCHITECTURE_FIELDS`)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = getattr(config, "num_attention_heads", None)
    head_dim = getattr(config, "head_dim", None) or (config.hidden_size // heads if heads else None)
    fields = {key: getattr(config, key, None) for key in ("model_type", "num_hidden_layers", "hidden_size",
                                                        "intermediate_size", "num_attention_heads", "num_key_value_heads",
                                                        "vocab_size")}
    fields["num_key_value_heads"] = fields["num_key_value_heads"] or heads
    return {**fields, "head_dim": head_dim, "dtype": str(next(model.parameters()).dtype).removeprefix("torch.")}


def loop_overhead(model: PreTrainedModel, backend: str | None = None, tokens: int = OVERHEAD_TOKENS) -> float:
    """Seconds per step our decode loop spends outside its forwards, decoding plainly (nothing
    skipped) ``tokens`` tokens; captured with ``backend`` (its compiles in a first, untimed run)."""
    from layersearch.runtime.backend import compile_with
    from layersearch.runtime.loop import SpeculativeDecoder

    if backend is not None:
        compile_with(model, _compiler(model, backend))
    decoder = SpeculativeDecoder(model, SkipMask.none(len(decoder_layers(model))), compile=backend is not None)
    vocab = _vocab_size(model)
    prompt = torch.randint(vocab, (16,), generator=torch.Generator().manual_seed(0)).tolist()
    samples = []
    for round_ in range(3):  # round 0 compiles (captured) and warms up
        stats = decoder.generate(prompt, tokens, eos_token_ids=()).stats
        if round_:
            samples.append((stats.bookkeeping_seconds or 0.0) / max(1, stats.decode_tokens + 1))
    return statistics.median(samples)


def _vocab_size(model: PreTrainedModel) -> int:
    """Rows of ``model``'s input embedding: the token ids a timing may feed it."""
    embedding = model.get_input_embeddings()
    if not isinstance(embedding, torch.nn.Embedding):  # every supported family embeds with one
        raise LayersearchError(f"{type(model).__name__}: timing needs an nn.Embedding input embedding, not {type(embedding).__name__}")
    return embedding.num_embeddings


def _candidates(model: PreTrainedModel, kernels: str) -> tuple[str, ...]:
    """The kernel sets to time: all of them for ``auto`` on CPU (stock first, the baseline), stock
    alone where numba is not installed."""
    if kernels == "auto":
        return KERNELS if model.device.type == "cpu" and numba_available() else ("stock",)
    return (check_kernels(kernels),)


def _kernel_sweeps(
    model: PreTrainedModel, context: int, max_verify: int, repeats: int, candidates: tuple[str, ...]
) -> tuple[KernelTiming, ...]:
    """Each kernel set's verify sweep at ``context``, the sets interleaved round by round."""
    clock = Clock(model.device)
    samples: dict[str, list[list[float]]] = {name: [[] for _ in range(max_verify)] for name in candidates}  # [k][round]
    with torch.inference_mode():
        cache = _prefilled_cache(model, context)
        for round_ in range(repeats + 1):  # round 0 is the warm-up
            order = candidates[round_ % len(candidates):] + candidates[: round_ % len(candidates)]
            for name in order:
                with model_kernels(model, name):
                    for k, seconds in enumerate(_verify_seconds(model, cache, context, max_verify, clock)):
                        if round_:
                            samples[name][k].append(seconds)
    sweeps: list[KernelTiming] = []
    for name in candidates:
        medians = [statistics.median(values) for values in samples[name]]
        sweeps.append(KernelTiming(name, medians[0], tuple(1.0 if k == 0 else t / medians[0] for k, t in enumerate(medians))))
    return tuple(sweeps)


def _measure(
    model: PreTrainedModel, info: ModelInfo, contexts: list[int], middle: int, max_verify: int, repeats: int, report
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


def _measure_captured(
    model: PreTrainedModel, info: ModelInfo, contexts: list[int], middle: int, max_verify: int, repeats: int, report,
    backend: str,
) -> LatencyProfile:
    """The profile's timings through forwards compiled by ``backend`` over one static cache."""
    from layersearch.runtime.backend import CapturedForwards

    masks = _setting_masks(len(decoder_layers(model)), _can_run_int8(model))
    forwards = CapturedForwards(model, max_entries=len(masks) + max_verify + 1, compiler=_compiler(model, backend))
    clock = Clock(model.device)
    timings: dict[int, dict[str, float]] = {}
    ratios: tuple[float, ...] = ()
    with torch.inference_mode():
        cache = forwards.static_cache(contexts[-1] + max_verify)
        _prefill_static(model, cache, contexts[-1])
        for n in reversed(contexts):  # a static cache writes over later positions; the causal mask hides them
            timings[n] = _time_captured_settings(forwards, cache, n, masks, repeats, clock)
            report(_describe(n, timings[n]) + f" (captured, {backend})")
            if n == middle:
                ratios = _captured_verify_ratios(forwards, cache, n, max_verify, repeats, clock)
                report(f"verify 1..{max_verify} tokens at context {n}, captured: x{ratios[-1]:.2f} for {max_verify}")
    report(f"compiled {forwards.stats().entries} forwards in {forwards.stats().compile_seconds:.1f} s (outside the timings)")
    return _profile(model, info, timings, ratios, ())


def _compiler(model: PreTrainedModel, backend: str):
    """The compiler of ``model``'s shared captured forwards where it uses ``backend`` (so whatever
    counts or configures that compiler sees the profile's compiles too), else a fresh one."""
    from layersearch.runtime.backend import captured_forwards
    from layersearch.runtime.backend import dynamo_compiler

    shared = captured_forwards(model)
    return shared.compiler if shared.backend == backend else dynamo_compiler(backend)


def _prefill_static(model: PreTrainedModel, cache, length: int) -> None:
    """Fill the static ``cache``'s first ``length`` positions from random token ids."""
    from layersearch.runtime.cache import seat_static_cache

    vocab = _vocab_size(model)
    ids = torch.randint(vocab, (length,), generator=torch.Generator().manual_seed(0))
    seat_static_cache(cache, 0)
    forward_tokens(model, ids, 0, cache, keep=1)


def _captured_seconds(forwards, cache, plan: SkipMask | None, tokens: list[int], n: int, clock: Clock) -> float:
    """Seconds of one compiled forward of ``tokens`` at position ``n`` under ``plan`` (None: the
    model; a plan with the int8 head ends in the int8 twins' head), all logits kept as
    verification keeps them (one for one token)."""
    head = None
    if plan is not None and plan.int8_head:
        from layersearch.models.precision import int8_twins

        head = int8_twins(forwards.model).head
    ids = torch.as_tensor(tokens, device=forwards.model.device)  # [k]
    key = compile_key(forwards.model, plan, len(tokens), len(tokens), head, cache)  # the decode loop's own key
    view = forwards.view(plan)
    start = clock.now()
    forwards.forward(view, key, cache, ids, n, len(tokens), head)
    return clock.now() - start


def _time_captured_settings(forwards, cache, n: int, masks: dict[str, SkipMask], repeats: int, clock: Clock) -> dict[str, float]:
    """:func:`_time_settings` through compiled forwards (round 0 compiles and warms up)."""
    vocab = _vocab_size(forwards.model)
    names = tuple(masks)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats + 1):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            plan = None if masks[name].is_empty else masks[name]  # the full model, as the loop's target forward
            seconds = _captured_seconds(forwards, cache, plan, [n % vocab], n, clock)
            if round_:
                samples[name].append(seconds)
    return {name: statistics.median(values) for name, values in samples.items()}


def _captured_verify_ratios(forwards, cache, n: int, max_verify: int, repeats: int, clock: Clock) -> tuple[float, ...]:
    """Median compiled forward over k = 1..max_verify tokens at ``n``, each divided by the k = 1
    median of the same sweep."""
    vocab = _vocab_size(forwards.model)
    tokens = [(n + i) % vocab for i in range(max_verify)]
    samples: list[list[float]] = [[] for _ in range(max_verify)]
    for round_ in range(repeats + 1):  # round 0 compiles and warms up
        for k in range(1, max_verify + 1):
            seconds = _captured_seconds(forwards, cache, None, tokens[:k], n, clock)
            if round_:
                samples[k - 1].append(seconds)
    medians = [statistics.median(values) for values in samples]
    return tuple(1.0 if k == 1 else t / medians[0] for k, t in enumerate(medians, start=1))


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


def _int4_group(model: PreTrainedModel) -> int | None:
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


def _can_run_int8(model: PreTrainedModel) -> bool:
    """True where the model can run int8 twins (CPU, float32, torch's int8 engine present)."""
    from layersearch.models.precision import check_int8_device

    try:
        check_int8_device(model)
    except LayersearchError:
        return False
    return True


def _prefilled_cache(model: PreTrainedModel, length: int) -> Cache:
    """A cache holding ``length`` positions of random token ids (content does not affect timing)."""
    generator = torch.Generator().manual_seed(0)
    vocab = _vocab_size(model)
    ids = torch.randint(vocab, (length,), generator=generator)
    cache = new_cache(model)
    forward_tokens(model, ids, 0, cache, keep=1)
    return cache


def _timed_forward(model: PreTrainedModel, cache: Cache, n: int, tokens: list[int], clock: Clock, head=None) -> float:
    """Seconds of one forward of ``tokens`` at position ``n`` (``head``: a draft head in place of
    the LM head); the cache is cut back to ``n`` after."""
    start = clock.now()
    forward_tokens(model, tokens, n, cache, **({} if head is None else {"head": head, "keep": 1}))
    seconds = clock.now() - start
    # Outside the timed region: the decoder crops once per verification, not per draft step.
    truncate_cache(cache, n)
    return seconds


def _time_settings(
    model: PreTrainedModel, cache: Cache, n: int, masks: dict[str, SkipMask], repeats: int, clock: Clock
) -> dict[str, float]:
    """Median one-token forward time at context ``n`` under each mask of :data:`SETTINGS`."""
    token = [n % _vocab_size(model)]
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
    model: PreTrainedModel, cache: Cache, n: int, max_verify: int, repeats: int, clock: Clock
) -> tuple[float, ...]:
    """Median time of a full forward over k = 1..max_verify tokens at context ``n``, over k = 1."""
    vocab = _vocab_size(model)
    tokens = [(n + i) % vocab for i in range(max_verify)]
    samples: list[list[float]] = [[] for _ in range(max_verify)]
    for round_ in range(repeats + 1):  # round 0 is the warm-up
        for k, seconds in enumerate(_verify_seconds(model, cache, n, max_verify, clock)):
            if round_:
                samples[k].append(seconds)
    medians = [statistics.median(values) for values in samples]
    return tuple(1.0 if k == 1 else t / medians[0] for k, t in enumerate(medians, start=1))


def _verify_seconds(model: PreTrainedModel, cache: Cache, n: int, max_verify: int, clock: Clock) -> list[float]:
    """Seconds of one full forward over k = 1..max_verify tokens at context ``n``."""
    vocab = _vocab_size(model)
    tokens = [(n + i) % vocab for i in range(max_verify)]
    return [_timed_forward(model, cache, n, tokens[:k], clock) for k in range(1, max_verify + 1)]


# ----- from timings to a profile ----------------------------------------------------------------
def _profile(
    model: PreTrainedModel,
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
    low_bit: dict[str, Any] = {}  # LatencyProfile's int8_* and int4_* fields by name (floats)
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
    """``"cpu: <CPU model>"`` or ``"cuda: <GPU name>"``: the device a profile's predictions are for."""
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    if device.type == "cpu":
        from layersearch.common.provenance import cpu_name

        return f"cpu: {cpu_name()}"
    return device.type


def _checked_arguments(
    model: PreTrainedModel, info: ModelInfo, num_layers: int, contexts: Sequence[int], max_verify: int, repeats: int
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
    model: PreTrainedModel, info, *, contexts: Sequence[int] = QUICK_CONTEXTS, max_verify: int = 12,
    repeats: int = 2, progress=None, kernels: str = "stock", compile_mode: str = "eager",
):
    """A fast, rough latency profile for when none was given: the one helper every command and
    study uses. ``contexts`` that do not fit the model's position limit (with ``max_verify``
    tokens on top) are dropped; if none fits, the longest that does is measured."""
    limit = getattr(model.config, "max_position_embeddings", None) or 10**9
    fitting = tuple(sorted({n for n in contexts if n + max_verify <= limit})) or (max(1, limit - max_verify),)
    return measure_profile(model, info, contexts=fitting, max_verify=max_verify, repeats=repeats, progress=progress,
                           kernels=kernels, compile_mode=compile_mode)


# ----- validation: the profile's per-forward predictions against fresh timings -------------------
def validate_profile(
    model: PreTrainedModel,
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
    that ``profile`` belongs to ``model`` (:meth:`LatencyProfile.check_model`). A captured profile
    is validated captured, with its own dynamo backend (compiles in the warm-up rounds).
    """
    contexts = tuple(contexts or profile.contexts)
    report = progress or (lambda message: None)
    clock = Clock(model.device)
    backend = _captured_backend(profile.compile_mode)
    if backend is not None:
        return _validate_captured(model, profile, masks, contexts, verify_lengths, repeats, report, backend)
    vocab = _vocab_size(model)
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


def _validate_captured(model, profile: LatencyProfile, masks: Sequence[SkipMask], contexts, verify_lengths, repeats: int,
                       report, backend: str) -> list[dict]:
    """:func:`validate_profile`'s rows through forwards compiled by ``backend`` over one static cache."""
    from layersearch.runtime.backend import CapturedForwards

    clock = Clock(model.device)
    vocab = _vocab_size(model)
    forwards = CapturedForwards(model, max_entries=len(masks) + len(verify_lengths) + 1, compiler=_compiler(model, backend))
    rows: list[dict] = []
    with torch.inference_mode():
        cache = forwards.static_cache(max(contexts) + max(verify_lengths))
        _prefill_static(model, cache, max(contexts))
        for n in sorted(contexts, reverse=True):
            def median(plan, tokens):
                samples = [_captured_seconds(forwards, cache, plan, tokens, n, clock) for _ in range(repeats + 1)]
                return statistics.median(samples[1:])  # the first compiles and warms up

            for mask in masks:
                seconds = median(None if mask.is_empty else mask, [n % vocab])
                rows.append(_row("draft forward", mask.short_string() if not mask.is_empty else "full (target)", n,
                                 seconds, profile.draft_seconds(mask, n)))
            tokens = [(n + i) % vocab for i in range(max(verify_lengths))]
            for k in verify_lengths:
                rows.append(_row("verify", f"{k} tokens", n, median(None, tokens[:k]),
                                 profile.target_seconds(n) * profile.verify_ratio(k)))
            report(f"validated context {n} (captured, {backend})")
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
