"""The tune study: one Optuna study per ``name``, resumable, in any layersearch storage.

The study records what it was made for (study attribute :data:`IDENTITY_ATTR`: the prompt
file, the model's fingerprint, the draft model, the measurement sizes) and its mask pool
(:data:`POOL_ATTR`), so the same ``name`` continues the same search with the same choices
and a mismatch is one error line. Each trial records its spec (``spec``, the DecoderSpec's
JSON) and measured figures as user attributes; optuna-dashboard shows them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from layersearch.common.errors import LayersearchError
from layersearch.study.settings import TUNE_ATTR, TUNE_SPEC_ATTR
from layersearch.study.storage import StorageLocation, check_name, open_storage, quiet_warnings, storage_location
from layersearch.tune.pool import Candidate
from layersearch.tune.settings import TuneSettings

IDENTITY_ATTR = TUNE_ATTR  # the study commands recognise it (layersearch.study.settings)
POOL_ATTR = "tune_pool"
SPACE_ATTR = "tune_space"  # the drafter and lookahead names the study chooses from (tune.space.space_choices)
SPEC_ATTR = TUNE_SPEC_ATTR


@dataclass(frozen=True)
class TrialRecord:
    """A finished trial as the report shows it."""

    number: int
    kind: str  # the drafter kind
    value: float | None  # train decode-phase speedup (None: failed or pruned)
    elapsed: float  # seconds from the study's first trial start to this trial's end
    spec: Mapping[str, Any] | None


def locate(settings: TuneSettings, identity: Mapping[str, Any]) -> StorageLocation:
    """The study's storage, checked before the model loads: a malformed URL, a file that is no
    Optuna storage, a study of that name made for other prompts or by another tool, or a folder
    that cannot hold a new file is one error line; nothing is created."""
    check_name(settings.name)
    location = storage_location(settings.storage, settings.study_storage_name)
    if location.exists():
        import optuna

        storage = open_storage(location)
        try:
            study = optuna.load_study(study_name=settings.name, storage=storage)
        except KeyError:
            return location
        check_identity(study, identity, location)
        check_restriction(study, settings.for_vllm, location)
    else:
        location.check_creatable()
    return location


def open_study(settings: TuneSettings, location: StorageLocation, identity: Mapping[str, Any], seed: int) -> tuple[Any, bool]:
    """(study, fresh): the study named ``settings.name``, created when absent (``fresh``)."""
    import optuna

    storage = open_storage(location, create=True)
    with quiet_warnings():
        study = optuna.create_study(study_name=settings.name, storage=storage, direction="maximize",
                                    sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=8), load_if_exists=True)
    fresh = IDENTITY_ATTR not in study.user_attrs
    if fresh and study.trials:
        raise LayersearchError(f"study {settings.name!r} in {location.url} was not made by layersearch tune")
    if fresh:
        study.set_user_attr(IDENTITY_ATTR, dict(identity))
    check_identity(study, identity, location)
    return study, fresh


#: How a refused study's error ends by default: what starts a new search.
NEW_SEARCH = "choose another name to start a new search"


def check_identity(study: Any, identity: Mapping[str, Any], location: StorageLocation, hint: str = NEW_SEARCH) -> None:
    """Raise unless ``study`` is a tune study made for ``identity`` (fields absent from either are
    not compared); the error ends with ``hint``, how to start a new search instead."""
    theirs = study.user_attrs.get(IDENTITY_ATTR)
    if not isinstance(theirs, dict):
        raise LayersearchError(f"study {study.study_name!r} in {location.url} was not made by layersearch tune; {hint}",
                               fields="name")
    for key, value in identity.items():
        if key in theirs and theirs[key] != value:
            raise LayersearchError(
                f"study {study.study_name!r} in {location.url} was made with {key} {theirs[key]!r}, not {value!r}; {hint}",
                fields="name"
            )


def check_restriction(study: Any, for_vllm: bool, location: StorageLocation | None = None) -> None:
    """Raise unless ``study`` searches what ``for_vllm`` asks (only what vLLM serves, or every
    configuration), as its recorded choices say: the two spaces' Optuna distributions differ."""
    from layersearch.tune.space import V1_CHOICES, check_choices

    recorded = study.user_attrs.get(SPACE_ATTR)
    made = check_choices(V1_CHOICES if recorded is None else recorded)["vllm"]
    if made != for_vllm:
        what = {True: "only what vLLM serves", False: "every configuration"}
        where = "" if location is None else f" in {location.url}"
        raise LayersearchError(f"study {study.study_name!r}{where} searches {what[made]}, not {what[for_vllm]}; {NEW_SEARCH}",
                               fields="name")


def stored_pool(study: Any) -> tuple[Candidate, ...] | None:
    """The mask pool a study was made with (None before it has one)."""
    data = study.user_attrs.get(POOL_ATTR)
    return None if data is None else tuple(Candidate.from_dict(item) for item in data)


def store_pool(study: Any, pool: tuple[Candidate, ...]) -> None:
    """Record the mask pool on the study (made once, reused when the study resumes)."""
    study.set_user_attr(POOL_ATTR, [c.to_dict() for c in pool])


def study_choices(study: Any, fresh: bool, for_vllm: bool = False) -> dict[str, Any]:
    """The drafter and lookahead names ``study`` searches: recorded when it is made (the
    registries' names then, and ``for_vllm``: only what vLLM serves), version 1's for a study made
    before they were recorded, so a resumed study keeps its Optuna distributions; a name no
    longer registered, or a study searching otherwise than ``for_vllm`` asks, is one error line."""
    from layersearch.tune.space import V1_CHOICES, check_choices, space_choices

    if not fresh:
        check_restriction(study, for_vllm)
    recorded = study.user_attrs.get(SPACE_ATTR)
    if recorded is None:
        recorded = {**space_choices(), "vllm": for_vllm} if fresh else V1_CHOICES
        study.set_user_attr(SPACE_ATTR, {key: list(value) if isinstance(value, tuple) else value
                                         for key, value in recorded.items()})
    return check_choices(recorded)


def trial_records(study: Any) -> list[TrialRecord]:
    """Every finished trial, in order, with its elapsed time since the study's first trial."""
    import optuna

    finished = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished() and t.datetime_complete]
    if not finished:
        return []
    start = min(t.datetime_start for t in finished if t.datetime_start)
    records = []
    for t in sorted(finished, key=lambda t: t.number):
        value = t.value if t.state == optuna.trial.TrialState.COMPLETE else None
        records.append(TrialRecord(t.number, str(t.params.get("drafter", "?")), value,
                                   (t.datetime_complete - start).total_seconds(), t.user_attrs.get(SPEC_ATTR)))
    return records


def run_batch(study: Any, count: int, spec_of: Callable[[Any], Any], measure_all: Callable[[list[Any]], list[Any]],
              score: Callable[[Any, Any], float], on_trial: Callable[[Any, Any], None]) -> int:
    """Measure up to ``count`` of the study's enqueued (waiting) trials together: ask each, take its
    spec (``spec_of(trial)``; raising ``optuna.TrialPruned`` skips it), measure every spec in one
    interleaved run (``measure_all(specs)``, one result each), and tell each trial
    ``score(trial, result)`` (raising ``optuna.TrialPruned``: pruned); ``on_trial(study, trial)``
    after each. A trial left open by a fault is failed; by Ctrl-C failed and enqueued again, so a
    resumed study measures it. Returns how many trials it asked."""
    import optuna

    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    asked: list[Any] = []
    kept: list[tuple[Any, Any]] = []
    told: set[int] = set()

    def tell(trial: Any, **how: Any) -> None:
        study.tell(trial, **how)
        told.add(trial.number)
        on_trial(study, study.get_trials(deepcopy=False)[trial.number])

    interrupted = False
    try:
        for _ in waiting[:count]:
            trial = study.ask()
            asked.append(trial)
            try:
                kept.append((trial, spec_of(trial)))
            except optuna.TrialPruned:
                tell(trial, state=optuna.trial.TrialState.PRUNED)
        results = measure_all([spec for _, spec in kept]) if kept else []
        for (trial, _), result in zip(kept, results):
            try:
                tell(trial, values=score(trial, result))
            except optuna.TrialPruned:
                tell(trial, state=optuna.trial.TrialState.PRUNED)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        for trial in asked:
            if trial.number not in told:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                if interrupted:
                    study.enqueue_trial(dict(trial.params))
    return len(asked)


def run_trials(study: Any, objective: Callable[[Any], float], deadline: float, on_trial: Callable[[Any, Any], None],
               expected: float = 0.0) -> None:
    """Optimize until the ``time.monotonic()`` ``deadline``; ``on_trial(study, trial)`` after each.
    A trial starts only while the time left holds one more trial as long as the longest so far
    (or ``expected`` seconds, before any), so the search ends within its budget rather than one
    trial past it (Optuna's timeout lets the trial running at the deadline finish)."""
    import time

    from layersearch.study.interrupts import no_interrupt_tracebacks

    longest = expected
    if deadline - time.monotonic() < longest:
        return

    def after(study: Any, trial: Any) -> None:
        nonlocal longest
        if trial.datetime_start and trial.datetime_complete:
            longest = max(longest, (trial.datetime_complete - trial.datetime_start).total_seconds())
        on_trial(study, trial)
        if deadline - time.monotonic() < longest:
            study.stop()

    # Ctrl-C: Optuna logs the trial it fails with a KeyboardInterrupt traceback; the CLI says "interrupted" once.
    with quiet_warnings(), no_interrupt_tracebacks():
        study.optimize(objective, timeout=max(deadline - time.monotonic(), 1e-3), callbacks=[after], gc_after_trial=False)
