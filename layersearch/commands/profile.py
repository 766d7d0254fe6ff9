"""``layersearch profile``: measure a model's latency profile on this device and save it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from layersearch.commands.args import model_args
from layersearch.commands.common import load
from layersearch.errors import LayersearchError
from layersearch.mask import parse_index_list


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``profile``: its arguments."""
    p = sub.add_parser("profile", help="measure the latency profile of a model on this device")
    model_args(p)
    p.add_argument("--out", required=True)
    p.add_argument("--contexts", default="64,256,512,1024", help="context lengths to measure")
    p.add_argument("--repeats", type=int, default=5)
    p.set_defaults(command="profile")


def run(args: Any) -> int:
    """Measure and write the profile JSON, printing progress on stderr."""
    from layersearch.runtime.profiler import measure_profile

    from layersearch.commands.common import positive_int
    from layersearch.outputs import announce, check_output

    out = check_output(args.out)
    contexts = parse_index_list(args.contexts, "contexts")
    if not contexts or min(contexts) < 1:
        raise LayersearchError("--contexts must be token counts >= 1")
    positive_int(args.repeats, "--repeats")
    loaded = load(args)
    profile = measure_profile(
        loaded.model, loaded.info, contexts=contexts, repeats=args.repeats,
        progress=lambda message: print(message, file=sys.stderr, flush=True),
    )
    profile.save(out)
    announce(out, f"wrote {out}: {describe(profile)}")
    return 0


def describe(profile) -> str:
    """One line: attention cost fit, MLP and base costs, verify ratio at 8 tokens."""
    windows = [w for w in profile.attention_windows if w is not None]
    # A sliding layer reads at most window - 1 positions: say so, or the slope reads as per token of context.
    sliding = f" (n capped at window - 1 in {len(windows)} sliding layers)" if windows else ""
    return (
        f"t_attn(n) = {profile.attention_slope * 1e6:.3f} us * n + {profile.attention_intercept * 1e3:.3f} ms{sliding}, "
        f"t_mlp = {profile.mlp_seconds * 1e3:.3f} ms, base = {profile.base_seconds * 1e3:.2f} ms, "
        f"verify(8)/verify(1) = {profile.verify_ratio(8):.2f} on {profile.device} {profile.dtype}"
    )
