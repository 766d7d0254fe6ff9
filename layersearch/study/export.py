"""``export``: a study trial's mask written as a mask file with its provenance."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.study.storage import open_study
from layersearch.study.trials import best_trial

if TYPE_CHECKING:
    from layersearch.common.outputs import OutputTarget


def export_mask(name: str, out: "str | Path | OutputTarget", *, storage: str | None = None, trial: str | int = "best") -> tuple[Path, SkipMask]:
    """Write the mask of ``trial`` ("best" or a trial number) as a mask file with provenance."""
    from layersearch.common.outputs import check_output

    out = check_output(out, "out")
    mask = study_mask(name, storage=storage, trial=trial)
    return mask.save(out), mask


def study_mask(name: str, *, storage: str | None = None, trial: str | int = "best") -> SkipMask:
    """The mask of ``trial`` ("best" or a trial number) of a study, bound to its model, with provenance."""
    study, settings, location, _ = open_study(name, storage, read_only=True, tune_ok=True)
    chosen = _pick_trial(study, name, trial)
    if settings is None:  # a tune study: the trial's spec holds its mask
        return _tune_mask(chosen, name, location)
    info = settings.info()
    from layersearch.study.run import trial_mask

    mask = trial_mask(chosen.params, chosen.user_attrs, info.num_layers).with_model(info)
    mask = mask.with_provenance(
        strategy=settings.strategy,
        objective=settings.objective,
        score=float(chosen.value),
        study=name,
        trial=chosen.number,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        domain=settings.domain,
        storage=location.url,
    )
    return mask


def _tune_mask(trial: Any, name: str, location: Any) -> SkipMask:
    """The mask (or plan) a tune trial's decoder spec drafts with, with provenance."""
    from layersearch.decoder.spec import DecoderSpec
    from layersearch.study.settings import TUNE_SPEC_ATTR

    try:
        spec = DecoderSpec.from_dict(trial.user_attrs.get(TUNE_SPEC_ATTR))
    except LayersearchError as exc:
        raise LayersearchError(f"trial {trial.number} of tune study {name!r} holds no readable spec ({exc})") from None
    mask = spec.mask_source.mask
    if mask is None:
        raise LayersearchError(f"trial {trial.number} of tune study {name!r} drafts without a mask "
                               f"(drafter {spec.drafter.name}, mask source {spec.mask_source.kind}): nothing to export")
    return mask.with_provenance(strategy="tune", objective="train speedup", score=float(trial.value), study=name,
                                trial=trial.number, created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                storage=location.url)


def _pick_trial(study: Any, name: str, which: str | int) -> Any:
    from optuna.trial import TrialState

    if which in (None, "best"):
        best = best_trial(study)
        if best is None:
            raise LayersearchError(f"study {name!r} has no completed trial to export")
        return best
    try:
        number = int(which)
    except (TypeError, ValueError):
        raise LayersearchError(f"trial must be 'best' or a trial number, got {which!r}", fields="trial") from None
    for trial in study.get_trials(deepcopy=False):
        if trial.number == number:
            if trial.state != TrialState.COMPLETE:
                raise LayersearchError(f"trial {number} of study {name!r} is {trial.state.name}, not COMPLETE")
            return trial
    raise LayersearchError(f"study {name!r} has no trial {number}")


def mask_from_source(name: str, source: str) -> Any:
    """The mask of ``knn build``'s domain ``NAME=SOURCE``: a mask file, or ``study:STUDY[@STORAGE]``: that study's best trial."""
    from layersearch.masks.mask import SkipMask

    if not source.startswith("study:"):
        return SkipMask.load(source)
    study, _, storage = source[len("study:"):].partition("@")
    if not study:
        raise LayersearchError(f"domain {name}=study: needs a study name, e.g. study:{name}-search@sqlite:///{name}.db", fields="domain")
    return study_mask(study, storage=storage or None).with_provenance(source=source)
