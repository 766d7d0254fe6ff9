"""``list`` and ``show``: what studies a storage holds and how far each search got."""

from __future__ import annotations

from typing import Any, Sequence

from layersearch.common.errors import LayersearchError
from layersearch.study.settings import SETTINGS_ATTR, tune_settings
from layersearch.study.storage import STUDIES_DIR, StorageLocation, open_study, one_line, open_storage, storage_location
from layersearch.study.trials import best_trial


def list_studies(storage: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows describing each study (of ``storage``, or of every ``studies/*.db``) and problems met."""
    import optuna

    if storage is not None:
        locations = [storage_location(storage)]
    else:
        locations = [storage_location(f"sqlite:///{path}") for path in sorted(STUDIES_DIR.glob("*.db"))]
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for location in locations:
        try:
            if location.kind == "rdb" and not location.exists():  # no Optuna tables: none created
                continue
            storage_obj = open_storage(location, read_only=True)
            names = optuna.get_all_study_names(storage_obj)
        except LayersearchError as exc:
            if storage is not None:
                raise
            problems.append(str(exc))
            continue
        except Exception as exc:
            if storage is not None:
                raise LayersearchError(f"cannot read storage {location.url}: {one_line(exc)}") from None
            problems.append(f"cannot read storage {location.url}: {one_line(exc)}")
            continue
        for study_name in names:
            study = optuna.load_study(study_name=study_name, storage=storage_obj)
            rows.append(_list_row(study, location))
    return rows, problems


def _list_row(study: Any, location: StorageLocation) -> dict[str, Any]:
    from optuna.trial import TrialState

    data = study.user_attrs.get(SETTINGS_ATTR)
    if not isinstance(data, dict):  # a tune study, or another tool's study in the same storage: listed, not read
        data = tune_settings(study) or {"strategy": "(not layersearch)"}
    best = best_trial(study)
    return {
        "name": study.study_name,
        "strategy": data.get("strategy"),
        "objective": data.get("objective"),
        "domain": data.get("domain"),
        "model": data.get("model"),
        "complete": len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))),
        "trials": len(study.get_trials(deepcopy=False)),
        "best_value": None if best is None or not isinstance(best.value, (int, float)) else best.value,
        "storage": location.url,
    }


def show_study(name: str, *, storage: str | None = None) -> dict[str, Any]:
    """Settings, trial counts, search time and the best trial (mask, value, M, alpha) of a study."""
    study, settings, location, _ = open_study(name, storage, read_only=True, tune_ok=True)
    trials = study.get_trials(deepcopy=False)
    states: dict[str, int] = {}
    for trial in trials:
        states[trial.state.name] = states.get(trial.state.name, 0) + 1
    best = best_trial(study)
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    result: dict[str, Any] = {
        "name": name,
        "storage": location.url,
        "settings": settings.identity() if settings is not None else tune_settings(study),
        "model_info": settings.model_info if settings is not None else None,
        "has_profile": settings.profile is not None if settings is not None else False,
        "profile_device": (settings.profile or {}).get("device") if settings is not None else None,
        "direction": settings.direction if settings is not None else study.direction.name.lower(),
        "trials": len(trials),
        "states": states,
        "search_seconds": search_seconds(trials),
        "span_seconds": (max(ends) - min(starts)).total_seconds() if starts and ends else 0.0,
        "best": None,
    }
    if best is not None:
        result["best"] = {
            "trial": best.number,
            "value": best.value,
            **{key: best.user_attrs.get(key) for key in ("mask", "M", "alpha", "skip_ratio", "tokens_per_second")},
            **{k: v for k, v in best.user_attrs.items() if k not in ("mask", "M", "alpha", "skip_ratio", "tokens_per_second")},
        }
    return result


def search_seconds(trials: Sequence[Any]) -> float:
    """Sum of the wall-clock durations of finished trials (the search's compute time)."""
    total = 0.0
    for trial in trials:
        if trial.datetime_start and trial.datetime_complete:
            total += (trial.datetime_complete - trial.datetime_start).total_seconds()
    return total


def best_curve(study: Any) -> list[tuple[float, float]]:
    """``(seconds since the first trial started, best objective so far)`` at each completed
    trial, in completion order: how soon a search got where it got."""
    from optuna.trial import TrialState

    from layersearch.evaluation.plots import best_so_far

    trials = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.datetime_complete]
    starts = [t.datetime_start for t in study.get_trials(deepcopy=False) if t.datetime_start is not None]
    if not trials or not starts:
        return []
    origin = min(starts)
    trials.sort(key=lambda t: (t.datetime_complete, t.number))
    bests = best_so_far([float(t.value) for t in trials], study.direction)
    return [((t.datetime_complete - origin).total_seconds(), best) for t, best in zip(trials, bests)]


def time_to_fraction(curve: Sequence[tuple[float, float]], maximize: bool, fraction: float = 0.95) -> float | None:
    """Seconds until the best-so-far first came within ``fraction`` of its final value (95%:
    at least 0.95 x final when maximizing, at most final / 0.95 when minimizing)."""
    if not curve:
        return None
    final = curve[-1][1]
    for seconds, best in curve:
        if (best >= fraction * final) if maximize else (best <= final / fraction):
            return seconds
    return curve[-1][0]
