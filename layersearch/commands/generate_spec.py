"""``layersearch generate``'s options -> a :class:`~layersearch.decoder.spec.DecoderSpec`, with every
check that needs no model (so bad input fails before the model loads), or the ``--spec`` file."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict
from typing import Any, Iterator, Mapping

from layersearch.commands.common import positive_int
from layersearch.commands.onthefly import swift_config
from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.decoder.fragments import drafter_from_options
from layersearch.decoder.spec import (DecoderSpec, LookaheadSpec, MaskSourceSpec, ModelRef, ModelSpec,
                              SamplingSpec, lookahead_names, registry_names)

#: Options that do not describe the decoder: they apply with ``--spec`` too.
RUN_OPTIONS = ("command", "prompt", "prompts", "max_new_tokens", "json", "threads", "spec", "save_spec", "kernels")


def spec_from_args(args: Any, defaults: Mapping[str, Any]) -> DecoderSpec:
    """The spec ``args`` describe (``defaults``: every option's default, to tell what ``--spec``
    conflicts with)."""
    if args.spec:
        given = [f"--{dest.replace('_', '-')}" for dest, default in defaults.items()
                 if dest not in RUN_OPTIONS and getattr(args, dest, default) != default]
        if given:
            raise LayersearchError(f"--spec {args.spec} describes the decoder; it takes no {', '.join(given)}")
        return DecoderSpec.load(args.spec)
    from layersearch.runtime.sampling import SamplingConfig

    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, seed=args.seed)  # its wording on bad values
    if args.baseline and args.mask:
        raise LayersearchError("--baseline runs plain decoding; it takes no --mask")
    _check_args(args)
    _check_option_values(args)
    _check_draft_vocab(args)
    check_draft_model_args(args)
    source = _mask_source(args)  # a bad mask file fails here, before the model load
    return DecoderSpec(
        model=ModelSpec(ModelRef.given(args.model), None, args.device, args.dtype),
        plain=args.baseline,
        drafter=drafter_from_options(args.drafter, args.draft_model, args.draft_vocab, _draft_quant(args), args.device,
                                     args.dtype),
        mask_source=source,
        steering=args.steering,
        lookahead=_lookahead(args),
        verifier=args.verifier,
        sampling=SamplingSpec(not sampling.greedy, sampling.temperature, sampling.top_p, sampling.seed),
        profile=args.profile,
        max_new_tokens=64 if args.max_new_tokens is None else args.max_new_tokens,
    )


def _draft_quant(args: Any) -> str | None:
    """``--draft-quant``: quantizes the ``--draft-model``, or without one the model's own draft
    (every sub-layer the mask keeps, and the head); checked before the model loads."""
    from layersearch.models.quantize import check_quant

    quant = getattr(args, "draft_quant", None)
    if quant is None:
        return None
    if args.draft_model is None and (args.baseline or args.drafter == "prompt-lookup"):
        raise LayersearchError(f"--draft-quant {quant} quantizes a draft; "
                               f"{'--baseline' if args.baseline else '--drafter prompt-lookup'} runs none")
    check_quant(quant, args.device, args.dtype, self_draft=args.draft_model is None)
    return quant


def _check_draft_vocab(args: Any) -> None:
    """``--draft-vocab`` needs a drafter that runs a model head (checked before the model loads)."""
    from layersearch.common.checks import check_int

    n = args.draft_vocab or 0
    check_int(n, "--draft-vocab", minimum=0)
    if n and args.baseline:
        raise LayersearchError("--baseline runs plain decoding; it takes no --draft-vocab")
    if n and args.drafter == "prompt-lookup" and args.draft_model is None:
        raise LayersearchError("--drafter prompt-lookup runs no model, so --draft-vocab has no head to reduce")


def _check_args(args: Any) -> None:
    """The option checks of the draft settings."""
    from layersearch.runtime.drafting import DraftPolicy

    if args.threads is not None:
        positive_int(args.threads, "--threads")
    if args.reselect_every < 1:
        raise LayersearchError(f"--reselect-every must be >= 1, got {args.reselect_every}")
    DraftPolicy(args.max_draft, args.draft_threshold)


def _check_option_values(args: Any) -> None:
    """The options that become spec fields, checked under their own names (the spec's checks
    would name its fields: model.device, steering...)."""
    from layersearch.common.checks import check_device_name, check_dtype_name

    for option, value, check in (("--device", args.device, check_device_name), ("--dtype", args.dtype, check_dtype_name)):
        if value is not None:
            try:
                check(value)
            except LayersearchError as exc:
                raise LayersearchError(f"{option}: {exc}") from None
    for option, value in (("--steering", args.steering), ("--profile", args.profile)):
        if value is not None and not value.strip():
            raise LayersearchError(f"{option} needs a file name, got {value!r}")


def check_draft_model_args(args: Any) -> None:
    """``--draft-model`` drafts with its own model: refuse the options that choose another drafter."""
    if getattr(args, "draft_model", None) is None:
        return
    if not args.draft_model.strip():
        raise LayersearchError("--draft-model needs a model: an embedded name, HF id or local directory")
    clashes = [flag for flag, given in (
        ("--mask", args.mask), ("--baseline", args.baseline), (f"--drafter {args.drafter}", args.drafter != "layer-skip"),
        ("--profile", getattr(args, "profile", None)),  # a latency profile costs masked forwards of the target
    ) if given]
    if clashes:
        raise LayersearchError(f"--draft-model drafts with an independent model; it takes no {', '.join(clashes)}")


def _mask_source(args: Any) -> MaskSourceSpec:
    """Where the mask comes from (``--mask SOURCE``; see :func:`parse_mask_option`), or the default."""
    if not args.mask:
        return MaskSourceSpec("default")
    kind, value = parse_mask_option(args.mask)
    if kind == "mask":
        return MaskSourceSpec("mask", mask=SkipMask.load(value), file=value)
    if kind == "uniform":
        return MaskSourceSpec("uniform", skip_ratio=_ratio(value, args.mask))
    if kind == "router":
        return MaskSourceSpec("router", file=value)
    if kind in registry_names()["on_the_fly"]:
        ratio = None if value is None else _ratio(value, args.mask)
        return MaskSourceSpec(kind, swift=asdict(swift_config(args, skip_ratio=ratio)))
    return MaskSourceSpec(kind, reselect_every=args.reselect_every)  # a dynamic source


def parse_mask_option(text: str) -> tuple[str, str | None]:
    """``generate --mask SOURCE`` -> (mask source kind, its value): ``uniform:R``, ``router:FILE``,
    a dynamic source (``knapsack``), an on-the-fly one (``swift``, ``swift:R``), else a mask file.

    A source's name wins over a file of that name (``./knapsack`` names the file)."""
    names = registry_names()
    kind, sep, value = text.partition(":")
    if kind in ("uniform", "router"):
        if not value.strip():
            example = "uniform:0.2" if kind == "uniform" else "router:router.json"
            raise LayersearchError(f"--mask {kind}: needs a value, e.g. --mask {example}")
        return kind, value
    if kind in names["dynamic"]:
        if sep:
            raise LayersearchError(f"--mask {kind} takes no value (got {text!r}; --reselect-every and --profile set it)")
        return kind, None
    if kind in names["on_the_fly"]:
        if sep and not value.strip():
            raise LayersearchError(f"--mask {kind}: needs a skip ratio after the colon, e.g. --mask {kind}:0.45")
        return kind, (value if sep else None)
    return "mask", text


def _ratio(text: str, option: str) -> float:
    """The skip ratio R of ``--mask uniform:R`` / ``swift:R``: a number in [0, 1]."""
    from layersearch.common.checks import check_real

    try:
        value = float(text)
    except ValueError:
        raise LayersearchError(f"--mask {option}: the skip ratio must be a number, got {text!r}") from None
    return check_real(value, f"--mask {option} (the skip ratio)", low=0.0, high=1.0)


def _lookahead(args: Any) -> LookaheadSpec:
    """``--lookahead`` (a registered rule or disco:FILE) with --max-draft / --draft-threshold."""
    name = args.lookahead or "confidence"
    file = None
    if name.startswith("disco:"):
        name, file = "disco", name[len("disco:"):]
        if not file:
            raise LayersearchError("--lookahead disco: needs a file, e.g. --lookahead disco:disco.json")
    elif name not in lookahead_names() or name == "disco":
        names = [n for n in lookahead_names() if n != "disco"]
        raise LayersearchError(f"unknown lookahead {name!r} (choose from {', '.join(names)}, disco:FILE)")
    return LookaheadSpec(name, args.max_draft, args.draft_threshold, file)


@contextmanager
def named_spec(path: str | None) -> Iterator[None]:
    """Errors inside prefixed with the spec file ``path`` (none without one: then the options said it)."""
    try:
        yield
    except LayersearchError as exc:
        if path is None or str(exc).startswith(f"{path}: "):
            raise
        raise LayersearchError(f"{path}: {exc}") from None


def check_draft_vocab_option(args: Any, loaded: Any) -> None:
    """``--draft-vocab`` against the loaded model's vocabulary, named as the option (a ``--spec``
    file's drafter.vocab is checked by the builder, naming the file)."""
    if not args.spec:
        from layersearch.frspec.vocab import check_draft_vocab

        check_draft_vocab(loaded, args.draft_vocab or 0)
