"""``layersearch study <action>``: create, run, list, show, export and compare mask searches.

The work is done by :mod:`layersearch.study`; this module turns arguments into calls and
results into lines. ``head-to-head`` lives in :mod:`layersearch.commands.headtohead`.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Sequence

from layersearch.errors import LayersearchError


def run(args: Any) -> int:
    """Dispatch on ``args.action``."""
    quiet_optuna(getattr(args, "quiet", False))
    if getattr(args, "threads", None) is not None:
        import torch

        from layersearch.commands.common import positive_int

        torch.set_num_threads(positive_int(args.threads, "--threads"))
    if args.action == "head-to-head":
        from layersearch.commands import headtohead

        return headtohead.run(args)
    return {
        "create": _create,
        "run": _run,
        "list": _list,
        "show": _show,
        "export": _export,
        "compare": _compare,
    }[args.action](args)


def quiet_optuna(quiet: bool = False) -> None:
    """Silence Optuna's INFO logging (one line per trial otherwise), and transformers' loading
    bars unless stderr is a terminal (they would fill logs) or with ``quiet``."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if quiet or not _stderr_is_terminal():
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def settings_from_args(args: Any, *, strategy: str | None = None, objective: str | None = None, skip_ratio: Any = "args"):
    """StudySettings from create-style arguments."""
    from layersearch.models.loading import default_dtype
    from layersearch.study import StudySettings

    return StudySettings(
        model=args.model,
        domain=args.domain,
        strategy=strategy or args.strategy,
        objective=objective or args.objective,
        skip_ratio=args.skip_ratio if skip_ratio == "args" else skip_ratio,
        samples=args.samples,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        gamma=args.gamma,
        max_draft=args.max_draft,
        draft_threshold=args.draft_threshold,
        decode_stats=args.decode_stats,
        device=args.device,
        dtype=args.dtype or default_dtype(args.device),
    )


def log(message: str) -> None:
    """Progress notes go to stderr so stdout stays the command's result."""
    print(message, file=sys.stderr, flush=True)


def _create(args: Any) -> int:
    from layersearch.study import create_study

    result = create_study(args.name, settings_from_args(args), storage=args.storage, profile_path=args.profile, log=log)
    if result.created:
        extra = f", {result.enqueued} mask(s) enqueued" if result.enqueued else ""
        print(f"created study {result.name} in {result.url} ({_describe(result.settings)}{extra})")
    else:
        print(f"study {result.name} already exists in {result.url} with the same settings")
    return 0


def _run(args: Any) -> int:
    from layersearch.study import DEFAULT_HEARTBEAT, run_study

    heartbeat = DEFAULT_HEARTBEAT if args.heartbeat is None else args.heartbeat
    if heartbeat < 1:
        raise LayersearchError(f"--heartbeat must be >= 1 second, got {heartbeat}")
    summary = run_study(args.name, storage=args.storage, trials=args.trials, timeout=args.timeout,
                        quiet=args.quiet, heartbeat=heartbeat)
    print(format_run_summary(summary))
    return 0


def format_run_summary(summary: Any) -> str:
    """One line: trials run, completed, best value and mask, stop reason, stale trials failed."""
    parts = [f"study {summary.name}: ran {summary.ran} trial(s) in {summary.seconds:.1f} s",
             f"{summary.completed} complete of {summary.total}"]
    if summary.best_value is not None:
        parts.append(f"best {summary.best_value:.6g} ({summary.direction}) at trial {summary.best_trial} [{summary.best_mask}]")
    if summary.stale_failed:
        parts.append(f"{summary.stale_failed} stale trial(s) of dead workers marked FAIL")
    if summary.stop_reason:
        parts.append(f"stopped: {summary.stop_reason}")
    text = "; ".join(parts)
    if getattr(summary, "advice", None):
        text += f"\nlayersearch: note: {summary.advice}"
    return text


def _list(args: Any) -> int:
    from layersearch.study import list_studies

    rows, problems = list_studies(args.storage)
    for problem in problems:
        log(f"layersearch: warning: {problem}")
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no studies" + ("" if args.storage else " in studies/*.db"))
        return 0
    columns = ("name", "strategy", "objective", "domain", "model", "complete", "trials", "best_value", "storage")
    print(format_table(rows, columns))
    return 0


def _show(args: Any) -> int:
    from layersearch.study import show_study

    info = show_study(args.name, storage=args.storage)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    settings = info["settings"]
    lines = [
        f"study      {info['name']}  ({info['storage']})",
        f"settings   {_describe_dict(settings)}",
        f"trials     {info['trials']} ({', '.join(f'{k.lower()} {v}' for k, v in sorted(info['states'].items())) or 'none'})",
        f"search     {info['search_seconds']:.1f} s in trials ({info['span_seconds']:.1f} s first start to last end)",
    ]
    best = info["best"]
    if best is None:
        lines.append("best       no completed trial yet")
    else:
        lines += [
            f"best       trial {best['trial']}: {settings['objective']} = {best['value']:.6g} ({info['direction']})",
            f"mask       {best['mask']}  (skip ratio {_fmt(best['skip_ratio'])})",
            f"M, alpha   {_fmt(best['M'])}, {_fmt(best['alpha'])}   tokens/s {_fmt(best['tokens_per_second'])}",
        ]
    print("\n".join(lines))
    return 0


def _export(args: Any) -> int:
    from layersearch.study import export_mask

    from layersearch.outputs import announce, check_output

    out = check_output(args.out)
    path, mask = export_mask(args.name, out, storage=args.storage, trial=args.trial)
    prov = mask.provenance
    announce(out, f"wrote {path}: trial {prov['trial']} of {args.name}, {prov['objective']} = {prov['score']:.6g}, mask {mask.short_string()}")
    return 0


def _compare(args: Any) -> int:
    from layersearch.study import COMPARE_COLUMNS, compare_studies

    result = compare_studies(args.names, storage=args.storage, out_prefix=args.out_prefix,
                             measure=not args.no_measure, repeats=args.repeats, log=log)
    print(format_table(result.rows, COMPARE_COLUMNS))
    print(f"wrote {result.csv_path} and {result.json_path}")
    return 0


# ----- formatting -------------------------------------------------------------------------------
def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A plain aligned text table."""
    cells = [[_fmt(row.get(col)) for col in columns] for row in rows]
    widths = [max([len(col)] + [len(r[i]) for r in cells]) for i, col in enumerate(columns)]
    lines = ["  ".join(col.ljust(w) for col, w in zip(columns, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _describe(settings: Any) -> str:
    return _describe_dict(settings.identity())


def _describe_dict(settings: dict[str, Any]) -> str:
    keys = ("model", "domain", "strategy", "objective", "skip_ratio", "samples", "seed", "max_new_tokens")
    return ", ".join(f"{key} {settings.get(key)}" for key in keys if settings.get(key) is not None)
