"""``layersearch mask create|show``: write a mask file for a model, or draw one."""

from __future__ import annotations

from typing import Any

from layersearch.mask import SkipMask, parse_index_list


def run(args: Any) -> int:
    """Dispatch ``mask create`` / ``mask show``."""
    return _create(args) if args.action == "create" else _show(args)


def _create(args: Any) -> int:
    from layersearch.models.loading import load_model
    from layersearch.outputs import announce, check_output

    out = check_output(args.out)
    attention, mlp = parse_index_list(args.attention, "attention"), parse_index_list(args.mlp, "mlp")
    info = load_model(args.model).info  # seconds once the model is cached; validates the name
    mask = SkipMask(
        info.num_layers,
        attention,
        mlp,
        info,
        {"strategy": "manual"},
    )
    mask.save(out)
    announce(out, f"wrote {out}: {mask.short_string()} (skip ratio {mask.skip_ratio:.2f})")
    return 0


def _show(args: Any) -> int:
    mask = SkipMask.load(args.file)
    print(render(mask))
    return 0


def render(mask: SkipMask) -> str:
    """A text drawing: one column per layer, rows for attention and MLP (x = skipped)."""
    width = len(str(mask.num_layers - 1))
    header = " ".join(str(i).rjust(width) for i in range(mask.num_layers))
    skipped_attention, skipped_mlp = set(mask.attention), set(mask.mlp)
    attn = " ".join(("x" if i in skipped_attention else ".").rjust(width) for i in range(mask.num_layers))
    mlp = " ".join(("x" if i in skipped_mlp else ".").rjust(width) for i in range(mask.num_layers))
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
