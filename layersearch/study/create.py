"""``create``: a new study with its settings, model info, latency profile and initial masks.

Bad input is rejected before any storage file is created; creating a study that exists with
the same settings is not an error.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Literal

from layersearch.common.errors import LayersearchError
from layersearch.study.rebuild import check_prompts, initial_masks, load_study_model, prompt_texts, strategy_plan
from layersearch.study.settings import SETTINGS_ATTR, StudySettings
from layersearch.study.storage import StorageLocation, quiet_warnings, check_name, open_storage, storage_location


@dataclass(frozen=True)
class CreateResult:
    """Outcome of :func:`create_study`: ``created`` False when it existed with the same settings."""

    name: str
    url: str
    created: bool
    settings: StudySettings
    enqueued: int = 0


def create_study(
    name: str,
    settings: StudySettings,
    *,
    storage: str | None = None,
    profile_path: str | Path | None = None,
    loaded: Any = None,
    log: Callable[[str], None] | None = None,
) -> CreateResult:
    """Create study ``name`` with ``settings`` (or find it already there with the same settings).

    The model is loaded (or ``loaded`` reused) to record its ModelInfo and to measure a quick
    latency profile unless ``profile_path`` gives one. Bad input is rejected before any storage
    file is created.
    """
    import optuna

    say = log or (lambda message: None)
    check_name(name)
    settings = settings.validated()
    location = storage_location(storage, name)
    profile = None
    if profile_path is not None:
        from layersearch.profiling.profile import LatencyProfile

        profile = LatencyProfile.load(profile_path)
    existing = _existing(name, location, settings)
    if existing is not None:
        if profile is not None and existing.settings.model_info:  # a profile for another architecture is refused here too
            from layersearch.common.modelfile import ModelInfo

            profile.check_model(ModelInfo.from_dict(existing.settings.model_info))
        return existing
    location.check_creatable()
    check_prompts(settings)  # the domain's packages or prompt file, before the model loads
    loaded = loaded if loaded is not None else load_study_model(settings)
    texts = prompt_texts(settings, tokenizer=loaded.tokenizer)
    from layersearch.models.context import check_all_fit

    where = settings.domain.removeprefix("file:")  # a prompt file by its path
    check_all_fit(loaded, ((f"{where}: prompt {i} ({text[:30]!r}...)", len(loaded.tokenizer(text).input_ids))
                           for i, text in enumerate(texts, 1)), settings.max_new_tokens)  # before the profile and the storage
    info = loaded.info
    strategy_plan(settings, info.num_layers, n_finished=0)  # checks the ratio against the real depth
    if profile is not None:
        from layersearch.profiling.profiler import model_architecture

        profile.check_model(info, model_architecture(loaded.model))  # the architecture: the device may be another
    else:
        say(f"measuring a quick latency profile of {info.name} ...")
        profile = _quick_profile(loaded, settings)
    if settings.space == "plans":
        _check_plans(loaded, profile)
        if not profile.has_int4:  # an older profile: the study searches what it can cost
            from layersearch.strategies.space import PLANS_INT8

            say("the latency profile has no int4 timings: the study searches full and int8 plans "
                "(measure the profile again with `layersearch profile` to search int4 too)")
            settings = replace(settings, space=PLANS_INT8)
    initial = initial_masks(settings, loaded, texts, profile)
    settings = replace(settings, model_info=info.to_dict(), profile=profile.to_dict())
    storage_obj = open_storage(location, create=True)
    try:
        with quiet_warnings():
            study = optuna.create_study(study_name=name, storage=storage_obj, direction=_direction(settings.direction))
    except optuna.exceptions.DuplicatedStudyError:  # another process created it meanwhile
        existing = _existing(name, location, settings)
        if existing is not None:
            return existing
        raise LayersearchError(f"study {name!r} was created concurrently in {location.url}; retry") from None
    study.set_user_attr(SETTINGS_ATTR, settings.to_dict())
    from layersearch.strategies import params_from_mask

    for mask in initial:
        study.enqueue_trial(params_from_mask(mask, settings.space))
    return CreateResult(name, location.url, True, settings, len(initial))


def _direction(direction: str) -> Literal["minimize", "maximize"]:
    """An objective's direction as Optuna takes it."""
    if direction == "minimize":
        return "minimize"
    if direction == "maximize":
        return "maximize"
    raise LayersearchError(f"an objective's direction is minimize or maximize, not {direction!r}")


def _existing(name: str, location: StorageLocation, settings: StudySettings) -> CreateResult | None:
    """The result for a study that already exists (same settings), None if absent; raises if different."""
    import optuna

    if not location.exists():
        return None
    storage = open_storage(location)
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None
    data = study.user_attrs.get(SETTINGS_ATTR)
    if data is None:
        # Never deleted, even with no trials: it may be another tool's study (an interrupted
        # create of ours cannot be told apart from one), and it is not ours to remove.
        raise LayersearchError(
            f"study {name!r} already exists in {location.url} without layersearch settings (another tool's study, "
            f"or a create interrupted in its first moments); layersearch leaves it as it is: choose another name, "
            f"or remove it yourself (optuna.delete_study(study_name={name!r}, storage={location.url!r}))"
        )
    try:
        found = StudySettings.from_dict(data)
    except LayersearchError as exc:
        raise LayersearchError(f"study {name!r} already exists in {location.url} and its settings are not layersearch's ({exc})") from None
    if found.space == "plans-int8" and settings.space == "plans":  # the plans space its profile could cost
        found = replace(found, space="plans")
    diff = found.differences(settings)
    if diff:
        raise LayersearchError(
            f"study {name!r} already exists in {location.url} with different settings ({'; '.join(diff)})"
        )
    return CreateResult(name, location.url, False, found)


def _check_plans(loaded: Any, profile: Any) -> None:
    """One error line, before the study exists, where plans cannot run or be costed."""
    from layersearch.models.int4 import check_int4_device
    from layersearch.models.precision import check_int8_device

    check_int8_device(loaded.model)
    check_int4_device(loaded.model)
    if not profile.has_int8:
        raise LayersearchError("a study of plans (space 'plans') needs a latency profile with int8 timings; this one has "
                               "none (measured before plans): measure it again with `layersearch profile`, or leave "
                               "profile out", fields=("space", "profile"))


def _quick_profile(loaded: Any, settings: StudySettings) -> Any:
    from layersearch.profiling.profiler import quick_profile

    # Verification of up to max_draft drafted tokens plus the bonus token.
    return quick_profile(loaded.model, loaded.info, max_verify=settings.max_draft + 2)
