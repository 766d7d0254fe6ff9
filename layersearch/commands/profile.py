"""``layersearch profile``: measure a model's latency profile on this device and save it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from layersearch.commands.args import model_args
from layersearch.commands.common import check_context, load
from layersearch.errors import LayersearchError
from layersearch.jsonfile import write_json_atomic
from layersearch.mask import SkipMask, parse_index_list


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
    p.set_defaults(command="profile")


def run(args: Any) -> int:
    """Measure and write the profile JSON, printing progress on stderr."""
    from layersearch.runtime.profiler import measure_profile

    from layersearch.commands.common import positive_int
    from layersearch.outputs import announce, check_output

    if args.validate:
        return _validate(args)
    if args.out is None:
        raise LayersearchError("--out is required (where to write the profile)")
    out = check_output(args.out)
    contexts = _contexts(args.contexts or "64,256,512,1024")
    positive_int(args.repeats, "--repeats")
    loaded = load(args)
    profile = measure_profile(
        loaded.model, loaded.info, contexts=contexts, repeats=args.repeats,
        progress=lambda message: print(message, file=sys.stderr, flush=True), kernels=args.kernels,
    )
    profile.save(out)
    announce(out, f"wrote {out}: {describe(profile)}")
    return 0


def _contexts(text: str) -> tuple[int, ...]:
    contexts = parse_index_list(text, "contexts")
    if not contexts or min(contexts) < 1:
        raise LayersearchError("--contexts must be token counts >= 1")
    return contexts


def describe(profile) -> str:
    """One line: attention cost fit, MLP and base costs, verify ratio at 8 tokens."""
    windows = [w for w in profile.attention_windows if w is not None]
    # A sliding layer reads at most window - 1 positions: say so, or the slope reads as per token of context.
    sliding = f" (n capped at window - 1 in {len(windows)} sliding layers)" if windows else ""
    return (
        f"t_attn(n) = {profile.attention_slope * 1e6:.3f} us * n + {profile.attention_intercept * 1e3:.3f} ms{sliding}, "
        f"t_mlp = {profile.mlp_seconds * 1e3:.3f} ms, base = {profile.base_seconds * 1e3:.2f} ms, "
        f"verify(8)/verify(1) = {profile.verify_ratio(8):.2f} on {profile.device} {profile.dtype}, "
        f"{profile.kernels} kernels"
    )


def _validate(args: Any) -> int:
    """``profile --validate PROFILE``: print measured vs predicted per-forward times."""
    from layersearch.outputs import announce, check_output
    from layersearch.profile import LatencyProfile
    from layersearch.runtime.kernels import choose_kernels, model_kernels
    from layersearch.runtime.profiler import validate_profile

    from layersearch.commands.common import positive_int

    out = check_output(args.out) if args.out is not None else None
    positive_int(args.repeats, "--repeats")
    profile = LatencyProfile.load(args.validate)
    loaded = load(args)
    profile.check_model(loaded.info)
    masks = [SkipMask.none(loaded.info.num_layers)] + [_mask(spec, loaded.info) for spec in args.masks.split(",") if spec]
    contexts = _contexts(args.contexts) if args.contexts is not None else profile.contexts
    check_context(loaded, max(contexts) + 8, "--contexts")  # plus the longest verification
    with model_kernels(loaded.model, choose_kernels(args.kernels, profile)):  # auto: the profile's kernels
        rows = validate_profile(loaded.model, profile, masks, contexts=contexts, repeats=args.repeats,
                                progress=lambda message: print(message, file=sys.stderr, flush=True))
    print(format_validation(rows))
    if out:
        write_json_atomic(out, {"profile": str(args.validate), "rows": rows})
        announce(out, f"wrote {out}")
    return 0


def _mask(spec: str, info) -> SkipMask:
    """``uniform:R`` or a mask file, for this model."""
    if spec.startswith("uniform:"):
        from layersearch.checks import check_fraction

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
