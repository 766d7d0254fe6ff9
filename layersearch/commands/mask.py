"""``layersearch mask create|show``: write a mask file for a model, or draw one."""

from __future__ import annotations

import argparse
from typing import Any

from layersearch.commands.args import DEFAULT_MODEL
from layersearch.mask import SkipMask, parse_index_list


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``mask create`` and ``mask show``."""
    p = sub.add_parser("mask", help="create or show mask files")
    msub = p.add_subparsers(dest="action", required=True, parser_class=parser_class)
    c = msub.add_parser("create", help="write a mask file for a model")
    c.add_argument("--attention", default="", help="comma-separated 0-based layer indices")
    c.add_argument("--mlp", default="", help="comma-separated 0-based layer indices")
    c.add_argument("--model", default=DEFAULT_MODEL)
    c.add_argument("--out", required=True)
    s = msub.add_parser("show", help="draw which sub-layers a mask skips")
    s.add_argument("file")
    p.set_defaults(command="mask")


def run(args: Any) -> int:
    """Dispatch ``mask create`` / ``mask show``."""
    return _create(args) if args.action == "create" else _show(args)


def _create(args: Any) -> int:
    from layersearch.models.loading import load_model

    info = load_model(args.model).info  # seconds once the model is cached; validates the name
    mask = SkipMask(
        info.num_layers,
        parse_index_list(args.attention, "attention"),
        parse_index_list(args.mlp, "mlp"),
        info,
        {"strategy": "manual"},
    )
    path = mask.save(args.out)
    print(f"wrote {path}: {mask.short_string()} (skip ratio {mask.skip_ratio:.2f})")
    return 0


def _show(args: Any) -> int:
    mask = SkipMask.load(args.file)
    print(render(mask))
    return 0


def render(mask: SkipMask) -> str:
    """A text drawing: one column per layer, rows for attention and MLP (x = skipped)."""
    width = len(str(mask.num_layers - 1))
    header = " ".join(str(i).rjust(width) for i in range(mask.num_layers))
    attn = " ".join(("x" if i in mask.attention else ".").rjust(width) for i in range(mask.num_layers))
    mlp = " ".join(("x" if i in mask.mlp else ".").rjust(width) for i in range(mask.num_layers))
    model = mask.model.name if mask.model else "unknown model"
    lines = [
        f"{model}: {mask.num_layers} layers, {mask.num_skipped} of {2 * mask.num_layers} sub-layers skipped "
        f"(ratio {mask.skip_ratio:.2f})",
        f"layer {header}",
        f"attn  {attn}",
        f"mlp   {mlp}",
        "x = skipped, . = kept",
    ]
    strategy = mask.provenance.get("strategy")
    if strategy:
        lines.append(f"provenance: strategy={strategy} objective={mask.provenance.get('objective')} "
                     f"score={mask.provenance.get('score')} study={mask.provenance.get('study')} "
                     f"trial={mask.provenance.get('trial')}")
    return "\n".join(lines)
