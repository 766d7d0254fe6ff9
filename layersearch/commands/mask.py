"""``layersearch mask create|show|import|export``: write, draw or convert mask files."""

from __future__ import annotations

import argparse
from typing import Any

from layersearch.commands.args import DEFAULT_MODEL
from layersearch.masks.mask import SkipMask, parse_index_list, render_mask


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``mask create``, ``show``, ``import`` and ``export``."""
    p = sub.add_parser("mask", help="create, show, import or export mask files")
    msub = p.add_subparsers(dest="action", required=True, parser_class=parser_class)
    c = msub.add_parser("create", help="write a mask file for a model")
    c.add_argument("--attention", default="", help="comma-separated 0-based layer indices")
    c.add_argument("--mlp", default="", help="comma-separated 0-based layer indices")
    c.add_argument("--model", default=DEFAULT_MODEL)
    c.add_argument("--out", required=True)
    s = msub.add_parser("show", help="draw which sub-layers a mask skips")
    s.add_argument("file")
    formats = ("selfsd", "swift", "knnssd", "knapspec")  # layersearch.masks.formats.FORMATS (not imported: --help stays light)
    i = msub.add_parser("import", help="convert a mask of a paper's file (Self-SD, SWIFT, KNN-SSD, KnapSpec) into a mask file")
    i.add_argument("file", help="the paper's mask file")
    i.add_argument("--format", required=True, choices=formats)
    i.add_argument("--key", help="which mask of the file (omit to list them)")
    i.add_argument("--out", required=True, help="mask JSON file to write")
    i.add_argument("--model", help="bind the mask to this model (its depth is checked)")
    i.add_argument("--num-layers", type=int, help="depth, for a model not at hand (no fingerprint)")
    i.add_argument("--model-name", help="model name recorded with --num-layers (default: the one the key names)")
    e = msub.add_parser("export", help="write a mask file in a paper's format")
    e.add_argument("file", help="layersearch mask JSON file")
    e.add_argument("--format", required=True, choices=formats)
    e.add_argument("--key", help="key to store the mask under (needed except for knapspec)")
    e.add_argument("--out", required=True)
    p.set_defaults(command="mask")


def run(args: Any) -> int:
    """Dispatch ``mask create`` / ``show`` / ``import`` / ``export``."""
    return {"create": _create, "show": _show, "import": _import, "export": _export}[args.action](args)


def _import(args: Any) -> int:
    from layersearch.masks.formats import import_mask

    info = None
    if args.model:
        from layersearch.models.loading import load_model

        info = load_model(args.model).info
    mask = import_mask(args.file, args.format, args.key, num_layers=args.num_layers, model=info, model_name=args.model_name)
    path = mask.save(args.out)
    for_model = info.name if info else f"{mask.provenance.get('model_name') or 'an unnamed model'}, no fingerprint"
    print(f"wrote {path}: {mask.short_string()} ({mask.num_layers} layers, {for_model})")
    return 0


def _export(args: Any) -> int:
    from layersearch.masks.formats import export_mask

    mask = SkipMask.load(args.file)
    path = export_mask(mask, args.format, args.out, args.key)
    print(f"wrote {path}: {args.format} format{f', key {args.key}' if args.key else ''}")
    return 0


def _create(args: Any) -> int:
    from layersearch.models.loading import load_model
    from layersearch.common.outputs import announce, check_output

    out = check_output(args.out, "--out")
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
    print(render_mask(mask))
    return 0
