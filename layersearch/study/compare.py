"""``compare``: studies' best masks side by side, optionally re-timed against plain generate.

Results are written as a CSV and a JSON table (:func:`write_table`).
"""

from __future__ import annotations

import csv
import io
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from layersearch.common.checks import check_int
from layersearch.common.errors import LayersearchError
from layersearch.study.inspect import search_seconds
from layersearch.study.rebuild import load_study_model, prompt_texts
from layersearch.study.settings import StudySettings
from layersearch.study.storage import open_study
from layersearch.study.trials import best_trial


COMPARE_COLUMNS = (
    "study", "strategy", "objective", "domain", "model", "best_value", "best_trial", "trials",
    "search_seconds", "skip_ratio", "mask", "M", "alpha", "tokens_per_second",
    "baseline_tokens_per_second", "speedup",
)


@dataclass(frozen=True)
class CompareResult:
    """Rows of :func:`compare_studies` and the files written."""

    rows: list[dict[str, Any]]
    csv_path: Path | None
    json_path: Path | None


def compare_studies(
    names: Sequence[str],
    *,
    storage: str | None = None,
    out_prefix: Any = "compare",
    measure: bool = True,
    repeats: int = 1,
    loaded: Mapping[tuple[str, str, str], Any] | None = None,
    log: Callable[[str], None] | None = None,
    split: str | None = "test",
) -> CompareResult:
    """Compare studies' best masks; with ``measure``, time each against plain generate in this run.

    The speculative decoder with each study's best mask and transformers' plain ``generate``
    run on the study's domain prompts of ``split`` (default ``test``: held out from the
    search's ``train`` prompts; samples, prompt seed, max new tokens of its settings),
    side by side in this process through :func:`layersearch.evaluation.measure.compare` (``repeats``
    rounds, interleaved prompt by prompt; the speedup is the median of the per-round ratios).
    M, alpha and tokens/s then come from this measurement; without it, from the best trial's
    attributes. Writes ``<out_prefix>.csv`` and ``.json`` atomically (None: nothing written).
    """
    say = log or (lambda message: None)
    if not names:
        raise LayersearchError("no study names to compare")
    check_int(repeats, "repeats")
    targets = table_targets(out_prefix) if out_prefix is not None else None  # checked before any work
    entries = []
    for name in names:  # every study is checked before anything is measured or written
        study, settings, location, _ = open_study(name, storage, read_only=True)
        best = best_trial(study)
        if best is None:
            raise LayersearchError(f"study {name!r} has no completed trial to compare")
        entries.append((name, study, settings, best))
    rows = [_compare_row(name, study, settings, best) for name, study, settings, best in entries]
    if measure:
        _measure_rows(rows, entries, repeats, dict(loaded or {}), say, split)
    csv_path = json_path = None
    if out_prefix is not None:
        csv_path, json_path = write_table(rows, targets, COMPARE_COLUMNS)
    return CompareResult(rows, csv_path, json_path)


def _compare_row(name: str, study: Any, settings: StudySettings, best: Any) -> dict[str, Any]:
    from optuna.trial import TrialState

    return {
        "study": name,
        "strategy": settings.strategy,
        "objective": settings.objective,
        "domain": settings.domain,
        "model": settings.model,
        "best_value": float(best.value),
        "best_trial": best.number,
        "trials": len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))),
        "search_seconds": round(search_seconds(study.get_trials(deepcopy=False)), 3),
        "skip_ratio": best.user_attrs.get("skip_ratio"),
        "mask": best.user_attrs.get("mask"),
        "M": best.user_attrs.get("M"),
        "alpha": best.user_attrs.get("alpha"),
        "tokens_per_second": best.user_attrs.get("tokens_per_second"),
        "baseline_tokens_per_second": None,
        "speedup": None,
    }


def _measure_rows(
    rows: list[dict[str, Any]], entries: list[Any], repeats: int, models: dict, say: Callable[[str], None], split: str | None
) -> None:
    import torch

    from layersearch.evaluation.measure import PLAIN_NAME, compare, plain_and_masks, warm_up
    from layersearch.objectives import ModelRuntime
    from layersearch.runtime.stats import combine
    from layersearch.study.run import trial_mask

    groups: dict[tuple, list[int]] = {}
    for index, (_, _, settings, _) in enumerate(entries):
        key = (settings.model, settings.device, settings.dtype, settings.domain, settings.samples,
               settings.prompt_seed, settings.max_new_tokens, settings.max_draft, settings.draft_threshold)
        groups.setdefault(key, []).append(index)
    for key, indices in groups.items():
        settings = entries[indices[0]][2]
        model_key = (settings.model, settings.device, settings.dtype)
        if model_key not in models:
            say(f"loading {settings.model} ...")
            models[model_key] = load_study_model(settings)
        loaded = models[model_key]
        runtime = ModelRuntime.from_texts(
            loaded, prompt_texts(settings, split, tokenizer=loaded.tokenizer), max_new_tokens=settings.max_new_tokens,
            max_draft=settings.max_draft, draft_threshold=settings.draft_threshold,
        )
        masks = {}
        for index in indices:
            _, _, study_settings, best = entries[index]
            info = study_settings.info()
            if info.fingerprint != loaded.info.fingerprint:
                raise LayersearchError(f"model {settings.model!r} is not the one study {entries[index][0]!r} was made for")
            masks[index] = trial_mask(best.params, best.user_attrs, info.num_layers).with_model(info)
        say(f"measuring plain generate and {len(indices)} mask(s) on {settings.domain} ({settings.samples} {split or 'any'} prompts) ...")
        configurations = plain_and_masks(loaded.model, {str(index): masks[index] for index in indices},
                                         max_draft=settings.max_draft, draft_threshold=settings.draft_threshold)
        prompts = [torch.tensor([ids]) for ids in runtime.prompts]
        warm_up(configurations, prompts[0])
        measured = compare(configurations, prompts, repeats, new_tokens=settings.max_new_tokens, baseline=PLAIN_NAME,
                           catch=False)
        base_tps = combine(measured[PLAIN_NAME].stats).tokens_per_second
        for index in indices:
            pooled = combine(measured[str(index)].stats)
            rows[index].update(
                M=pooled.mean_accepted_length,
                alpha=pooled.acceptance_rate,
                tokens_per_second=pooled.tokens_per_second,
                baseline_tokens_per_second=base_tps,
                speedup=statistics.median(measured[str(index)].speedups),
            )


def table_paths(out_prefix: Any) -> dict[str, str]:
    """The files an ``out_prefix`` names, unchecked ({what: path}, for the check that no output
    overwrites an input): PREFIX.csv and PREFIX.json; none for no prefix or ``-``."""
    from layersearch.common.outputs import check_file_name

    if not isinstance(out_prefix, str) or out_prefix == "-":
        return {}
    path = Path(check_file_name(out_prefix, "out_prefix", prefix=True))
    path = path.with_suffix("") if path.suffix in (".csv", ".json") else path
    return {"out_prefix's CSV": f"{path}.csv", "out_prefix's JSON": f"{path}.json"}


def table_targets(out_prefix: "str | Path | tuple[Any, Any]") -> tuple[Any, Any]:
    """The checked outputs ``<prefix>.csv`` and ``<prefix>.json`` (a ``.csv``/``.json`` suffix is dropped)."""
    from layersearch.common.outputs import check_output

    if isinstance(out_prefix, tuple):
        return out_prefix
    prefix = str(out_prefix)
    if not prefix.strip() or prefix == "-":
        raise LayersearchError(f"out_prefix must name files (PREFIX.csv and PREFIX.json), got {prefix!r}", fields="out_prefix")
    path = Path(prefix)
    if path.suffix in (".csv", ".json"):
        path = path.with_suffix("")
    return check_output(f"{path}.csv", "out_prefix"), check_output(f"{path}.json", "out_prefix")


def write_table(rows: Sequence[Mapping[str, Any]], out_prefix: Any, columns: Sequence[str]) -> tuple[Path, Path]:
    """Write ``rows`` as ``<prefix>.csv`` and ``<prefix>.json``: both or neither (see :mod:`layersearch.common.outputs`)."""
    from layersearch.common.jsonfile import json_text
    from layersearch.common.outputs import write_outputs

    csv_target, json_target = table_targets(out_prefix)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: "" if row.get(key) is None else row.get(key) for key in columns})
    write_outputs([(csv_target, buffer.getvalue()), (json_target, json_text([dict(row) for row in rows]))], "out_prefix")
    return Path(csv_target.given), Path(json_target.given)
