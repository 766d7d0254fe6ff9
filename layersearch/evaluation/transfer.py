"""The transfer matrix: each domain's mask evaluated on every domain's held-out prompts.

SWIFT (Fig. 2b) and KNN-SSD (Fig. 1) show that a mask searched on one task loses speed on
another. :func:`transfer_matrix` measures that on this machine: for every evaluation
domain it loads that domain's ``test`` prompts (never the ``train`` prompts a search used),
runs plain ``generate`` and the speculative decoder with each mask back to back, and
reports per (mask, domain) the speedup over plain decoding and M (tokens per target forward).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from layersearch.common.errors import LayersearchError
from layersearch.runtime import DRAFT_THRESHOLD, MAX_DRAFT
from layersearch.masks.mask import SkipMask


@dataclass(frozen=True)
class TransferCell:
    """One mask on one domain's prompts."""

    mask_domain: str
    eval_domain: str
    speedup: float | None
    M: float
    alpha: float | None
    tokens_per_second: float
    baseline_tokens_per_second: float


@dataclass(frozen=True)
class TransferResult:
    """Every cell, with the row (mask) and column (evaluation domain) order."""

    mask_domains: tuple[str, ...]
    eval_domains: tuple[str, ...]
    cells: tuple[TransferCell, ...]

    def cell(self, mask_domain: str, eval_domain: str) -> TransferCell:
        """The cell of one mask on one domain."""
        return next(c for c in self.cells if (c.mask_domain, c.eval_domain) == (mask_domain, eval_domain))

    def grid(self, field: str) -> list[list[float | None]]:
        """``field`` of every cell as rows (masks) x columns (domains)."""
        return [[getattr(self.cell(m, d), field) for d in self.eval_domains] for m in self.mask_domains]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"mask_domains": list(self.mask_domains), "eval_domains": list(self.eval_domains),
                "cells": [vars(c) for c in self.cells]}


def transfer_matrix(
    loaded: Any,
    masks: Mapping[str, SkipMask],
    domains: Sequence[str],
    *,
    samples: int = 4,
    prompt_seed: int = 0,
    split: str | None = "test",
    max_new_tokens: int = 32,
    max_draft: int = MAX_DRAFT,
    draft_threshold: float = DRAFT_THRESHOLD,
    repeats: int = 1,
    specbench: str | None = None,
    progress: Callable[[str], None] = lambda message: None,
) -> TransferResult:
    """Speedup and M of each mask (keyed by the domain it was searched on) on each domain.

    Plain ``generate`` and every mask run through :func:`layersearch.evaluation.measure.compare` (interleaved
    prompt by prompt, order rotated), so drift on a shared machine hits both sides alike; the
    speedup is the median of the per-repeat ratios, M and alpha are pooled over repeats.
    """
    from layersearch.data import load_prompts
    from layersearch.evaluation.measure import PLAIN_NAME, compare, plain_and_masks, warm_up
    from layersearch.runtime.stats import combine

    if not masks:
        raise LayersearchError("no masks to evaluate: give mask DOMAIN=FILE", fields="mask")
    if not domains:
        raise LayersearchError("no domains to evaluate on")
    if repeats < 1:
        raise LayersearchError(f"repeats must be >= 1, got {repeats}")
    for mask in masks.values():
        mask.check_model(loaded.info)
    # Every domain's prompts first: a missing package or file fails before any timing.
    texts = {d: [p.text for p in load_prompts(d, samples, seed=prompt_seed, split=split, specbench=specbench,
                                              tokenizer=loaded.tokenizer)]  # chat rows of a file: domain
             for d in domains}
    from layersearch.models.context import check_all_fit

    check_all_fit(loaded, ((f"{d.removeprefix('file:')}: prompt {i} ({t[:30]!r}...)", len(loaded.tokenizer(t).input_ids))
                           for d in domains for i, t in enumerate(texts[d], 1)), max_new_tokens)  # before any timing
    configurations = plain_and_masks(loaded.model, dict(masks), max_draft=max_draft, draft_threshold=draft_threshold)
    cells = []
    for domain in domains:
        prompts = [loaded.tokenizer(text, return_tensors="pt").input_ids for text in texts[domain]]
        warm_up(configurations, prompts[0])
        progress(f"{domain}: plain generate and {len(masks)} mask(s) on {samples} {split or 'any'} prompts x {repeats}")
        measured = compare(configurations, prompts, repeats, new_tokens=max_new_tokens, baseline=PLAIN_NAME,
                           catch=False)
        base_tps = combine(measured[PLAIN_NAME].stats).tokens_per_second
        for name in masks:
            pooled = combine(measured[name].stats)  # M and alpha as DecodeStats defines them
            cells.append(TransferCell(
                mask_domain=name, eval_domain=domain,
                speedup=statistics.median(measured[name].speedups),
                M=pooled.mean_accepted_length, alpha=pooled.acceptance_rate,
                tokens_per_second=pooled.tokens_per_second, baseline_tokens_per_second=base_tps,
            ))
    return TransferResult(tuple(masks), tuple(domains), tuple(cells))


def format_matrix(result: TransferResult) -> str:
    """Two text matrices (speedup, then M): rows are masks, columns evaluation domains."""
    width = max(12, *(len(d) + 2 for d in result.eval_domains))
    label = max(16, *(len(m) + 2 for m in result.mask_domains))
    lines = []
    for title, field in (("speedup over plain generate", "speedup"), ("M (tokens per target forward)", "M")):
        lines.append(f"{title}: mask searched on (rows) x evaluated on (columns), test prompts")
        lines.append(f"{'':<{label}}" + "".join(f"{d:>{width}}" for d in result.eval_domains))
        for mask, row in zip(result.mask_domains, result.grid(field)):
            lines.append(f"{mask:<{label}}" + "".join(f"{'-':>{width}}" if v is None else f"{v:>{width}.2f}" for v in row))
        lines.append("")
    return "\n".join(lines).rstrip()


@dataclass(frozen=True)
class TransferJob:
    """What ``layersearch transfer`` measures: ``masks`` (domain -> mask file) on each evaluation
    domain (``domains``, default the masks' own, plus the ``prompts`` file's), written under ``out_prefix``."""

    masks: Mapping[str, str]
    domains: str | None = None
    prompts: str | None = None
    samples: int = 4
    prompt_seed: int = 0
    split: str = "test"
    max_new_tokens: int = 32
    repeats: int = 1
    specbench: str | None = None
    max_draft: int = MAX_DRAFT
    draft_threshold: float = DRAFT_THRESHOLD
    out_prefix: str = "transfer"


def run_transfer(job: TransferJob, load: Callable[[], Any], progress: Callable[[str], None]) -> tuple[TransferResult, Any, Any]:
    """(result, JSON path, PNG path): the prompt file checked before ``load()``, then the matrix
    measured and written as ``PREFIX.json`` and the heatmap ``PREFIX.png``."""
    from pathlib import Path

    from layersearch.common.checks import check_int
    from layersearch.common.jsonfile import write_json_atomic
    from layersearch.evaluation.plots import plot_transfer

    for value, name in ((job.samples, "samples"), (job.max_new_tokens, "max_new_tokens"), (job.repeats, "repeats")):
        check_int(value, name)
    domains = [d for d in (job.domains or ",".join(job.masks)).split(",") if d]
    if job.prompts:
        from layersearch.data.user import choose_rows, domain_for

        choose_rows(job.prompts, job.samples, job.prompt_seed, job.split)  # a bad file fails before the model loads
        domains.append(domain_for(job.prompts))
    loaded = load()
    masks = {domain: SkipMask.load(path, model=loaded.info) for domain, path in job.masks.items()}
    result = transfer_matrix(
        loaded, masks, domains, samples=job.samples, prompt_seed=job.prompt_seed, split=job.split,
        max_new_tokens=job.max_new_tokens, max_draft=job.max_draft, draft_threshold=job.draft_threshold,
        repeats=job.repeats, specbench=job.specbench, progress=progress,
    )
    prefix = Path(job.out_prefix)
    report = {"model": loaded.info.to_dict(), "split": job.split, "samples": job.samples,
              "max_new_tokens": job.max_new_tokens, "masks": dict(job.masks), **result.to_dict()}
    json_path = write_json_atomic(prefix.with_name(prefix.name + ".json"), report)
    png = plot_transfer(result.grid("speedup"), result.grid("M"), result.mask_domains, result.eval_domains,
                        prefix.with_name(prefix.name + ".png"))
    return result, json_path, png
