"""``layersearch profile``: measure a model's latency profile on this device and save it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from layersearch.commands.args import model_args
from layersearch.commands.common import load
from layersearch.common.errors import LayersearchError
from layersearch.common.jsonfile import write_json_atomic
from layersearch.masks.mask import SkipMask, parse_index_list
from layersearch.profiling.profile import describe_profile, format_validation, validation_mask


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``profile``: its arguments."""
    p = sub.add_parser("profile", help="measure the latency profile of a model on this device")
    model_args(p, kernels=True)
    p.add_argument("--out", help="where to write the profile (required unless --validate)")
    p.add_argument("--validate", metavar="PROFILE",
                   help="instead of measuring a profile: time draft and verify forwards afresh and compare "
                        "them with this profile's predictions (optionally writing the rows to --out)")
    p.add_argument("--masks", default="uniform:0.1,uniform:0.2,uniform:0.3",
                   help="with --validate: masks to time, as uniform:RATIO or mask files (comma-separated)")
    p.add_argument("--contexts", help="context lengths to measure (default 64,256,512,1024; with --validate the profile's)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--random-weights", action="store_true",
                   help="measure the model's architecture from its config alone, with random weights (costs depend on "
                        "shapes and dtype, not values): a profile for a machine that does not hold the weights")
    p.add_argument("--max-verify", type=int, default=None,
                   help="verify 1..N tokens in the verification sweep (default 16 eager, 8 captured: each length compiles)")
    p.set_defaults(command="profile")


def run(args: Any) -> int:
    """Measure and write the profile JSON, printing progress on stderr."""
    from layersearch.profiling.profiler import measure_profile

    from layersearch.commands.common import positive_int
    from layersearch.common.outputs import announce, check_output

    if args.validate:
        return _validate(args)
    if args.out is None:
        raise LayersearchError("--out is required (where to write the profile)")
    out = check_output(args.out, "--out")
    contexts = _contexts(args.contexts or "64,256,512,1024")
    positive_int(args.repeats, "--repeats")
    if args.max_verify is not None:
        positive_int(args.max_verify, "--max-verify")
    from layersearch.decoder.spec import compile_wanted

    captured = compile_wanted(args.compile or "auto", "cuda" if args.device.strip().lower().startswith("cuda") else "cpu")
    loaded = _random_weights(args) if args.random_weights else load(args)
    profile = measure_profile(
        loaded.model, loaded.info, contexts=contexts, repeats=args.repeats,
        max_verify=args.max_verify or (8 if captured else 16),
        progress=lambda message: print(message, file=sys.stderr, flush=True), kernels=args.kernels,
        compile_mode="captured:inductor" if captured else "eager", random_weights=args.random_weights,
    )
    profile.save(out)
    announce(out, f"wrote {out}: {describe_profile(profile)}")
    return 0


def _random_weights(args: Any) -> Any:
    """``--model``'s architecture with random weights on ``--device`` / ``--dtype`` (its config alone)."""
    import transformers

    from layersearch.commands.common import set_threads
    from layersearch.models.loading import default_dtype, random_weights_model

    transformers.utils.logging.set_verbosity_error()
    set_threads(getattr(args, "threads", None))
    return random_weights_model(args.model, device=args.device, dtype=args.dtype or default_dtype(args.device),
                                progress=lambda message: print(message, file=sys.stderr, flush=True))


def _contexts(text: str) -> tuple[int, ...]:
    contexts = parse_index_list(text, "contexts")
    if not contexts or min(contexts) < 1:
        raise LayersearchError("--contexts must be token counts >= 1")
    return contexts


def _validate(args: Any) -> int:
    """``profile --validate PROFILE``: print measured vs predicted per-forward times."""
    from layersearch.common.outputs import announce, check_output
    from layersearch.profiling.profile import LatencyProfile
    from layersearch.kernels.select import choose_kernels, model_kernels
    from layersearch.profiling.profiler import validate_profile

    from layersearch.commands.common import positive_int
    from layersearch.models.context import check_context

    for option, given in (("--random-weights", args.random_weights), ("--max-verify", args.max_verify is not None)):
        if given:  # options of a measurement --validate does not make: refused, not ignored
            raise LayersearchError(f"{option} applies to measuring a profile, not to --validate (which times the "
                                   "loaded model's forwards against the profile's predictions)")
    out = check_output(args.out, "--out") if args.out is not None else None
    positive_int(args.repeats, "--repeats")
    profile = LatencyProfile.load(args.validate)
    loaded = load(args)
    from layersearch.profiling.profiler import model_architecture

    profile.check_model(loaded.info, model_architecture(loaded.model))
    masks = [SkipMask.none(loaded.info.num_layers)] + [validation_mask(spec, loaded.info) for spec in args.masks.split(",") if spec]
    contexts = _contexts(args.contexts) if args.contexts is not None else profile.contexts
    check_context(loaded, max(contexts) + 8, "--contexts")  # plus the longest verification
    with model_kernels(loaded.model, choose_kernels(args.kernels, profile, loaded.model.dtype)):  # auto: the profile's kernels
        rows = validate_profile(loaded.model, profile, masks, contexts=contexts, repeats=args.repeats,
                                progress=lambda message: print(message, file=sys.stderr, flush=True))
    print(format_validation(rows))
    if out:
        write_json_atomic(out, {"profile": str(args.validate), "rows": rows})
        announce(out, f"wrote {out}")
    return 0
