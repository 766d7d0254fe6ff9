"""``layersearch plot mask|history|compare``: PNG figures under plots/ (the path is printed)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from layersearch.commands.args import STORAGE_HELP
from layersearch.common.errors import LayersearchError


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Add ``plot`` and its kinds to the CLI's sub-parsers."""
    p = sub.add_parser("plot", help="draw a mask, a study's history or several studies (PNG under plots/)")
    kinds = p.add_subparsers(dest="kind", required=True, parser_class=parser_class)

    m = kinds.add_parser("mask", help="draw which sub-layers a mask file skips")
    m.add_argument("file", help="mask JSON file")
    m.add_argument("--out", help="PNG to write (default plots/mask-<file>.png)")

    h = kinds.add_parser("history", help="objective per trial and best so far vs wall-clock")
    h.add_argument("--name", required=True)
    h.add_argument("--storage", help=STORAGE_HELP)
    h.add_argument("--out", help="PNG to write (default plots/history-<name>.png)")

    c = kinds.add_parser("compare", help="best-so-far curves of several studies")
    c.add_argument("--names", nargs="+", required=True)
    c.add_argument("--storage", help=STORAGE_HELP)
    c.add_argument("--out", help="PNG to write (default plots/compare-<names>.png)")

    b = kinds.add_parser("bench", help="a bench report's speedups over plain generate, per domain")
    b.add_argument("file", help="bench JSON report (bench --out)")
    b.add_argument("--out", help="PNG to write (default plots/bench-<file>.png)")

    p.set_defaults(command="plot")


def run(args: Any) -> int:
    """Draw the requested figure and print the path written."""
    from layersearch.evaluation import plots
    from layersearch.study.text import quiet_optuna

    quiet_optuna()
    if args.kind == "mask":
        from layersearch.masks.mask import SkipMask

        out = plots.check_png_output(
            _or(args.out, plots.default_plot_path("mask", Path(args.file).stem)), default=args.out is None)
        mask = SkipMask.load(args.file)
        path = plots.plot_mask(mask, out)
    elif args.kind == "bench":
        out = plots.check_png_output(
            _or(args.out, plots.default_plot_path("bench", Path(args.file).stem)), default=args.out is None)
        drawn, notes = plots.bench_rows_to_draw(plots.bench_rows(args.file))
        for note in notes:
            print(f"layersearch: note: {args.file}: {note}", file=sys.stderr, flush=True)
        path = plots.plot_bench(drawn, out)
    elif args.kind == "history":
        from layersearch.study import load_study

        out = plots.check_png_output(
            _or(args.out, plots.default_plot_path("history", args.name)), default=args.out is None)
        study = load_study(args.name, storage=args.storage)
        path = plots.plot_history(study, out)
    elif args.kind == "compare":
        from layersearch.study import load_study

        if len(set(args.names)) != len(args.names):
            raise LayersearchError("--names lists a study twice")
        out = plots.check_png_output(
            _or(args.out, plots.default_plot_path("compare", "-".join(args.names))), default=args.out is None)
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

