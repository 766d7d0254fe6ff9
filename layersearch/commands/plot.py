"""``layersearch plot mask|history|compare``: PNG figures under plots/ (the path is printed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from layersearch.errors import LayersearchError


def run(args: Any) -> int:
    """Draw the requested figure and print the path written."""
    from layersearch import plots
    from layersearch.commands.study import quiet_optuna

    quiet_optuna()
    if args.kind == "mask":
        from layersearch.mask import SkipMask

        out = plots.check_png_output(_or(args.out, plots.default_plot_path("mask", Path(args.file).stem)))
        mask = SkipMask.load(args.file)
        path = plots.plot_mask(mask, out)
    elif args.kind == "history":
        from layersearch.study import load_study

        out = plots.check_png_output(_or(args.out, plots.default_plot_path("history", args.name)))
        study = load_study(args.name, storage=args.storage)
        path = plots.plot_history(study, out)
    elif args.kind == "compare":
        from layersearch.study import load_study

        if len(set(args.names)) != len(args.names):
            raise LayersearchError("--names lists a study twice")
        out = plots.check_png_output(_or(args.out, plots.default_plot_path("compare", "-".join(args.names))))
        studies = [load_study(name, storage=args.storage) for name in args.names]
        path = plots.plot_compare(studies, out)
    else:  # argparse allows only the kinds above
        raise LayersearchError(f"unknown plot kind {args.kind!r}")
    if str(path) != "-":
        print(path)
    return 0


def _or(given: Any, default: Any) -> Any:
    """``--out`` when given (even empty: that is an error to report), else the default path."""
    return default if given is None else given
