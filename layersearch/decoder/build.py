"""build_decoder: a :class:`~layersearch.decoder.spec.DecoderSpec` and a loaded model -> a ready decoder.

All the wiring between a spec and the runtime lives here: the plug-ins come from their
registries (drafters, lookahead rules, verifiers in :mod:`layersearch.runtime`, mask sources in
:mod:`layersearch.decoder.sources`), the files a spec names (DISCO classifier, KNN router, SD² steering
file, latency profile, independent draft model) are read and checked against the model, and the
spec is returned *resolved*: bound to the model's fingerprint, its mask inline.

Order, so bad input fails before slow work: :func:`read_spec_files` needs no model (call it
before loading one); :func:`build_decoder` checks everything against the model before decoding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from layersearch.common.errors import LayersearchError
from layersearch.decoder.sources import MASK_SOURCES, SourceInputs, load_or_measure_profile
from layersearch.decoder.spec import DecoderSpec, MaskSourceSpec, check_sampling, compile_wanted, quant_plan_conflict

__all__ = ["BuiltDecoder", "SpecFiles", "assemble", "build_decoder", "load_draft_model", "load_or_measure_profile", "read_spec_files"]


@dataclass(frozen=True)
class SpecFiles:
    """The files of a spec that are read before the model loads (None where it names none)."""

    disco: Any = None  # DiscoFile of a ``disco`` lookahead
    router: Any = None  # Router of a ``router`` mask source


def read_spec_files(spec: DecoderSpec) -> SpecFiles:
    """Read and validate the DISCO and router files ``spec`` names (no model needed)."""
    disco = router = None
    if spec.lookahead.file is not None:
        from layersearch.disco.file import DiscoFile

        disco = DiscoFile.load(spec.lookahead.file)
    if spec.mask_source.kind == "router":
        from layersearch.knn.router import Router

        router = Router.load(_named(spec.mask_source.file, "mask_source.file"))
    return SpecFiles(disco, router)


def _named(path: str | None, field: str) -> str:
    """The file ``path`` a spec field must name (the spec's checks made sure it does)."""
    if path is None:
        raise LayersearchError(f"the spec's {field} names no file")
    return path


class BuiltDecoder:
    """A spec made runnable on a loaded model: ``run`` decodes token ids.

    ``speculative`` is the :class:`~layersearch.runtime.loop.SpeculativeDecoder` (None for a
    plain spec, which runs transformers' ``generate``); reuse the object for a stream of inputs,
    since a controller (SWIFT on the fly) learns across them. ``profile`` is the latency profile
    that predicts a fixed mask's speedup, when the spec names one. ``kernels`` is the CPU kernel
    set every run uses (``stock`` or ``numba``: :mod:`layersearch.kernels.select`).
    """

    def __init__(self, loaded: Any, spec: DecoderSpec, speculative: Any, profile: Any = None, kernels: str = "stock",
                 twins: Any = None, compile: bool = False) -> None:
        self.loaded = loaded
        self.spec = spec
        self.speculative = speculative
        self.profile = profile
        self.kernels = kernels
        self.twins = tuple(twins or ())  # the int8 / int4 twins its draft plans run (empty: the drafts need none)
        self.compile = compile  # captured forwards (a plain spec: transformers' static-cache generate)

    @property
    def controller(self) -> Any:
        """The decode loop's controller (None for a plain spec)."""
        return None if self.speculative is None else self.speculative.controller

    def sampling(self, do_sample: bool | None = None, temperature: float | None = None, top_p: float | None = None,
                 seed: int | None = None, top_k: int | None = None) -> Any:
        """The spec's sampling settings with the given ones replacing them (a SamplingConfig): a
        temperature > 0 samples, ``do_sample=True`` alone samples at the spec's temperature or 1.0,
        and a contradiction (``do_sample=True, temperature=0``) is refused."""
        from layersearch.runtime.sampling import SamplingConfig

        base = self.spec.sampling
        if do_sample is None:  # the one rule (check_sampling): a temperature > 0 samples
            do_sample = base.do_sample if temperature is None else temperature > 0
        if temperature is None:
            temperature = (base.temperature if base.do_sample else 1.0) if do_sample else 0.0
        check_sampling(do_sample, temperature)
        return SamplingConfig(temperature, base.top_p if top_p is None else top_p, base.seed if seed is None else seed,
                              base.top_k if top_k is None else top_k)

    def run(self, input_ids: Any, max_new_tokens: int, *, sampling: Any = None,
            on_tokens: Callable[[Sequence[int]], None] | None = None, eos_token_ids: Any = None,
            stop_when: Callable[[Sequence[int]], bool] | None = None) -> Any:
        """Decode up to ``max_new_tokens`` after ``input_ids`` (a GenerationResult); ``on_tokens``
        gets the new tokens as they are committed (for a plain spec: all of them at the end).
        ``eos_token_ids`` (None: the model's) and ``stop_when`` end a speculative run as
        :meth:`~layersearch.runtime.loop.SpeculativeDecoder.generate` says; a plain spec takes neither."""
        from layersearch.runtime.baseline import hf_generate
        from layersearch.kernels.select import model_kernels

        sampling = self.sampling() if sampling is None else sampling
        self.check_twins()
        with model_kernels(self.loaded.model, self.kernels):  # plain and speculative decoding alike
            if self.speculative is not None:
                return self.speculative.generate(input_ids, max_new_tokens, sampling=sampling, on_tokens=on_tokens,
                                                 eos_token_ids=eos_token_ids, stop_when=stop_when)
            if eos_token_ids is not None or stop_when is not None:
                raise LayersearchError("a plain spec runs transformers' generate: it takes no eos_token_ids or stop_when")
            static = {"cache_implementation": "static"} if self.compile else {}  # transformers' own captured path
            result = hf_generate(self.loaded.model, input_ids, max_new_tokens, sampling=sampling, **static)
        if on_tokens is not None and result.token_ids:
            on_tokens(result.token_ids)
        return result

    def check_twins(self) -> None:
        """One error line where the model can no longer run the twins its drafts use: the check
        that built them, again before each run, since the model may have been moved since (a
        float32 model's int4 twins are refused after ``model.to(torch.float16)``, as they are
        when the model is loaded in float16)."""
        from layersearch.models.int4 import Int4Twins, check_int4_device
        from layersearch.models.precision import check_int8_device

        for twins in self.twins:
            (check_int4_device if isinstance(twins, Int4Twins) else check_int8_device)(self.loaded.model)

    def run_stats(self, result: Any) -> dict[str, Any]:
        """What ``generate`` reports of a :meth:`run`'s result: its stats, the kernels, SWIFT's view
        of the input (closing it) for a mask optimized on the fly, and the latency profile's
        predicted speedup for the run's own steps (as bench checks it)."""
        from layersearch.decoder.spec import registry_names

        stats = {**result.stats.to_dict(), "kernels": self.kernels}
        if self.spec.mask_source.kind in registry_names()["on_the_fly"]:
            from layersearch.swift.options import input_summary

            stats["swift"] = input_summary(self.controller, result.stats)
        if self.profile is not None and result.stats.steps:
            stats["predicted_speedup"] = self.profile.predicted_speedup_of_steps(result.stats.steps)
            stats["predicted_on"] = self.profile.predicts_for  # the device whose costs the profile holds
        return stats


def encode_prompts(loaded: Any, prompts: Sequence[str], max_new_tokens: int, where: Callable[[int], str],
                   length: str = "max_new_tokens") -> list[Any]:
    """Each prompt's token ids ``[1, n]``, every one checked to fit the model's context with
    ``max_new_tokens`` more before any is decoded (``where(index)`` names a prompt, ``length``
    where the number of new tokens comes from)."""
    from layersearch.models.context import check_context

    from layersearch.models.context import check_text_fits

    for index, text in enumerate(prompts):  # a prompt that certainly overflows is refused before tokenizing
        check_text_fits(loaded, text, max_new_tokens, where(index), length)
    encoded = [loaded.tokenizer(text, return_tensors="pt").input_ids for text in prompts]
    for index, ids in enumerate(encoded):
        check_context(loaded, ids.shape[1] + max_new_tokens, f"{where(index)} ({ids.shape[1]} tokens) + {length}", (length,))
    return encoded


def format_run(index: int, text: str, stats: dict[str, Any]) -> str:
    """``generate``'s text output of one prompt: its index, the text, and a line of
    :meth:`BuiltDecoder.run_stats` (predicted speedup and SWIFT's summary where present)."""
    from layersearch.runtime.stats import format_stats
    from layersearch.swift.options import summary_text

    predicted = stats.get("predicted_speedup")
    extra = f" predicted-speedup={predicted:.2f} on {stats.get('predicted_on', '?')}" if predicted is not None else ""
    extra += summary_text(stats["swift"]) if "swift" in stats else ""
    return f"--- prompt {index}\n{text}\n[{format_stats(stats)}{extra}]"


def build_decoder(
    loaded: Any, spec: DecoderSpec, files: SpecFiles | None = None, *, kernels: str = "auto", draft: Any = None,
) -> BuiltDecoder:
    """The decoder ``spec`` describes on ``loaded`` (a LoadedModel); ``files`` from
    :func:`read_spec_files` when read already; ``draft``: the spec's draft model already loaded
    (a LoadedModel, so a search building many decoders loads it once). Every file is checked
    against the model first. ``kernels`` (auto, stock, numba): auto runs the spec's latency
    profile's choice, stock without a profile (the kernels are a property of the machine, not
    of the spec)."""

    files = read_spec_files(spec) if files is None else files
    info = loaded.info
    spec.check_model(info)
    _check_length(loaded, spec)
    if files.router is not None:
        _prefixed(spec.mask_source.file, files.router.check_model, info)
    steering, file_mask = _steering(spec, info)  # SD²: its mask unless the spec gives one
    draft = _draft_model(spec, loaded, steering, draft)  # an independent drafter (or None)
    if draft is not None and spec.profile:
        raise LayersearchError(f"{spec.steering}: drafts with model {draft.info.name!r}; profile predicts layer-skip drafts only", fields="profile")
    if steering is not None and _self_quant(spec, draft):
        raise LayersearchError(f"{spec.steering}: steering hooks the drafter's full-precision sub-layers; "
                               f"it takes no {spec.drafter.quant} self-draft (drafter.quant without a draft model)")
    if steering is not None and files.router is not None:
        raise LayersearchError("steering was trained for one mask; it takes no mask_source router:FILE (which switches masks)",
                               fields=("steering", "mask_source"))
    if files.disco is not None:
        _prefixed(spec.lookahead.file, files.disco.check_model, info)
        if file_mask is None and spec.mask_source.kind == "default":
            file_mask = files.disco.mask  # the mask the classifier was trained for
    kind = "none" if spec.plain or draft is not None else spec.mask_source.kind
    if _self_quant(spec, draft) and kind == "default" and file_mask is None:
        from layersearch.masks.mask import SkipMask

        file_mask = SkipMask.none(info.num_layers, info)  # the low-bit self-draft skips nothing unless told to
    policy = _policy(spec)
    source = MASK_SOURCES[kind].build(SourceInputs(loaded, spec.mask_source, policy, spec.profile, file_mask, files.router))
    fixed = source.get("mask")
    quant = spec.drafter.quant
    if quant is not None and _self_quant(spec, draft) and fixed is not None and not fixed.is_skip_only:  # a file's plan
        raise LayersearchError(quant_plan_conflict(quant, fixed), fields=("drafter.quant", "mask_source"))
    resolved = _resolved(spec, info, kind, source.get("mask"))
    compiled = compile_wanted(spec.compile, loaded.model.device.type)
    from layersearch.kernels.select import choose_kernels

    # After every check that names an option; compiled forwards run the numba kernels as custom ops.
    chosen = choose_kernels(kernels, _profile(spec.profile, info), loaded.model.dtype)
    if spec.plain:
        return BuiltDecoder(loaded, resolved, None, kernels=chosen, compile=compiled)
    twins = _twins(loaded, spec, draft, source.get("mask"))  # built once, now: not inside the first generation's timing
    speculative = _speculative(loaded, spec, files, source, steering, draft, compiled)
    profile = _profile(spec.profile, info) if "mask" in source else None
    if profile is not None:  # a plan the profile cannot cost is refused now, not after its first draft
        plan = source["mask"] if source["mask"] is not None else None
        if plan is not None and spec.drafter.quant is not None and _self_quant(spec, draft):
            plan = plan.kept_in(spec.drafter.quant)
        if plan is not None:
            profile.check_costs(plan)
    return BuiltDecoder(loaded, resolved, speculative, profile, kernels=chosen, twins=twins, compile=compiled)


def _self_quant(spec: DecoderSpec, draft: Any) -> bool:
    """True when the spec drafts with the model itself in int8 or int4 (``drafter.quant`` without a draft model)."""
    return spec.drafter.quant is not None and draft is None and spec.drafter.model is None


def _twins(loaded: Any, spec: DecoderSpec, draft: Any, mask: Any) -> tuple[Any, ...]:
    """The twins the drafts run (one error line where the device cannot run them): the self-draft's
    precision, and every low-bit precision of the source's plan."""
    from layersearch.models.int4 import model_group_size
    from layersearch.models.precision import plan_twins, twins_for

    built: dict[str, Any] = {}
    quant = spec.drafter.quant
    if quant is not None and _self_quant(spec, draft):  # the int4 self-draft's group size as its drafter fits it
        built[quant] = twins_for(loaded.model, quant, model_group_size(loaded.model))
    if mask is not None:
        built.update(plan_twins(loaded.model, mask))
    return tuple(built.values())


def _check_length(loaded: Any, spec: DecoderSpec) -> None:
    """The spec's default length must fit the model's context (a spec file may claim anything)."""
    limit = getattr(loaded.model.config, "max_position_embeddings", None)
    if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit < spec.max_new_tokens:
        raise LayersearchError(f"the spec's max_new_tokens ({spec.max_new_tokens}) exceeds model {loaded.info.name!r}'s "
                               f"context length of {limit}")


def _draft_vocab(loaded: Any, spec: DecoderSpec) -> Any:
    """FR-Spec's reduced draft head (a VocabSubset of the target's tokenizer), None for the full head."""
    if not spec.drafter.vocab:
        return None
    from layersearch.frspec.vocab import draft_vocabulary

    return draft_vocabulary(loaded, spec.drafter.vocab, "drafter.vocab")


def _speculative(loaded: Any, spec: DecoderSpec, files: SpecFiles, source: dict[str, Any], steering: Any, draft: Any,
                 compiled: bool = False) -> Any:
    """The SpeculativeDecoder through :func:`assemble`: the mask source's mask inline (or its
    controller), the DISCO file's trained rule, the steering file's matrices, the loaded draft model."""
    lookahead = files.disco.lookahead() if files.disco is not None else None
    if "controller" not in source:  # the source's mask, or none: an independent drafter drafts without one
        spec = replace(spec, mask_source=MaskSourceSpec("mask", mask=source["mask"]) if "mask" in source else MaskSourceSpec("none"))
    return assemble(loaded.model, spec, controller=source.get("controller"), draft=None if draft is None else draft.model,
                    vocab=_draft_vocab(loaded, spec), lookahead=lookahead, steering=None if steering is None else steering.params,
                    compile=compiled)


def _draft_head(vocab: Any) -> Any:
    """FR-Spec's draft head for the VocabSubset ``vocab``: the runtime's drafters take it as any
    :class:`~layersearch.runtime.drafters.base.DraftHead`, so the runtime never imports FR-Spec."""
    from layersearch.frspec.head import DraftHeads

    return DraftHeads(vocab)


def assemble(model: Any, spec: DecoderSpec, *, controller: Any = None, draft: Any = None, vocab: Any = None,
             lookahead: Any = None, drafter: Any = None, steering: Any = None, compile: bool | None = None) -> Any:
    """The decode loop ``spec`` describes on ``model`` (a loaded torch module): the one place a
    :class:`~layersearch.runtime.loop.SpeculativeDecoder` is made.

    The spec's plug-ins come from their registries by name; its mask is the mask source's inline
    mask (kind ``mask``; ``none``: no mask). Objects already made replace what the spec can only
    name: ``controller`` (a method's controller: it chooses the masks), ``draft`` (the spec's
    draft model, loaded), ``vocab`` (the VocabSubset of ``spec.drafter.vocab``), ``lookahead``
    (a trained rule, DISCO's, in place of the spec's), ``drafter`` (a drafter a method bench
    compares, in place of the registry's) and ``steering`` (SD²'s steering parameters, which wrap
    the drafter). :func:`build_decoder` calls this once it has loaded the spec's files."""
    from layersearch.runtime import LOOKAHEADS, VERIFIERS
    from layersearch.runtime.loop import SpeculativeDecoder
    from layersearch.runtime.drafters import make_drafter

    if spec.plain:
        raise LayersearchError("a plain spec runs transformers' generate: it has no decode loop to assemble")
    source = spec.mask_source
    if controller is None and source.kind not in ("mask", "none"):
        raise LayersearchError(f"mask source {source.kind!r} is made from the loaded model and its files: use build_decoder")
    mask = source.mask if controller is None and source.kind == "mask" else None
    if lookahead is None:
        if spec.lookahead.name not in LOOKAHEADS:
            raise LayersearchError(f"lookahead {spec.lookahead.name!r} reads its trained file: use build_decoder")
        lookahead = LOOKAHEADS[spec.lookahead.name](_policy(spec))
    if drafter is None and spec.drafter.vocab and vocab is None:
        raise LayersearchError("the spec's drafter.vocab needs its loaded vocabulary subset")
    if drafter is None and spec.drafter.model is not None and draft is None:
        raise LayersearchError("the spec's drafter.model needs the loaded draft model")
    verifier, branching = VERIFIERS[spec.verifier]()
    if drafter is None:
        head = None if vocab is None else _draft_head(vocab)
        # a quantization without a draft model is the drafter's own int8 draft (the loader quantizes a draft model)
        own_quant = spec.drafter.quant if spec.drafter.model is None and draft is None else None
        drafter = make_drafter(spec.drafter.name, draft_model=draft, branching=branching, head=head, quant=own_quant)
    if steering is not None:  # drafts a chain: tree verification falls back to it
        from layersearch.steer import SteeredDrafter

        drafter = SteeredDrafter(drafter, steering)
    if compile is None:
        compile = compile_wanted(spec.compile, model.device.type)
    return SpeculativeDecoder(model, mask, sampling=sampling_config(spec.sampling), lookahead=lookahead, drafter=drafter,
                              verifier=verifier, controller=controller, compile=compile)


def sampling_config(sampling: Any) -> Any:
    """The decode loop's SamplingConfig of a spec's SamplingSpec (temperature 0 unless sampling)."""
    from layersearch.runtime.sampling import SamplingConfig

    return SamplingConfig(sampling.temperature_used, sampling.top_p, sampling.seed, sampling.top_k)


def _policy(spec: DecoderSpec) -> Any:
    from layersearch.runtime.draft_policy import DraftPolicy

    return DraftPolicy(spec.lookahead.max_draft, spec.lookahead.threshold)


def _resolved(spec: DecoderSpec, info: Any, kind: str, mask: Any) -> DecoderSpec:
    """``spec`` bound to the model, with the mask it drafts with inline (or no mask source)."""
    if mask is not None:
        file = spec.mask_source.file if spec.mask_source.kind == "mask" else None
        source = MaskSourceSpec("mask", mask=mask, file=file)
    elif kind in ("default", "none"):
        source = MaskSourceSpec("none")
    else:
        source = spec.mask_source
    return replace(spec, model=replace(spec.model, info=info), mask_source=source)


def _prefixed(path: str | None, check: Callable[[Any], None], info: Any) -> None:
    """``check(info)``, its error prefixed with the file it is about."""
    try:
        check(info)
    except LayersearchError as exc:
        raise LayersearchError(f"{path}: {exc}") from None


def _profile(path: str | None, info: Any) -> Any:
    if not path:
        return None
    from layersearch.profiling.profile import LatencyProfile

    return LatencyProfile.load(path, model=info)


# ----- SD²: the steering file and an independent draft model -----------------------------------
def _steering(spec: DecoderSpec, info: Any) -> tuple[Any, Any]:
    """The steering file checked against the model and the spec, and the mask to use (the
    self-drafter file's; None for a file trained for a draft model); (None, None) without one."""
    path = spec.steering
    if not path:
        return None, None
    from layersearch.steer import SteeringFile

    from layersearch.runtime.drafters import drafter_entry

    kind, entry = spec.mask_source.kind, drafter_entry(spec.drafter.name)
    if spec.plain or kind in ("knapsack", "swift") or not entry.runs_model:
        raise LayersearchError(
            "steering steers the layer-skip drafter with its one mask; it takes no plain, mask_source knapsack, "
            f"mask_source swift or {'a drafter that runs no model' if entry.runs_model else 'drafter ' + spec.drafter.name}",
            fields=("steering", "plain", "mask_source", "drafter"),
        )
    steering = SteeringFile.load(path)
    _prefixed(path, steering.check_verifier, info)
    if steering.drafter is not None:
        # steering reaches a draft model that drafts alone
        if kind in ("uniform", "mask") or entry.mixes or not entry.takes_draft_model:
            raise LayersearchError(
                f"{path}: trained for draft model {steering.drafter.name!r}; leave out mask_source / drafter",
                fields=("mask_source", "drafter"),
            )
        return steering, None
    if spec.drafter.model is not None:
        raise LayersearchError(f"{path}: trained for the layer-skip self-drafter; it takes no drafter.model", fields="drafter.model")
    if kind == "uniform" or (kind == "mask" and _sublayers(spec.mask_source.mask) != _sublayers(steering.mask)):
        raise LayersearchError(f"{path}: steering was trained for its own mask; leave out mask_source", fields="mask_source")
    return steering, steering.mask


def _draft_model(spec: DecoderSpec, loaded: Any, steering: Any, preloaded: Any = None) -> Any:
    """The spec's independent draft model (else the steering file's drafter), loaded and checked
    (``preloaded``: that model, already loaded and checked)."""
    ref = spec.drafter.model.ref if spec.drafter.model is not None else None
    if ref is None and steering is not None and steering.drafter is not None:
        ref = steering.drafter.name
    drafter = None
    # a steering file checks the weights it was trained with: quantize only after that check
    quant_after = spec.drafter.quant if steering is not None else None
    if ref is not None:
        drafter = preloaded if preloaded is not None and spec.drafter.model is not None else \
            load_draft_model(ref, loaded, spec.model.device, spec.model.dtype,
                             quant=None if quant_after else spec.drafter.quant)
        if drafter is preloaded:
            quant_after = None
    if drafter is not None and preloaded is drafter:
        from layersearch.models.quantize import is_quantized

        quantized = is_quantized(drafter.model)
        if quantized != (spec.drafter.quant is not None):
            raise LayersearchError(f"the preloaded draft model is {'' if quantized else 'not '}"
                                   f"quantized, but the spec's drafter.quant is {spec.drafter.quant!r}")
    if steering is not None:
        def check(_: Any) -> None:
            if drafter is not None:
                steering.check_models(loaded.info, drafter.info, drafter.model)
            steering.check_params(loaded.model if drafter is None else drafter.model)  # matrices vs the real drafter

        _prefixed(spec.steering, check, None)
    if quant_after is not None and drafter is not None:
        from layersearch.models.quantize import quantize_draft

        quantize_draft(drafter.model, quant_after)
    return drafter


def load_draft_model(ref: str, loaded: Any, device: str, dtype: str | None, progress: Any = None,
                     quant: str | None = None) -> Any:
    """Draft model ``ref`` on ``device`` / ``dtype`` (None: the device's default), its vocabulary
    checked against the verifier's; ``progress`` hears about a one-time GGUF conversion;
    ``quant`` ("int8"): its weights quantized (:mod:`layersearch.models.quantize`)."""
    from layersearch.models.loading import default_dtype, load_model
    from layersearch.models.quantize import check_quant, quantize_draft
    from layersearch.runtime.drafters import ModelDrafter
    from layersearch.models.modeldir import check_model_config

    check_quant(quant, device, dtype)
    check_model_config(ref, "draft model")  # sizes checked before transformers allocates from them
    drafter = load_model(ref, device=device, dtype=dtype or default_dtype(device), progress=progress)
    ModelDrafter(drafter.model).check_target(loaded.model)
    if quant is not None:
        quantize_draft(drafter.model, quant)
    return drafter


def _sublayers(mask: Any) -> tuple:
    return tuple(sorted(mask.attention)), tuple(sorted(mask.mlp))
