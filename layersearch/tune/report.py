"""The tune report: markdown (what was tried, the held-out table, the chosen spec in words) and
a PNG of the search curve (best train speedup against wall time) beside it."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from layersearch.evaluation.plots import plain_text
from layersearch.decoder.spec import DecoderSpec
from layersearch.tune.study import TrialRecord


def report_paths(out: str, report: str | None) -> tuple[str, str]:
    """(markdown, PNG) paths: ``report`` (default: ``out`` with .md) and the same name with .png."""
    from layersearch.common.errors import LayersearchError
    from layersearch.common.outputs import STDOUT, check_file_name

    for given, what in ((out, "out"), (report, "report")):
        if given == STDOUT:  # the spec and its report are files that name each other
            raise LayersearchError(f"{what} -: tune writes its spec and report as files (the report shows the "
                                   "search curve's PNG beside it); give a file name", fields=what)
        if given:
            check_file_name(given, what)
    markdown = report if report else str(Path(out).with_suffix(".md"))
    return markdown, str(Path(markdown).with_suffix(".png"))


def check_picture(markdown_path: str, png_path: str) -> None:
    """Refuse to replace an existing ``png_path`` that is not the picture of the report at
    ``markdown_path`` (that report exists and shows it): a user's own ``x.png`` beside a new ``x.md``."""
    import os

    from layersearch.common.errors import LayersearchError

    if not os.path.lexists(png_path) or not os.path.isfile(png_path):
        return  # new, or a stream / folder that check_output words
    try:
        with open(markdown_path, encoding="utf-8", errors="replace") as handle:
            shows = f"]({Path(png_path).name})" in handle.read(1 << 20)
    except OSError:
        shows = False
    if not shows:
        raise LayersearchError(f"{png_path} exists and is not the picture of a tune report {markdown_path}: the report "
                               "writes its search curve there; move that file or give the report another name")


def describe(spec: DecoderSpec) -> str:
    """The spec in words, one sentence."""
    if spec.plain:
        return "plain decoding with transformers' generate (no drafting)"
    from layersearch.runtime.drafters import drafter_entry

    entry, model = drafter_entry(spec.drafter.name), spec.drafter.model
    drafts = entry.described(f"draft model {model.ref}" if model is not None else
                             _self_draft(spec) if entry.takes_plan else None)
    rule = spec.lookahead
    length = f"{rule.name} draft length (at most {rule.max_draft}" + (
        f", threshold {rule.threshold:.2f})" if rule.name in ("confidence", "adaptive") else ")")
    head = f", draft head over the {spec.drafter.vocab} most frequent tokens" if spec.drafter.vocab else ""
    if spec.drafter.quant:
        head += f", draft weights {spec.drafter.quant}"
    return f"drafts from {drafts}{head}; {length}; {spec.verifier} verification; greedy, lossless"


def _self_draft(spec: DecoderSpec) -> str:
    """The model drafting for itself under the spec's mask, in words."""
    mask = spec.mask_source.mask
    skipped = f"skipping {len(mask.attention)} attention and {len(mask.mlp)} MLP sub-layers of {mask.num_layers} layers " \
              f"({mask.skip_ratio:.0%})" if mask is not None else "the default mask"
    label = mask.provenance.get("label") if mask is not None else None
    return f"the model itself {skipped}" + (f", mask {label!r}" if label else "")


def best_curve(records: Sequence[TrialRecord]) -> tuple[list[float], list[float]]:
    """(seconds, best train speedup so far) at each completed trial."""
    xs, ys, best = [], [], float("-inf")
    for record in records:
        if record.value is None:
            continue
        best = max(best, record.value)
        xs.append(record.elapsed)
        ys.append(best)
    return xs, ys


@plain_text  # the title holds user data: a $ in it is text, not TeX
def curve_png(records: Sequence[TrialRecord], title: str) -> bytes:
    """The search curve as PNG bytes: every trial's train speedup and the best so far."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot(1, 1, 1)
    done = [r for r in records if r.value is not None]
    for kind in sorted({r.kind for r in done}):
        points = [(r.elapsed, r.value) for r in done if r.kind == kind and r.value is not None]
        ax.scatter([x for x, _ in points], [y for _, y in points], s=14, label=kind, alpha=0.7)
    xs, ys = best_curve(records)
    ax.step(xs, ys, where="post", color="black", label="best so far")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("wall time of the search (s)")
    ax.set_ylabel("train decode-phase speedup vs plain")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()


def markdown(result: Any, png_name: str) -> str:
    """The report's text (``result``: a :class:`layersearch.tune.run.TuneResult`)."""
    records, selection = result.records, result.selection
    kinds = Counter(r.kind for r in records)
    failed = sum(1 for r in records if r.value is None)
    lines = [
        f"# Tune report: {result.prompts}",
        "",
        f"Model {result.model}" + (f", draft model {result.draft_model}" if result.draft_model else "") +
        f"; study {result.study!r} in {result.storage}.",
        "",
        "## What was tried",
        "",
        f"{len(records)} trials ({result.new_trials} in this run, {failed} failed or pruned) over "
        f"{result.search_seconds:.0f} s of search" + (f" (budget {result.budget:g} s: the mask pool and the trials)"
                                                      if result.budget else "") + ": "
        + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + ". Trials are numbered as the study numbers them, from 0.",
        f"Mask pool: {len(result.pool)} masks after the profile's pruning"
        + (": " + ", ".join(f"{c.label} (matchness {c.matchness:.2f}, predicted {c.predicted:.2f}x)" for c in result.pool)
           + (f" (predictions on {result.predicted_on})" if getattr(result, "predicted_on", "") else "")
           if result.pool else "") + ".",
        f"Each trial decoded {result.train_prompts} train prompts x {result.max_new_tokens} new tokens beside plain generate, "
        f"every run with the {result.kernels} CPU kernels (run the spec with them: kernels {result.kernels!r})"
        + (f"; the draft model was searched with its own and {', '.join(result.quants)} weights." if result.quants else "."),
        scoring_text(result),
        "",
        f"![search curve]({png_name})",
        "",
        "## Held-out prompts",
        "",
        f"{result.test_prompts} test prompts, {result.repeats} repeats (medians); speedups are decode-phase against plain "
        "generate; `vs X` is our speedup over peer X's.",
        "",
    ]
    peers = [r.label for r in selection.rows if r.spec is None and r.label != selection.rows[0].label]
    header = ["config", "train", "speedup", "end-to-end", *(f"vs {p}" for p in peers), "M", "alpha", "identical"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in selection.rows:
        if row.error:
            lines.append(f"| {row.label} | failed: {row.error} |")
            continue
        cells = [row.label + (" (chosen)" if row.label == selection.winner else ""), _num(row.train_speedup, "x"),
                 _num(row.speedup, "x"), _num(row.end_to_end, "x"), *(_num(row.vs_peers.get(p), "x") for p in peers),
                 _num(row.M), _num(row.alpha), "yes" if row.identical else "NO"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Chosen", ""]
    for row in selection.rows:
        if row.spec is not None:
            lines.append(f"- {row.label}: {describe(row.spec)}")
    lines.append("")
    if selection.plain_chosen:
        lines.append("Nothing beat plain decoding on the held-out prompts, so the spec written is plain decoding.")
    else:
        best = next(r for r in selection.rows if r.label == selection.winner)
        lines.append(f"**{selection.winner}**, {best.speedup:.2f}x decode-phase speedup on held-out prompts: "
                     f"{describe(selection.spec)}.")
    lines.append("")
    return "\n".join(lines)


def _num(value: float | None, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.2f}{suffix}"


#: The header of :func:`held_out_table` (and of rows added below it, :func:`held_out_lines`).
HELD_OUT_HEADER = f"{'config':48} {'train':>7} {'decode':>8} {'M':>5} {'alpha':>6} identical"
#: What the header's columns measure, the line under it.
HELD_OUT_NOTE = ("train / decode: decode-phase speedup (prefill excluded) over plain generate on the train prompts "
                 "(the search) / the held-out prompts; M: tokens per verification; alpha: drafted tokens accepted; "
                 "-: not measured (plain generate and transformers' peers count no drafts)")


def held_out_lines(rows: Any) -> list[str]:
    """HeldOutRows as aligned text lines under :data:`HELD_OUT_HEADER`."""
    lines = []
    for row in rows:
        if row.error:
            lines.append(f"{row.label[:48]:48} failed: {row.error}")
            continue
        train = "-" if row.train_speedup is None else f"{row.train_speedup:.2f}x"
        m = "-" if row.M is None else f"{row.M:.2f}"
        alpha = "-" if row.alpha is None else f"{row.alpha:.2f}"
        lines.append(f"{row.label[:48]:48} {train:>7} {row.speedup:>7.2f}x {m:>5} {alpha:>6} {'yes' if row.identical else 'NO'}")
    return lines


def scoring_text(result: Any) -> str:
    """How trials were scored, and the compile seconds kept out of every score."""
    scored = getattr(result, "scored_by", "measured")
    text = ("Trials were scored by their measured decode-phase speedup." if scored == "measured" else
            f"Trials decoded eagerly (acceptance and output measured here) and were scored by the speedup "
            f"{scored} (the latency profile's costs for each run's own steps), train column included.")
    if getattr(result, "compiled_forwards", 0) or getattr(result, "compile_seconds", 0.0):
        # the finalists reuse what the captured profile compiled (the same forward keys): only the rest is new
        text += (f" Only the finalists were compiled: {result.compiled_forwards} forwards beyond those the captured "
                 f"profile compiled; compiling took {result.compile_seconds:.1f} s, outside every score.")
    return text


def held_out_table(result: Any) -> str:
    """The held-out rows as aligned text, and the choice."""
    lines = [scoring_text(result), HELD_OUT_NOTE, HELD_OUT_HEADER, *held_out_lines(result.selection.rows)]
    chosen = "plain decoding (nothing beat it on held-out prompts)" if result.selection.plain_chosen else \
        f"{result.selection.winner}: {describe(result.spec)}"
    lines.append(f"chosen: {chosen}")
    return "\n".join(lines)
