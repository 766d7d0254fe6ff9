"""``layersearch generate``'s options -> a :class:`~layersearch.decoder.spec.DecoderSpec`, with every
check that needs no model, so bad input fails before the model loads; errors name the options.
The spec grammar the API takes too (``KIND:MODEL@QUANT``) is :mod:`layersearch.decoder.fragments`'.
This module imports no torch at its top level (the parsers are built for ``--help``)."""

from __future__ import annotations

from typing import Any, Mapping

from layersearch.common.errors import LayersearchError
from layersearch.decoder.fragments import draft_model_item, named_spec  # noqa: F401 (named_spec: generate wraps a spec file's errors)
from layersearch.commands.mask_option import mask_source, parse_mask_option  # noqa: F401 (parse_mask_option: tests read it here)
from layersearch.decoder.spec import (DecoderSpec, DrafterSpec, LookaheadSpec, ModelRef, ModelSpec, SamplingSpec,
                                      lookahead_names)


def drafter_from_options(name: str, draft_model: str | None, vocab: int, quant: str | None, device: str,
                         dtype: str | None) -> DrafterSpec:
    """``generate``'s drafter: ``--drafter NAME``, ``--draft-model MODEL[@int8]`` (this module's
    grammar), ``--draft-vocab`` and ``--draft-quant`` (``quant``, checked already), which must
    agree with an ``@int8``; that one is checked against the device and dtype before any load."""
    from layersearch.models.quantize import check_quant

    ref, named = draft_model_item(draft_model) if draft_model else (None, None)
    if named is not None and quant is not None and named != quant:
        raise LayersearchError(f"--draft-model {draft_model} and --draft-quant {quant} name different weights")
    if named is not None:
        check_quant(named, device, dtype)
    return DrafterSpec(name, ref, vocab, quant or named)



# ----- ``layersearch generate``'s options -> a DecoderSpec ---------------------------------------
#: ``generate`` options that do not describe the decoder: they apply with ``--spec`` too.
RUN_OPTIONS = ("command", "prompt", "prompts", "max_new_tokens", "json", "threads", "spec", "save_spec", "kernels", "compile")



def spec_from_options(options: Any, defaults: Mapping[str, Any] | None = None) -> DecoderSpec:
    """The spec that ``generate``'s options describe (``options``: an object with its option names as
    attributes, as ``layersearch generate``'s parsed arguments), with every check that needs no model,
    so bad input fails before the model loads; errors name the options. With ``options.spec`` (a
    spec file) that file's spec, and no option that describes the decoder may differ from its
    default in ``defaults`` (every option's default)."""
    from layersearch.runtime.sampling import SamplingConfig

    o = options
    if getattr(o, "spec", None):
        given = [f"--{dest.replace('_', '-')}" for dest, default in (defaults or {}).items()
                 if dest not in RUN_OPTIONS and getattr(o, dest, default) != default]
        if given:
            raise LayersearchError(f"--spec {o.spec} describes the decoder; it takes no {', '.join(given)}")
        return DecoderSpec.load(o.spec)
    from layersearch.common.checks import check_int

    check_int(o.top_k, "--top-k", minimum=0)  # 0: every token
    sampling = SamplingConfig(temperature=o.temperature, top_p=o.top_p, seed=o.seed, top_k=o.top_k)  # its wording on bad values
    if o.baseline and o.mask:
        raise LayersearchError("--baseline runs plain decoding; it takes no --mask")
    _check_draft_options(o)
    _check_option_values(o)
    _check_draft_vocab(o)
    check_draft_model_options(o)
    source = mask_source(o)  # a bad mask file fails here, before the model load
    return DecoderSpec(
        model=ModelSpec(ModelRef.given(o.model), None, o.device, o.dtype),
        plain=o.baseline,
        drafter=drafter_from_options(o.drafter, o.draft_model, o.draft_vocab, _draft_quant(o), o.device, o.dtype),
        mask_source=source,
        steering=o.steering,
        lookahead=_lookahead(o),
        verifier=o.verifier,
        sampling=SamplingSpec(not sampling.greedy, sampling.temperature, sampling.top_p, sampling.seed, sampling.top_k),
        profile=o.profile,
        max_new_tokens=64 if o.max_new_tokens is None else o.max_new_tokens,
    )



def _draft_quant(options: Any) -> str | None:
    """``--draft-quant``: quantizes the ``--draft-model``, or without one the model's own draft
    (every sub-layer the mask keeps, and the head); checked before the model loads."""
    from layersearch.models.quantize import check_quant

    quant = getattr(options, "draft_quant", None)
    if quant is None:
        return None
    if options.draft_model is None and (options.baseline or not _entry(options).takes_quant):
        raise LayersearchError(f"--draft-quant {quant} quantizes a draft; "
                               f"{'--baseline' if options.baseline else f'--drafter {options.drafter}'} runs none")
    check_quant(quant, options.device, options.dtype, self_draft=options.draft_model is None)
    return quant



def _check_draft_vocab(options: Any) -> None:
    """``--draft-vocab`` needs a drafter that runs a model head (checked before the model loads)."""
    from layersearch.common.checks import check_int

    n = options.draft_vocab or 0
    check_int(n, "--draft-vocab", minimum=0)
    if n and options.baseline:
        raise LayersearchError("--baseline runs plain decoding; it takes no --draft-vocab")
    if n and not _entry(options).takes_head:
        raise LayersearchError(f"--drafter {options.drafter} runs no model, so --draft-vocab has no head to reduce")


def _entry(options: Any) -> Any:
    """The registry's entry of ``--drafter`` (what the drafter takes)."""
    from layersearch.runtime.drafters import drafter_entry

    return drafter_entry(options.drafter)



def _check_draft_options(options: Any) -> None:
    """The option checks of the draft settings."""
    from layersearch.common.checks import check_int
    from layersearch.runtime.draft_policy import DraftPolicy

    if options.threads is not None:
        check_int(options.threads, "--threads")
    if options.reselect_every < 1:
        raise LayersearchError(f"--reselect-every must be >= 1, got {options.reselect_every}")
    DraftPolicy(options.max_draft, options.draft_threshold)



def _check_option_values(options: Any) -> None:
    """The options that become spec fields, checked under their own names (the spec's checks
    would name its fields: model.device, steering...)."""
    from layersearch.common.checks import check_device_name, check_dtype_name

    for option, value, check in (("--device", options.device, check_device_name),
                                 ("--dtype", options.dtype, check_dtype_name)):
        if value is not None:
            try:
                check(value)
            except LayersearchError as exc:
                raise LayersearchError(f"{option}: {exc}") from None
    for option, value in (("--steering", options.steering), ("--profile", options.profile)):
        if value is not None and not value.strip():
            raise LayersearchError(f"{option} needs a file name, got {value!r}")



def check_draft_model_options(options: Any) -> None:
    """``--draft-model`` drafts with its own model: refuse the options that choose another drafter
    (and a ``--drafter`` that drafts only with a draft model needs one)."""
    if getattr(options, "draft_model", None) is None:
        if _entry(options).needs_draft_model:
            raise LayersearchError(f"--drafter {options.drafter} drafts with a draft model: give --draft-model")
        return
    if not options.draft_model.strip():
        raise LayersearchError("--draft-model needs a model: an embedded name, HF id or local directory")
    clashes = [flag for flag, given in (
        ("--mask", options.mask), ("--baseline", options.baseline),
        (f"--drafter {options.drafter}", not _entry(options).takes_draft_model),
        ("--profile", getattr(options, "profile", None)),  # a latency profile costs masked forwards of the target
    ) if given]
    if clashes:
        raise LayersearchError(f"--draft-model drafts with an independent model; it takes no {', '.join(clashes)}")



def _lookahead(options: Any) -> LookaheadSpec:
    """``--lookahead`` (a registered rule or disco:FILE) with --max-draft / --draft-threshold."""
    name = options.lookahead or "confidence"
    file = None
    if name.startswith("disco:"):
        name, file = "disco", name[len("disco:"):]
        if not file:
            raise LayersearchError("--lookahead disco: needs a file, e.g. --lookahead disco:disco.json")
    elif name not in lookahead_names() or name == "disco":
        names = [n for n in lookahead_names() if n != "disco"]
        raise LayersearchError(f"unknown lookahead {name!r} (choose from {', '.join(names)}, disco:FILE)")
    return LookaheadSpec(name, options.max_draft, options.draft_threshold, file)



def check_options_on_model(options: Any, loaded: Any) -> None:
    """The checks of ``generate``'s options that need the loaded model: ``--draft-vocab`` against its
    vocabulary, named as the option, and a ``--mask`` file against the model, named as the file
    (a ``--spec`` file's drafter.vocab and inline mask are checked by the builder, naming the spec)."""
    if not getattr(options, "spec", None):
        from layersearch.frspec.vocab import check_draft_vocab

        check_draft_vocab(loaded, options.draft_vocab or 0)
        kind, value = parse_mask_option(options.mask) if options.mask else (None, None)
        if kind == "mask" and value is not None:  # the --mask file against the model, named as the file
            from layersearch.common.modelfile import naming
            from layersearch.masks.mask import SkipMask

            with naming(value):
                SkipMask.load(value).check_model(loaded.info)
