"""The study commands' text: aligned tables, one-line settings, ``study show``'s summary, and
quieting Optuna's and transformers' chatter on stderr."""

from __future__ import annotations

import sys
from typing import Any, Sequence


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


def describe_settings(settings: dict[str, Any]) -> str:
    """A study's settings (its identity) on one line."""
    keys = ("model", "domain", "strategy", "objective", "skip_ratio", "samples", "seed", "prompt_seed", "prompt_split",
            "max_new_tokens")
    text = ", ".join(f"{key} {settings.get(key)}" for key in keys if settings.get(key) is not None)
    if settings.get("space", "skips") != "skips":  # skip-mask studies read as they always did
        text += f", space {settings['space']}"
    options = settings.get("strategy_options") or {}
    return text + "".join(f", {key} {value}" for key, value in options.items())


def created_text(result: Any) -> str:
    """``study create``'s line about :func:`layersearch.study.create_study`'s result."""
    if not result.created:
        return f"study {result.name} already exists in {result.url} with the same settings"
    extra = f", {result.enqueued} mask(s) enqueued" if result.enqueued else ""
    device = (result.settings.profile or {}).get("device")
    if device and result.settings.objective in ("expected-speedup", "tpt"):
        extra += f", costs predicted for {_predicts_for(device)}"
    return f"created study {result.name} in {result.url} ({describe_settings(result.settings.identity())}{extra})"


def _predicts_for(device: str) -> str:
    """A profile's device as its predictions name it (older files' ``cuda (<name>)`` as ``cuda: <name>``)."""
    return f"cuda: {device[6:-1]}" if device.startswith("cuda (") and device.endswith(")") else device


def list_text(rows: Sequence[dict[str, Any]], storage: str | None) -> str:
    """``study list``'s table of :func:`layersearch.study.list_studies`'s rows."""
    if not rows:
        return "no studies" + ("" if storage else " in studies/*.db")
    columns = ("name", "strategy", "objective", "domain", "model", "complete", "trials", "best_value", "storage")
    return format_table(rows, columns)


def show_text(info: dict[str, Any]) -> str:
    """``study show``'s summary of :func:`layersearch.study.show_study`'s result."""
    settings = info["settings"]
    lines = [
        f"study      {info['name']}  ({info['storage']})",
        f"settings   {describe_settings(settings)}",
        f"trials     {info['trials']} ({', '.join(f'{k.lower()} {v}' for k, v in sorted(info['states'].items())) or 'none'})",
        f"search     {info['search_seconds']:.1f} s in trials ({info['span_seconds']:.1f} s first start to last end)",
    ]
    best = info["best"]
    if best is None:
        lines.append("best       no completed trial yet")
    else:
        lines += [
            f"best       trial {best['trial']}: {settings['objective']} = {best['value']:.6g} ({info['direction']})"
            + _predicted_for(settings, info.get("profile_device")),
            f"mask       {best['mask']}  (skip ratio {fmt(best['skip_ratio'])})",
            f"M, alpha   {fmt(best['M'])}, {fmt(best['alpha'])}   tokens/s {fmt(best['tokens_per_second'])}",
        ]
    return "\n".join(lines)


def _predicted_for(settings: dict[str, Any], device: str | None) -> str:
    """``, predicted on <device>`` for an objective the latency profile costs ("" otherwise)."""
    if not device or settings.get("objective") not in ("expected-speedup", "tpt"):
        return ""
    return f", predicted on {_predicts_for(device)}"


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A plain aligned text table."""
    cells = [[fmt(row.get(col)) for col in columns] for row in rows]
    widths = [max([len(col)] + [len(r[i]) for r in cells]) for i, col in enumerate(columns)]
    lines = ["  ".join(col.ljust(w) for col, w in zip(columns, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def fmt(value: Any) -> str:
    """A table cell: ``-`` for None, 4 significant digits for floats."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def exported_text(path: Any, name: str, mask: Any) -> str:
    """The line of ``study export``: the file written, the trial of study ``name`` and its score, the mask."""
    prov = mask.provenance
    return (f"wrote {path}: trial {prov['trial']} of {name}, {prov['objective']} = {prov['score']:.6g}, "
            f"mask {mask.short_string()}")
