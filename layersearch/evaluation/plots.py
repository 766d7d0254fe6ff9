"""PNG figures of masks and searches: the mask grid, one study's history, studies compared.

* :func:`plot_mask` draws a :class:`~layersearch.masks.mask.SkipMask` as a layers x {attention,
  MLP} grid in the colours of KNN-SSD's Figures 9/10: kept sub-layers grey, skipped
  attention red, skipped MLP blue.
* :func:`plot_history` draws a study's objective per completed trial and the best-so-far
  curve against wall-clock seconds since the first trial started.
* :func:`plot_compare` draws the best-so-far curves of several studies on one axes, to
  compare search strategies by how fast they find good masks.
* :func:`plot_transfer` draws a transfer matrix (mask's domain x evaluated domain) as a heatmap.

Studies are plain Optuna studies following the layersearch conventions (trial user_attrs
``mask``, ``M``, ``alpha``...; study user_attr ``settings``); only what is present is used.

matplotlib is imported lazily, with the Agg backend, so importing this module costs nothing
and works without a display. Figures are built with :class:`matplotlib.figure.Figure`
rather than pyplot so no global figure state leaks between calls. Every PNG is written to a
temporary file in the target folder and renamed into place: a failure never leaves a
partial file.
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask

if TYPE_CHECKING:  # imported lazily at run time
    import optuna
    from matplotlib.figure import Figure

    from layersearch.common.outputs import OutputTarget

# KNN-SSD Figures 9/10: grey retained, red skipped attention, blue skipped MLP.
KEPT_COLOUR = "#bdbdbd"
ATTENTION_COLOUR = "#d62728"
MLP_COLOUR = "#1f77b4"
INT8_COLOUR = "#ffbf00"  # an int8 sub-layer of a draft plan (amber: run, but cheaper)
INT4_COLOUR = "#7fb800"  # an int4 sub-layer of a draft plan (green: run, cheaper still)

PLOTS_DIR = Path("plots")


# ----- public API ---------------------------------------------------------------------------
_F = TypeVar("_F", bound=Callable[..., Any])


def plain_text(draw: _F) -> _F:
    """Run ``draw`` with matplotlib's mathtext off: every label here is text from user data (domain,
    study and mask names, titles), and a ``$`` in it must print as a ``$``, not start TeX."""
    @functools.wraps(draw)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": False}):  # read when each text (tick labels too) is made
            return draw(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


@plain_text
def plot_mask(mask: SkipMask, out: "str | Path | OutputTarget", *, title: str | None = None) -> Path:
    """Draw ``mask`` as a layers x {attention, MLP} grid and write it as a PNG to ``out``."""
    # Lay the figure out in inches around square cells, so the grid fills it at any depth.
    cell = min(0.5, 14.0 / mask.num_layers)  # 8 layers: 0.5 in; 80 layers: 0.175 in
    grid_w, grid_h = cell * mask.num_layers, 2 * cell
    left, right, top, bottom, legend = 0.9, 0.3, 0.5, 0.55, 0.3
    width = max(6.0, left + grid_w + right)  # room for the title on shallow models
    height = top + grid_h + bottom + legend
    fig = _figure_class()(figsize=(width, height))
    x0 = left + (width - left - right - grid_w) / 2  # centre a narrow grid
    ax = fig.add_axes((x0 / width, (bottom + legend) / height, grid_w / width, grid_h / height))
    _draw_mask_grid(ax, mask)
    fig.suptitle(title if title is not None else _mask_title(mask), fontsize=10,
                 y=1 - 0.12 / height, va="top")
    handles = _mask_legend_handles(mask)
    # Legend below the grid so it never covers a square.
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, fontsize=9)
    return _save_atomic(fig, out)


@plain_text
def plot_history(study: "optuna.Study", out: "str | Path | OutputTarget", *, title: str | None = None) -> Path:
    """Plot each completed trial's objective and the best-so-far curve against wall-clock seconds."""
    direction = _single_direction(study)
    trials = _completed_trials(study)
    seconds, x_label = _elapsed(trials, study)
    values = [float(t.value) for t in trials]
    best = best_so_far(values, direction)

    fig = _figure_class()(figsize=(8.0, 4.5))
    ax = fig.add_subplot()
    ax.scatter(seconds, values, s=14, color="#7f7f7f", alpha=0.7, label="trial objective", zorder=2)
    ax.plot(seconds, best, drawstyle="steps-post", color=ATTENTION_COLOUR, linewidth=2,
            label="best so far", zorder=3)
    best_at = _best_index(values, direction)
    best_trial = trials[best_at]
    ax.scatter([seconds[best_at]], [best_trial.value], marker="*", s=160,
               color=ATTENTION_COLOUR, edgecolor="black", zorder=4, label=_best_label(best_trial))
    ax.set_xlabel(x_label)
    ax.set_ylabel(f"{_objective_name(study)} ({_better(direction)})")
    ax.set_title(title if title is not None else _study_title(study), fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return _save_atomic(fig, out)


@plain_text
def plot_compare(
    studies: Sequence["optuna.Study"], out: "str | Path | OutputTarget", *, labels: Sequence[str] | None = None
) -> Path:
    """Plot the best-so-far curves of several studies against their search wall-clock on one axes."""
    if not studies:
        raise LayersearchError("nothing to compare: no study given")
    if labels is not None and len(labels) != len(studies):
        raise LayersearchError(f"got {len(labels)} labels for {len(studies)} studies")
    names = list(labels) if labels is not None else [s.study_name for s in studies]
    # Collect every series first so an empty study fails before any drawing.
    series = [_best_series(study) for study in studies]

    fig = _figure_class()(figsize=(8.0, 4.5))
    ax = fig.add_subplot()
    for name, (seconds, best, _) in zip(names, series):
        # A step that stays flat until the last trial ends shows how long the search ran.
        ax.plot(seconds, best, drawstyle="steps-post", marker="o", markersize=3, linewidth=1.8,
                label=f"{name} (best {best[-1]:.4g})")
    x_labels = {x_label for _, _, x_label in series}
    ax.set_xlabel(x_labels.pop() if len(x_labels) == 1 else "seconds since first trial / trial number")
    ax.set_ylabel(_compare_y_label(studies))
    ax.set_title("best objective so far vs search wall-clock", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return _save_atomic(fig, out)


@plain_text
def plot_transfer(
    speedup: Sequence[Sequence[float | None]],
    accepted: Sequence[Sequence[float | None]],
    mask_labels: Sequence[str],
    domain_labels: Sequence[str],
    out: str | Path,
) -> Path:
    """Heatmap of a transfer matrix (SWIFT Fig. 2b, KNN-SSD Fig. 1): rows are the domains the
    masks were searched on, columns the domains evaluated on; colour is the speedup (centred
    on 1.0), each cell also prints M."""
    import numpy as np

    if not mask_labels or not domain_labels:
        raise LayersearchError("an empty transfer matrix cannot be drawn")
    values = np.array([[np.nan if v is None else v for v in row] for row in speedup], dtype=float)
    fig = _figure_class()(figsize=(1.6 + 1.3 * len(domain_labels), 1.2 + 0.8 * len(mask_labels)))
    ax = fig.add_subplot()
    spread = max(0.05, float(np.nanmax(np.abs(values - 1.0))) if np.isfinite(values).any() else 0.05)
    image = ax.imshow(values, cmap="RdYlGn", vmin=1.0 - spread, vmax=1.0 + spread, aspect="auto")
    for i, row in enumerate(values):
        for j, value in enumerate(row):
            m = accepted[i][j]
            text = "-" if np.isnan(value) else f"{value:.2f}x"
            ax.text(j, i, text + ("" if m is None else f"\nM {m:.2f}"), ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(domain_labels)), labels=list(domain_labels), rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(mask_labels)), labels=list(mask_labels), fontsize=8)
    ax.set_xlabel("evaluated on (test prompts)")
    ax.set_ylabel("mask searched on")
    ax.set_title("speedup over plain generate", fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return _save_atomic(fig, out)


# ----- SWIFT's input stream -----------------------------------------------------
@plain_text
def plot_swift_stream(
    domains: Sequence[str],
    speedups: dict[str, Sequence[float]],
    matchness: dict[str, Sequence[float | None]],
    out: str | Path,
) -> Path:
    """Per-input speedup over plain decoding of each method along a domain-switching stream
    (SWIFT Fig. 7), with the on-the-fly methods' matchness below; domain changes are shaded."""
    if not domains or not speedups:
        raise LayersearchError("an empty stream cannot be drawn")
    fig = _figure_class()(figsize=(9.0, 5.5))
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    x = list(range(len(domains)))
    colors = {m: f"C{i}" for i, m in enumerate(dict.fromkeys([*speedups, *matchness]))}  # one colour per method
    for method, values in speedups.items():
        top.plot(x, values, marker="o", markersize=3, linewidth=1.4, label=method, color=colors[method])
    top.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    for method, scores in matchness.items():
        bottom.plot(x, [float("nan") if v is None else v for v in scores], marker="s", markersize=3, linewidth=1.2,
                    label=method, color=colors[method])
    for ax in (top, bottom):
        start, block = 0, 0
        for i in range(1, len(domains) + 1):
            if i == len(domains) or domains[i] != domains[start]:  # a domain's run ends at i
                if block % 2:  # every other domain block shaded
                    ax.axvspan(start - 0.5, i - 0.5, color="grey", alpha=0.12, linewidth=0)
                if ax is top:
                    ax.text((start + i - 1) / 2, 1.0, domains[start], transform=ax.get_xaxis_transform(), ha="center", va="bottom", fontsize=8)
                start, block = i, block + 1
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    top.set_ylabel("speedup over plain")
    bottom.set_ylabel("matchness (best mask)")
    bottom.set_ylim(0, 1)
    bottom.set_xlabel("input in the stream")
    fig.tight_layout()
    return _save_atomic(fig, out)


@plain_text
def plot_head_to_head(strategies: dict[str, dict[str, Any]], out: "str | Path | OutputTarget") -> Path:
    """One panel per strategy: its best objective so far against search seconds (each in its own
    objective's units, which do not compare across strategies), its held-out speedup over plain
    ``generate`` in the legend (the yardstick that does compare). ``strategies`` maps a name to
    ``{"curve": [[s, best], ...], "objective": str, "heldout_speedup": float | None}``."""
    if not strategies:
        raise LayersearchError("nothing to plot: no strategy")
    count = len(strategies)
    fig = _figure_class()(figsize=(8.0, 2.2 * count + 0.6))
    axes = fig.subplots(count, 1, sharex=True, squeeze=False)[:, 0]
    for ax, (name, entry) in zip(axes, strategies.items()):
        curve = entry.get("curve") or []
        speedup = entry.get("heldout_speedup")
        label = f"{name}: held-out {speedup:.2f}x plain" if speedup is not None else f"{name}: not measured"
        if curve:
            ax.plot([c[0] for c in curve], [c[1] for c in curve], drawstyle="steps-post", marker="o", markersize=3,
                    linewidth=1.8, label=label)
        ax.set_ylabel(str(entry.get("objective", "objective")), fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    axes[-1].set_xlabel("search seconds (best objective so far)")
    axes[0].set_title("search strategies head to head: best so far vs wall time", fontsize=10)
    fig.tight_layout()
    return _save_atomic(fig, out)


#: Most rows drawn per domain and most domains drawn by ``plot bench``: a figure of more is
#: unreadable, and matplotlib lays out 100,000 bars for minutes. The fastest rows are drawn.
MAX_BENCH_ROWS = 40
MAX_BENCH_DOMAINS = 12


def bench_rows_to_draw(domains: dict[str, list[dict[str, Any]]]) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """The rows :func:`plot_bench` draws: the first :data:`MAX_BENCH_DOMAINS` domains with rows,
    each its :data:`MAX_BENCH_ROWS` fastest rows (end to end), and one note per cut made."""
    kept, notes = {}, []
    with_rows = [(name, rows) for name, rows in domains.items() if rows]
    if len(with_rows) > MAX_BENCH_DOMAINS:
        notes.append(f"drawing the first {MAX_BENCH_DOMAINS} of {len(with_rows)} domains")
    for name, rows in with_rows[:MAX_BENCH_DOMAINS]:
        if len(rows) > MAX_BENCH_ROWS:
            notes.append(f"domain {name}: drawing the {MAX_BENCH_ROWS} fastest of {len(rows)} rows")
            rows = sorted(rows, key=lambda r: -_bar(r.get("speedup")))[:MAX_BENCH_ROWS]
        kept[name] = rows
    return kept, notes


def _bar(value: Any) -> float:
    """A bar's length: a missing or unmeasured (NaN) speedup is no bar."""
    return 0.0 if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


@plain_text
def plot_bench(domains: dict[str, list[dict[str, Any]]], out: "str | Path | OutputTarget") -> Path:
    """One panel per domain of a ``bench`` report: each row's end-to-end and decode-phase speedup
    over plain ``generate`` as horizontal bars, fastest first, a line at 1.0; rows whose output
    differed from plain are marked. ``domains`` maps a domain to its report rows (``config``,
    ``speedup``, ``decode_speedup``, ``identical_to_plain``)."""
    domains, _ = bench_rows_to_draw(domains)  # bounded: see MAX_BENCH_ROWS
    if not domains:
        raise LayersearchError("nothing to plot: the report has no rows")
    heights = [len(rows) for rows in domains.values()]
    fig = _figure_class()(figsize=(10.0, 1.0 + 0.28 * sum(heights) + 0.6 * len(heights)))
    axes = fig.subplots(len(domains), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, (domain, rows) in zip(axes, domains.items()):
        rows = sorted(rows, key=lambda r: _bar(r.get("speedup")))
        ys = range(len(rows))
        ends = [_bar(r.get("speedup")) for r in rows]
        decodes = [_bar(r.get("decode_speedup")) for r in rows]
        ax.barh([y + 0.2 for y in ys], decodes, height=0.4, color="#9ecae1", label="decode phase")
        ax.barh([y - 0.2 for y in ys], ends, height=0.4, color="#3182bd", label="end to end")
        for y, value in zip(ys, ends):
            ax.text(value, y - 0.2, f" {value:.2f}", va="center", fontsize=7)
        labels = [r["config"] + ("" if r.get("identical_to_plain", True) else "  (output differs)") for r in rows]
        ax.set_yticks(list(ys), labels=labels, fontsize=7)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_title(f"{domain}: speedup over plain generate", fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return _save_atomic(fig, out)


def default_plot_path(kind: str, name: str) -> Path:
    """Where a plot goes by default: ``plots/<kind>-<name>.png`` (unsafe characters become ``_``)."""
    if not kind or not name:
        raise LayersearchError("a plot path needs a kind and a name")
    return PLOTS_DIR / f"{_safe_name(kind)}-{_safe_name(name)}.png"


def best_so_far(values: Sequence[float], direction: Any) -> list[float]:
    """Running best of ``values``: minimum for ``minimize``, maximum for ``maximize``.

    ``direction`` is an Optuna ``StudyDirection`` or the string ``"minimize"``/``"maximize"``.
    NaN values never become the best (they keep the previous best, or NaN before any number).
    """
    maximize = _is_maximize(direction)
    best: list[float] = []
    current = math.nan
    for value in values:
        value = float(value)
        if not math.isnan(value) and (
            math.isnan(current) or (value > current if maximize else value < current)
        ):
            current = value
        best.append(current)
    return best


# ----- mask grid ----------------------------------------------------------------------------
def _draw_mask_grid(ax: Any, mask: SkipMask) -> None:
    """One square per sub-layer: row 0 attention, row 1 MLP, column = layer index."""
    from matplotlib.patches import Rectangle

    rows = ((0, "attention", ATTENTION_COLOUR), (1, "mlp", MLP_COLOUR))
    for row, kind, colour in rows:
        for layer in range(mask.num_layers):
            face = {"skip": colour, "int8": INT8_COLOUR, "int4": INT4_COLOUR, "full": KEPT_COLOUR}[mask.precision(kind, layer)]
            # Inset squares leave a white gap so neighbouring squares stay distinguishable.
            ax.add_patch(Rectangle((layer + 0.06, row + 0.06), 0.88, 0.88, facecolor=face,
                                   edgecolor="none"))
    ax.set_xlim(0, mask.num_layers)
    ax.set_ylim(2, 0)  # attention on top
    # At most ~32 labels, on round steps, so deep models keep legible tick labels.
    step = next(s for s in (1, 2, 4, 5, 10, 20, 50, 100) if s * 32 >= mask.num_layers or s == 100)
    ticks = range(0, mask.num_layers, step)
    ax.set_xticks([t + 0.5 for t in ticks], [str(t) for t in ticks], fontsize=7)
    ax.set_yticks([0.5, 1.5], ["attention", "MLP"], fontsize=9)
    ax.set_xlabel("layer", fontsize=9)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)


def _mask_legend_handles(mask: SkipMask) -> list[Any]:
    """Legend entries for the colours the grid actually shows (a red swatch means red squares)."""
    from matplotlib.patches import Patch

    handles = []
    if mask.num_skipped + mask.num_int8 + mask.num_int4 < 2 * mask.num_layers:
        handles.append(Patch(facecolor=KEPT_COLOUR, label="kept" if mask.is_skip_only else "full"))
    if mask.num_int8:
        handles.append(Patch(facecolor=INT8_COLOUR, label=f"int8 ({mask.num_int8})"))
    if mask.num_int4:
        handles.append(Patch(facecolor=INT4_COLOUR, label=f"int4 ({mask.num_int4})"))
    if mask.attention:
        handles.append(Patch(facecolor=ATTENTION_COLOUR, label=f"skipped attention ({len(mask.attention)})"))
    if mask.mlp:
        handles.append(Patch(facecolor=MLP_COLOUR, label=f"skipped MLP ({len(mask.mlp)})"))
    return handles


def _mask_title(mask: SkipMask) -> str:
    """Model name when known, then the skip ratio and the sub-layer count it stands for."""
    ratio = (f"skip ratio {mask.skip_ratio:.2f} "
             f"({mask.num_skipped} of {2 * mask.num_layers} sub-layers)")
    parts = [mask.model.name] if mask.model is not None else []
    parts.append(ratio)
    if not mask.is_skip_only:
        low_bit = [f"{n} sub-layers {quant}" for quant, n in (("int8", mask.num_int8), ("int4", mask.num_int4)) if n]
        parts.append(", ".join([*low_bit, f"LM head {mask.head_precision}"]))
    extra = [f"{k} {mask.provenance[k]}" for k in ("strategy", "objective") if mask.provenance.get(k)]
    if extra:
        parts.append(", ".join(extra))
    return " - ".join(parts)


# ----- study series -------------------------------------------------------------------------
def _completed_trials(study: "optuna.Study") -> list[Any]:
    """Completed trials in the order they finished; LayersearchError when there is none."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not trials:
        raise LayersearchError(f"study {study.study_name!r} has no completed trial")
    # Parallel workers finish out of number order; best-so-far follows completion time.
    return sorted(trials, key=lambda t: (t.datetime_complete is None, t.datetime_complete or 0, t.number))


def _elapsed(trials: Sequence[Any], study: "optuna.Study") -> tuple[list[float], str]:
    """Seconds from the study's first trial start to each trial's completion, and the x label.

    Trials added without timestamps fall back to trial numbers so the plot still draws.
    """
    if any(t.datetime_complete is None for t in trials):
        return [float(t.number) for t in trials], "trial number"
    starts = [t.datetime_start for t in study.get_trials(deepcopy=False) if t.datetime_start is not None]
    origin = min(starts) if starts else min(t.datetime_complete for t in trials)
    return [(t.datetime_complete - origin).total_seconds() for t in trials], "seconds since first trial started"


def _best_series(study: "optuna.Study") -> tuple[list[float], list[float], str]:
    """Elapsed seconds, best-so-far values and x label of one study."""
    direction = _single_direction(study)
    trials = _completed_trials(study)
    seconds, x_label = _elapsed(trials, study)
    return seconds, best_so_far([float(t.value) for t in trials], direction), x_label


def _single_direction(study: "optuna.Study") -> Any:
    """The study's only direction; multi-objective studies have no single best-so-far."""
    if len(study.directions) != 1:
        raise LayersearchError(f"study {study.study_name!r} has {len(study.directions)} objectives; "
                               "history plots need a single-objective study")
    return study.directions[0]


def _best_index(values: Sequence[float], direction: Any) -> int:
    """Index of the best non-NaN value (the first one on ties)."""
    candidates = [i for i, v in enumerate(values) if not math.isnan(v)] or [0]
    pick = max if _is_maximize(direction) else min
    return pick(candidates, key=lambda i: values[i])


def _is_maximize(direction: Any) -> bool:
    """True for maximize; accepts StudyDirection or its name in any case."""
    name = getattr(direction, "name", direction)
    if not isinstance(name, str) or name.lower() not in ("minimize", "maximize"):
        raise LayersearchError(f"direction must be 'minimize' or 'maximize', got {direction!r}")
    return name.lower() == "maximize"


def _better(direction: Any) -> str:
    return "higher is better" if _is_maximize(direction) else "lower is better"


# ----- labels -------------------------------------------------------------------------------
def _settings(study: "optuna.Study") -> dict[str, Any]:
    settings = study.user_attrs.get("settings")
    return settings if isinstance(settings, dict) else {}


def _objective_name(study: "optuna.Study") -> str:
    return str(_settings(study).get("objective") or "objective")


def _study_title(study: "optuna.Study") -> str:
    """Study name plus the settings that tell searches apart (model, domain, strategy, ratio)."""
    settings = _settings(study)
    known = [f"{key} {settings[key]}" for key in ("model", "domain", "strategy", "skip_ratio")
             if settings.get(key) not in (None, "")]
    return study.study_name + (f" ({', '.join(known)})" if known else "")


def _best_label(trial: Any) -> str:
    """Legend text of the best trial: its value, number and mask when recorded."""
    label = f"best {trial.value:.4g} (trial {trial.number})"
    mask = trial.user_attrs.get("mask")
    return f"{label}\n{mask}" if mask else label


def _compare_y_label(studies: Sequence["optuna.Study"]) -> str:
    """The shared objective and direction, or every distinct one when studies differ."""
    parts = sorted({f"{_objective_name(s)} ({_better(s.directions[0])})" for s in studies})
    return parts[0] if len(parts) == 1 else " / ".join(parts)


def _safe_name(text: str) -> str:
    # Study names may hold '/', ':' or spaces; keep file names portable.
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


# ----- matplotlib plumbing ------------------------------------------------------------------
def _figure_class() -> type["Figure"]:
    """matplotlib's Figure with the Agg backend selected (no display needed); one error line naming
    the plots extra where matplotlib is not installed."""
    from layersearch.common.extras import require_extra

    matplotlib = require_extra("matplotlib", "plots")
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure


def _save_atomic(fig: "Figure", out: "str | Path | OutputTarget") -> Path:
    """Render ``fig`` as PNG and write it whole to ``out`` (see :mod:`layersearch.common.outputs`)."""
    import io

    from layersearch.common.outputs import write_output

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    return Path(write_output(check_png_output(out), buffer.getvalue()).given)


def check_png_output(out: "str | Path | OutputTarget", *, default: bool = False) -> "OutputTarget":
    """``out`` checked as a PNG output (suffix .png, writable) before any drawing; ``default``:
    our own default path (its missing ``plots/`` folder is made when the file is written).
    Without matplotlib (the plots extra) nothing could be drawn: one error line, before any work."""
    from layersearch.common.extras import require_extras
    from layersearch.common.outputs import check_output

    require_extras("plots")
    return check_output(out, "out", suffixes=(".png",), default=default)


def bench_rows(path: str) -> dict[str, list[dict[str, Any]]]:
    """The rows of each domain of a ``bench`` report, checked enough to draw."""
    from layersearch.common.jsonfile import BENCH_SCHEMA_VERSION, read_json_file

    data = read_json_file(path, "bench report")
    if not isinstance(data, dict):
        raise LayersearchError(f"{path}: a bench report holds a JSON object, this file holds a JSON {_json_type(data)}")
    version = data.get("schema_version", BENCH_SCHEMA_VERSION)  # reports before versions: the same format
    if isinstance(version, bool) or version != BENCH_SCHEMA_VERSION:
        raise LayersearchError(f"{path}: unsupported bench report schema_version {version!r} (expected {BENCH_SCHEMA_VERSION})")
    domains = data.get("domains")
    if not isinstance(domains, dict):
        raise LayersearchError(f"{path}: not a bench report (no domains)")
    result = {}
    for name, entry in domains.items():
        rows = entry.get("rows") if isinstance(entry, dict) else None
        if not isinstance(rows, list) or not all(_drawable(r) for r in rows):
            raise LayersearchError(f"{path}: domain {name!r} has malformed rows")
        result[name] = rows
    return result


def _json_type(data: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(data), "number")


def _drawable(row: Any) -> bool:
    numbers = (row.get(k) for k in ("speedup", "decode_speedup")) if isinstance(row, dict) else ()
    return (isinstance(row, dict) and isinstance(row.get("config"), str)
            and all(v is None or isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers))
