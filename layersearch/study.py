"""Mask searches as Optuna studies: create, run (resumable), list, show, export, compare.

Every search is an ordinary Optuna study, so it can be resumed, run by several worker
processes at once and inspected in optuna-dashboard. What layersearch adds:

* **Settings** (:class:`StudySettings`): model, domain, strategy, objective, skip ratio,
  samples, seed, decoding options, the model's :class:`~layersearch.mask.ModelInfo` and the
  latency profile, stored with the study as the user attribute ``"settings"``. Every run
  rebuilds the model runtime, the objective and the strategy's sampler from them.
* **Trials** record the user attributes of :mod:`layersearch.objectives` (``mask``, ``M``,
  ``alpha``, ``skip_ratio``, ``tokens_per_second``...) and the worker that ran them (system
  attribute :data:`WORKER_ATTR`: host, pid, process start).
* **Storage** (:func:`storage_location`): default ``sqlite:///studies/<name>.db``; any
  SQLAlchemy URL Optuna accepts (PostgreSQL, MySQL...); a journal file as
  ``journal:///relative/path.log``, ``journal:////absolute/path.log`` (the sqlite URL
  convention) or a plain path ending in ``.log``; a plain path ending in ``.db`` is sqlite.
  Reading commands never create a storage file.
* **Crash safety**: a run loses at most the trial it was running. RDB storages get Optuna's
  heartbeat (a dead worker's trial turns FAIL after the grace period, checked before every
  trial); in addition, on start a run fails every RUNNING trial whose worker process on this
  host is gone (this covers journal files, which have no heartbeat, and a restart right after
  ``kill -9``); SIGTERM and Ctrl-C fail the current trial before the process exits.
* **Reproducible resumption**: the mask samplers draw from ``(seed, trial number)``, so a
  rebuilt sampler proposes what the original would have; ``tpe`` (a stream RNG) is seeded
  with ``seed + finished trials``.

Strategies come from :mod:`layersearch.strategies`: their sampler, the masks to enqueue at
creation (:func:`~layersearch.strategies.initial_masks`) and their stop rule, checked after
every trial. Strategies from elsewhere (KnapSpec's ``knapsack`` candidates) plug in through
:func:`_extra_strategies`, which enqueues their masks at creation.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
import re
import signal
import socket
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from layersearch.errors import LayersearchError
from layersearch.mask import ModelInfo, SkipMask, write_json_atomic
from layersearch.objectives import (
    DEFAULT_GAMMA,
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_SAMPLES,
    check_objective,
    make_objective,
    objective_direction,
)

if TYPE_CHECKING:
    import optuna  # noqa: F811

STUDIES_DIR = Path("studies")
SETTINGS_ATTR = "settings"
WORKER_ATTR = "layersearch:worker"
SETTINGS_VERSION = 1

#: Heartbeat of RDB storages during ``run``: seconds between beats; a trial whose worker has
#: not beaten for ``grace = 3 x interval`` seconds is failed by the next worker that starts one.
DEFAULT_HEARTBEAT = 10
HEARTBEAT_GRACE_FACTOR = 3

#: Quick latency-profile settings used at create time (a few seconds on the embedded model).
QUICK_PROFILE = dict(contexts=(64, 256, 512), max_verify=10, repeats=2)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")

# ----- strategies -------------------------------------------------------------------------------
@dataclass(frozen=True)
class _StrategyPlan:
    """What a run needs from a strategy: its sampler and its stop rule (checked after each trial)."""

    sampler: Any
    stop_reason: Callable[[Any], str | None]


@dataclass(frozen=True)
class _ExtraStrategy:
    """A strategy from outside :mod:`layersearch.strategies`.

    ``plan(settings, num_layers, n_finished)`` gives the run's sampler and stop rule;
    ``initial(settings, loaded, texts, profile)`` the masks enqueued at creation.
    """

    plan: Callable[[Any, int, int], _StrategyPlan]
    initial: Callable[[Any, Any, Sequence[str], Any], tuple[SkipMask, ...]]
    help: str


def _extra_strategies() -> dict[str, _ExtraStrategy]:
    """Strategies plugged in from other packages, listed only when their code is importable.

    ``knapsack``: KnapSpec's knapsack DP (:func:`layersearch.knapspec.knapsack_masks`) proposes
    its best candidate masks (by predicted TPT on the study's prompts and profile); the study
    enqueues them at creation, measures each with the study's objective and stops when the
    queue is empty. A new mask generator plugs in the same way: a function returning masks
    for the model, prompts and profile, wrapped with :func:`_queue_plan`.
    """
    extras: dict[str, _ExtraStrategy] = {}
    try:
        from layersearch.knapspec import knapsack_masks  # noqa: F401
    except Exception:  # not installed / not finished: the strategy is simply not offered
        pass
    else:
        extras["knapsack"] = _ExtraStrategy(_queue_plan, _knapsack_initial, "KnapSpec knapsack candidates")
    return extras


def _queue_plan(settings: Any, num_layers: int, n_finished: int) -> _StrategyPlan:
    """Measure the enqueued masks, then stop (the random sampler only fills unexpected gaps)."""
    import optuna
    from optuna.trial import TrialState

    def stop_reason(study: Any) -> str | None:
        if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return None
        if study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)):
            return "every enqueued candidate mask was measured"
        return "the strategy proposed no candidate mask"

    return _StrategyPlan(optuna.samplers.RandomSampler(seed=settings.seed), stop_reason)


def _knapsack_initial(settings: Any, loaded: Any, texts: Sequence[str], profile: Any) -> tuple[SkipMask, ...]:
    from layersearch.knapspec import knapsack_masks

    ids = [loaded.tokenizer(text, return_tensors="pt").input_ids[0] for text in texts]
    context = int(sum(len(i) for i in ids) / len(ids) + settings.max_new_tokens / 2)
    return tuple(row[0] for row in knapsack_masks(loaded.model, profile, ids, context=context))


def available_strategies() -> tuple[str, ...]:
    """Strategy names a study accepts."""
    from layersearch.strategies import STRATEGIES

    return tuple(STRATEGIES) + tuple(_extra_strategies())


def check_strategy(name: str) -> str:
    """``name`` if known, else a LayersearchError listing the known strategies."""
    from layersearch.strategies import STRATEGIES

    if name in STRATEGIES:
        return name
    known = available_strategies()
    if name not in known:
        raise LayersearchError(f"unknown strategy {name!r}; known strategies: {', '.join(known)}")
    return name


# ----- settings ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class StudySettings:
    """Everything a run needs to rebuild a search; stored as the study's ``settings`` user attr."""

    model: str
    domain: str
    strategy: str
    objective: str
    skip_ratio: float | None = None
    samples: int = DEFAULT_SAMPLES
    seed: int = 0
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    gamma: int = DEFAULT_GAMMA
    max_draft: int = 8
    draft_threshold: float = 0.8
    decode_stats: bool = False
    device: str = "cpu"
    dtype: str = "float32"
    model_info: dict[str, Any] | None = field(default=None, compare=False)
    profile: dict[str, Any] | None = field(default=None, compare=False)

    #: Fields that describe the measured model, not the user's choice: not compared on re-create.
    DERIVED = ("model_info", "profile")

    def validated(self) -> "StudySettings":
        """Checked copy with the strategy's default skip ratio filled in; raises LayersearchError."""
        from layersearch.data import DOMAINS

        check_strategy(self.strategy)
        check_objective(self.objective)
        if self.domain not in DOMAINS:
            raise LayersearchError(f"unknown domain {self.domain!r}; known domains: {', '.join(DOMAINS)}")
        for name, minimum in (("samples", 1), ("max_new_tokens", 1), ("gamma", 1), ("max_draft", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise LayersearchError(f"{name.replace('_', '-')} must be an integer >= {minimum}, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise LayersearchError(f"seed must be an integer >= 0, got {self.seed!r}")
        if not 0.0 <= float(self.draft_threshold) <= 1.0:
            raise LayersearchError(f"draft threshold must be in [0, 1], got {self.draft_threshold!r}")
        ratio = self.skip_ratio
        from layersearch.strategies import STRATEGIES, default_skip_ratio, make_sampler

        if self.strategy in STRATEGIES:
            if ratio is None:
                ratio = default_skip_ratio(self.strategy)
            make_sampler(self.strategy, num_layers=4, skip_ratio=ratio, seed=0)  # rejects a ratio it cannot use
        elif ratio is not None:
            raise LayersearchError(f"strategy {self.strategy!r} chooses its own skip counts and takes no skip ratio")
        return replace(self, skip_ratio=None if ratio is None else float(ratio))

    @property
    def direction(self) -> str:
        """The objective's direction ("minimize" or "maximize")."""
        return objective_direction(self.objective)

    def identity(self) -> dict[str, Any]:
        """The user's choices (derived fields left out): equal identities mean the same study."""
        data = self.to_dict()
        for key in self.DERIVED:
            data.pop(key, None)
        data.pop("version", None)
        return data

    def differences(self, other: "StudySettings") -> list[str]:
        """``key: ours -> theirs`` for every choice that differs."""
        mine, theirs = self.identity(), other.identity()
        return [f"{key} {mine.get(key)!r} -> {theirs.get(key)!r}" for key in mine if mine.get(key) != theirs.get(key)]

    def info(self) -> ModelInfo:
        """The ModelInfo recorded at creation."""
        if self.model_info is None:
            raise LayersearchError("the study settings lack the model info (not created by layersearch study create?)")
        return ModelInfo.from_dict(self.model_info, "settings.model_info")

    def latency_profile(self) -> Any:
        """The stored LatencyProfile, or None."""
        if self.profile is None:
            return None
        from layersearch.profile import LatencyProfile

        return LatencyProfile.from_dict(self.profile)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (what is stored in the study)."""
        return {"version": SETTINGS_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, data: Any) -> "StudySettings":
        """Parse the stored settings; unknown keys are ignored, missing optional ones defaulted."""
        if not isinstance(data, dict):
            raise LayersearchError("study settings must be an object")
        known = {f.name for f in fields(cls)}
        missing = [key for key in ("model", "domain", "strategy", "objective") if key not in data]
        if missing:
            raise LayersearchError(f"study settings lack {', '.join(missing)}")
        return cls(**{key: value for key, value in data.items() if key in known})


# ----- storage ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class StorageLocation:
    """Where a study lives: ``kind`` is "sqlite", "journal" or "rdb"; ``path`` for file kinds."""

    url: str
    kind: str
    path: Path | None = None
    default: bool = False

    def exists(self) -> bool:
        """False only when the storage surely holds nothing (its file is absent)."""
        return self.path is None or self.path.exists()

    def check_creatable(self, *, make_dirs: bool = False) -> None:
        """Raise unless the storage file can be created.

        The default folder ``studies/`` may be missing: ``make_dirs`` creates it (done only
        when the storage is really opened, so rejected input leaves no folder behind).
        """
        if self.path is None or self.path.exists():
            if self.path is not None and not os.access(self.path, os.R_OK | os.W_OK):
                raise LayersearchError(f"cannot open storage {self.url}: {self.path} is not writable")
            return
        parent = self.path.parent
        if self.default and not parent.exists():
            if not make_dirs:
                return
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise LayersearchError(f"cannot create {parent}: {exc.strerror}") from None
        if not parent.exists():
            raise LayersearchError(f"cannot open storage {self.url}: directory {parent} does not exist")
        if not parent.is_dir():
            raise LayersearchError(f"cannot open storage {self.url}: {parent} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise LayersearchError(f"cannot open storage {self.url}: directory {parent} is not writable")


def default_storage_url(name: str) -> str:
    """``sqlite:///studies/<name>.db``."""
    return f"sqlite:///{STUDIES_DIR / (check_name(name) + '.db')}"


def check_name(name: str) -> str:
    """A study name: letters, digits and ``._+-``, starting with a letter or digit."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise LayersearchError(
            f"invalid study name {name!r}: use letters, digits and ._+- (starting with a letter or digit)"
        )
    return name


def storage_location(url: str | None, name: str | None = None) -> StorageLocation:
    """Parse ``--storage`` (None: the default sqlite file of study ``name``)."""
    if url is None:
        if name is None:
            raise LayersearchError("no storage given and no study name to derive the default from")
        return StorageLocation(default_storage_url(name), "sqlite", STUDIES_DIR / f"{name}.db", default=True)
    url = url.strip()
    if not url:
        raise LayersearchError("empty --storage")
    if url.startswith("journal:"):
        rest = url[len("journal:") :]
        if not rest.startswith("///") or len(rest) == 3:
            raise LayersearchError(f"journal storage must look like journal:///path.log, got {url!r}")
        return StorageLocation(url, "journal", Path(rest[3:]))
    if url.startswith("sqlite:"):
        rest = url[len("sqlite:") :]
        if not rest.startswith("///") or len(rest) == 3 or rest == "///:memory:":
            raise LayersearchError(f"sqlite storage must name a file, like sqlite:///studies/x.db, got {url!r}")
        return StorageLocation(url, "sqlite", Path(rest[3:]))
    if "://" in url:
        return StorageLocation(url, "rdb")
    if url.endswith(".log"):
        return StorageLocation(url, "journal", Path(url))
    if url.endswith((".db", ".sqlite", ".sqlite3")):
        return StorageLocation(f"sqlite:///{url}", "sqlite", Path(url))
    raise LayersearchError(
        f"unsupported storage {url!r}: give an Optuna storage URL (sqlite:///x.db, postgresql://...), "
        "journal:///x.log or a path ending in .db or .log"
    )


def open_storage(location: StorageLocation, *, create: bool = False, heartbeat: int | None = None) -> Any:
    """An Optuna storage for ``location``; with ``create=False`` a missing file is an error.

    ``heartbeat`` (seconds) turns on Optuna's heartbeat for RDB storages.
    """
    import optuna

    if create:
        location.check_creatable(make_dirs=True)
    elif not location.exists():
        raise LayersearchError(f"storage {location.url} does not exist (no file {location.path})")
    try:
        with _quiet_warnings():
            if location.kind == "journal":
                from optuna.storages.journal import JournalFileBackend, JournalStorage

                return JournalStorage(JournalFileBackend(str(location.path)))
            kwargs: dict[str, Any] = {}
            if heartbeat is not None:
                kwargs = dict(heartbeat_interval=int(heartbeat), grace_period=int(heartbeat) * HEARTBEAT_GRACE_FACTOR)
            return optuna.storages.RDBStorage(location.url, **kwargs)
    except LayersearchError:
        raise
    except Exception as exc:  # a driver missing, a server unreachable, a file that is no database...
        raise LayersearchError(f"cannot open storage {location.url}: {_one_line(exc)}") from None


def _load(name: str, storage_url: str | None, *, heartbeat: int | None = None, sampler: Any = None):
    """(study, settings, location, storage) of an existing layersearch study; clear errors otherwise."""
    import optuna

    check_name(name)
    location = storage_location(storage_url, name)
    if not location.exists():
        raise LayersearchError(f"no study named {name!r}: {location.path} does not exist")
    storage = open_storage(location, heartbeat=heartbeat)
    try:
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    except KeyError:
        raise LayersearchError(f"no study named {name!r} in {location.url}") from None
    settings = _settings_of(study, location)
    return study, settings, location, storage


def _settings_of(study: Any, location: StorageLocation) -> StudySettings:
    data = study.user_attrs.get(SETTINGS_ATTR)
    if data is None:
        raise LayersearchError(f"study {study.study_name!r} in {location.url} has no layersearch settings")
    return StudySettings.from_dict(data)


# ----- create -----------------------------------------------------------------------------------
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
        from layersearch.profile import LatencyProfile

        profile = LatencyProfile.load(profile_path)
    existing = _existing(name, location, settings)
    if existing is not None:
        return existing
    location.check_creatable()
    texts = _prompt_texts(settings)  # checks the domain's packages before the model loads
    loaded = loaded if loaded is not None else _load_model(settings)
    info = loaded.info
    _strategy_plan(settings, info.num_layers, n_finished=0)  # checks the ratio against the real depth
    if profile is not None:
        profile.check_model(info)
    else:
        say(f"measuring a quick latency profile of {info.name} ...")
        profile = _quick_profile(loaded)
    initial = _initial_masks(settings, loaded, texts, profile)
    settings = replace(settings, model_info=info.to_dict(), profile=profile.to_dict())
    storage_obj = open_storage(location, create=True)
    try:
        with _quiet_warnings():
            study = optuna.create_study(study_name=name, storage=storage_obj, direction=settings.direction)
    except optuna.exceptions.DuplicatedStudyError:  # another process created it meanwhile
        existing = _existing(name, location, settings)
        if existing is not None:
            return existing
        raise LayersearchError(f"study {name!r} was created concurrently in {location.url}; retry") from None
    study.set_user_attr(SETTINGS_ATTR, settings.to_dict())
    from layersearch.strategies import params_from_mask

    for mask in initial:
        study.enqueue_trial(params_from_mask(mask))
    return CreateResult(name, location.url, True, settings, len(initial))


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
        if not study.get_trials(deepcopy=False):
            # A creation interrupted before its settings were written: start it over.
            optuna.delete_study(study_name=name, storage=storage)
            return None
        raise LayersearchError(f"study {name!r} already exists in {location.url} and was not made by layersearch")
    found = StudySettings.from_dict(data)
    diff = found.differences(settings)
    if diff:
        raise LayersearchError(
            f"study {name!r} already exists in {location.url} with different settings ({'; '.join(diff)})"
        )
    return CreateResult(name, location.url, False, found)


def _quick_profile(loaded: Any) -> Any:
    from layersearch.runtime.profiler import measure_profile

    limit = getattr(loaded.model.config, "max_position_embeddings", None) or 10**9
    verify = QUICK_PROFILE["max_verify"]
    contexts = [n for n in QUICK_PROFILE["contexts"] if n + verify <= limit] or [max(1, limit - verify)]
    return measure_profile(loaded.model, loaded.info, contexts=contexts, max_verify=verify, repeats=QUICK_PROFILE["repeats"])


# ----- run --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunSummary:
    """What one ``run`` did."""

    name: str
    url: str
    ran: int  # trials this run finished (any state)
    completed: int  # COMPLETE trials in the study now
    total: int  # trials in the study now
    stale_failed: int  # RUNNING trials of dead workers failed on start
    best_value: float | None
    best_trial: int | None
    best_mask: str | None
    stop_reason: str | None
    seconds: float
    direction: str


class Terminated(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM so the running trial fails cleanly."""


def run_study(
    name: str,
    *,
    storage: str | None = None,
    trials: int | None = None,
    timeout: float | None = None,
    quiet: bool = False,
    heartbeat: int | None = DEFAULT_HEARTBEAT,
    loaded: Any = None,
    stream: Any = None,
) -> RunSummary:
    """Run up to ``trials`` more trials (and/or for ``timeout`` seconds) of study ``name``.

    With neither given, 50 trials. Resumable: a stale trial of a dead worker is failed first,
    and the sampler is rebuilt from the stored settings. Stops early when the strategy's stop
    rule says so.
    """
    import optuna
    from optuna.trial import TrialState

    from layersearch.progress import TrialProgress

    if trials is not None and (isinstance(trials, bool) or trials < 1):
        raise LayersearchError(f"--trials must be >= 1, got {trials}")
    if timeout is not None and not timeout > 0:
        raise LayersearchError(f"--timeout must be > 0 seconds, got {timeout}")
    if trials is None and timeout is None:
        trials = 50
    started = time.perf_counter()
    study, settings, location, storage_obj = _load(name, storage, heartbeat=heartbeat)
    stale = fail_stale_trials(study)
    info = settings.info()
    finished = _finished(study)
    plan = _strategy_plan(settings, info.num_layers, n_finished=len(finished))
    study = optuna.load_study(study_name=name, storage=storage_obj, sampler=plan.sampler)
    reason = plan.stop_reason(study)
    ran = 0
    if reason is None:
        texts = _prompt_texts(settings)
        loaded = loaded if loaded is not None else _load_model(settings)
        if loaded.info.fingerprint != info.fingerprint:
            raise LayersearchError(
                f"model {settings.model!r} is not the one the study was created with "
                f"(fingerprint {loaded.info.fingerprint}, expected {info.fingerprint})"
            )
        from layersearch.objectives import ModelRuntime

        runtime = ModelRuntime.from_texts(
            loaded, texts, max_new_tokens=settings.max_new_tokens,
            max_draft=settings.max_draft, draft_threshold=settings.draft_threshold,
        )
        objective = make_objective(
            settings.objective, profile=settings.latency_profile(), gamma=settings.gamma,
            decode_stats=settings.decode_stats,
        )
        from layersearch.strategies import suggest_mask

        current: dict[str, Any] = {}
        worker = _worker_record()

        interrupts = _Interrupts(study)

        def evaluate(trial: "optuna.Trial") -> float:
            current["trial_id"] = trial._trial_id
            storage_obj.set_trial_system_attr(trial._trial_id, WORKER_ATTR, worker)
            mask = suggest_mask(trial, info.num_layers).with_model(info)
            with interrupts.raising():  # only here may Ctrl-C / SIGTERM raise: no storage write runs
                score = objective.evaluate(runtime, mask)
            for key, value in score.attrs.items():
                trial.set_user_attr(key, _json_value(value))
            return float(score.value)

        stop: dict[str, str | None] = {"reason": None}
        done = {"trials": 0}

        with TrialProgress(total=trials, quiet=quiet, stream=stream) as progress:

            def after_trial(study_now: Any, trial: Any) -> None:
                current.pop("trial_id", None)
                done["trials"] += 1
                progress.update(best=_best_value(study_now), last=trial.value, state=trial.state.name)
                why = plan.stop_reason(study_now)
                if why is not None:
                    stop["reason"] = why
                    study_now.stop()

            try:
                with interrupts.installed(), _quiet_warnings(), _no_interrupt_tracebacks():
                    study.optimize(evaluate, n_trials=trials, timeout=timeout, callbacks=[after_trial], catch=())
                    interrupts.raise_pending()  # one that arrived outside a trial's computation
            except KeyboardInterrupt:
                progress.close()
                trial_id = current.get("trial_id")
                _fail_if_running(storage_obj, trial_id)
                if trial_id is not None and storage_obj.get_trial(trial_id).state == TrialState.FAIL:
                    number = storage_obj.get_trial(trial_id).number
                    print(f"layersearch: trial {number} of {name} marked FAIL", file=sys.stderr)
                raise
        ran = done["trials"]
        reason = stop["reason"]
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    best = _best_trial(study)
    return RunSummary(
        name=name,
        url=location.url,
        ran=ran,
        completed=len(complete),
        total=len(study.get_trials(deepcopy=False)),
        stale_failed=stale,
        best_value=None if best is None else float(best.value),
        best_trial=None if best is None else best.number,
        best_mask=None if best is None else best.user_attrs.get("mask"),
        stop_reason=reason,
        seconds=time.perf_counter() - started,
        direction=settings.direction,
    )


def fail_stale_trials(study: Any) -> int:
    """Fail RUNNING trials whose worker is dead; returns how many this call failed.

    Uses Optuna's heartbeat check (RDB storages opened with a heartbeat), then fails RUNNING
    trials whose recorded worker process on this host no longer exists.
    """
    import optuna
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    def running() -> list[Any]:
        return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))

    before = {t._trial_id for t in running()}
    with _quiet_warnings():
        optuna.storages.fail_stale_trials(study)
    failed = len(before - {t._trial_id for t in running()})
    for trial in running():
        worker = trial.system_attrs.get(WORKER_ATTR)
        if isinstance(worker, dict) and _worker_dead(worker):
            try:
                if study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL):
                    failed += 1
            except UpdateFinishedTrialError:
                pass  # another process finished or failed it first
    return failed


def _fail_if_running(storage: Any, trial_id: int | None) -> None:
    """Fail this process's trial if an interrupt left it RUNNING (e.g. outside the objective)."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    if trial_id is None:
        return
    try:
        if storage.get_trial(trial_id).state == TrialState.RUNNING:
            storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
    except (UpdateFinishedTrialError, KeyError):
        pass


class _InterruptFilter(logging.Filter):
    """Drops Optuna's warning (and traceback) about a trial failed by Ctrl-C or SIGTERM."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[0] and issubclass(record.exc_info[0], KeyboardInterrupt):
            self.seen = True
            return False
        if self.seen and "failed with value None" in record.getMessage():
            return False
        return True


@contextmanager
def _no_interrupt_tracebacks() -> Iterator[None]:
    logger = logging.getLogger("optuna.study._optimize")
    interrupt_filter = _InterruptFilter()
    logger.addFilter(interrupt_filter)
    try:
        yield
    finally:
        logger.removeFilter(interrupt_filter)


class _Interrupts:
    """Ctrl-C and SIGTERM during a run, raised only where raising is safe.

    While the objective computes (:meth:`raising`), a signal raises at once
    (:class:`KeyboardInterrupt` or :class:`Terminated`): Optuna marks the trial FAIL and
    re-raises. Anywhere else (Optuna writing to the storage, callbacks) an exception could
    interrupt a database commit, so the signal is only noted and the study stopped; it is
    raised when the next objective starts or when ``optimize`` returns.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, study: Any) -> None:
        self.study = study
        self.armed = False
        self.pending: KeyboardInterrupt | None = None

    def handler(self, signum: int, frame: Any) -> None:
        exc = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        if self.armed:
            self.armed = False
            raise exc
        self.pending = self.pending or exc
        try:
            self.study.stop()
        except RuntimeError:  # not inside the optimize loop (yet or any more)
            pass

    def raise_pending(self) -> None:
        if self.pending is not None:
            exc, self.pending = self.pending, None
            raise exc

    @contextmanager
    def raising(self) -> Iterator[None]:
        self.raise_pending()
        self.armed = True
        try:
            yield
        finally:
            self.armed = False

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Install the handler for the block (main thread only; elsewhere signals are left alone)."""
        previous = {}
        try:
            for signum in self.SIGNALS:
                previous[signum] = signal.signal(signum, self.handler)
        except ValueError:  # not the main thread
            pass
        try:
            yield
        finally:
            for signum, old in previous.items():
                signal.signal(signum, old)


def _worker_record() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": _process_start(os.getpid())}


def _worker_dead(worker: Mapping[str, Any]) -> bool:
    """True when ``worker`` ran on this host and its process is gone (or is another process now)."""
    if worker.get("host") != socket.gethostname():
        return False  # another machine: only the heartbeat can tell
    pid = worker.get("pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # exists, owned by someone else
    start = _process_start(pid)
    if start is None:
        return False
    if start == "zombie":
        return True
    recorded = worker.get("start")
    return recorded is not None and recorded != start  # the pid was reused


def _process_start(pid: int) -> Any:
    """The process start time in clock ticks from /proc (None where /proc is absent; "zombie")."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    parts = text[text.rfind(")") + 2 :].split()
    if parts and parts[0] in ("Z", "X"):
        return "zombie"
    return int(parts[19]) if len(parts) > 19 else None


# ----- list / show ------------------------------------------------------------------------------
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
            storage_obj = open_storage(location)
            names = optuna.get_all_study_names(storage_obj)
        except LayersearchError as exc:
            if storage is not None:
                raise
            problems.append(str(exc))
            continue
        except Exception as exc:
            if storage is not None:
                raise LayersearchError(f"cannot read storage {location.url}: {_one_line(exc)}") from None
            problems.append(f"cannot read storage {location.url}: {_one_line(exc)}")
            continue
        for study_name in names:
            study = optuna.load_study(study_name=study_name, storage=storage_obj)
            rows.append(_list_row(study, location))
    return rows, problems


def _list_row(study: Any, location: StorageLocation) -> dict[str, Any]:
    from optuna.trial import TrialState

    data = study.user_attrs.get(SETTINGS_ATTR) or {}
    best = _best_trial(study)
    return {
        "name": study.study_name,
        "strategy": data.get("strategy"),
        "objective": data.get("objective"),
        "domain": data.get("domain"),
        "model": data.get("model"),
        "complete": len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))),
        "trials": len(study.get_trials(deepcopy=False)),
        "best_value": None if best is None else best.value,
        "storage": location.url,
    }


def show_study(name: str, *, storage: str | None = None) -> dict[str, Any]:
    """Settings, trial counts, search time and the best trial (mask, value, M, alpha) of a study."""
    study, settings, location, _ = _load(name, storage)
    trials = study.get_trials(deepcopy=False)
    states: dict[str, int] = {}
    for trial in trials:
        states[trial.state.name] = states.get(trial.state.name, 0) + 1
    best = _best_trial(study)
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    result: dict[str, Any] = {
        "name": name,
        "storage": location.url,
        "settings": settings.identity(),
        "model_info": settings.model_info,
        "has_profile": settings.profile is not None,
        "direction": settings.direction,
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


# ----- export -----------------------------------------------------------------------------------
def export_mask(name: str, out: str | Path, *, storage: str | None = None, trial: str | int = "best") -> tuple[Path, SkipMask]:
    """Write the mask of ``trial`` ("best" or a trial number) as a mask file with provenance."""
    study, settings, location, _ = _load(name, storage)
    chosen = _pick_trial(study, name, trial)
    info = settings.info()
    from layersearch.strategies import mask_from_params

    mask = mask_from_params(chosen.params, info.num_layers).with_model(info)
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
    path = mask.save(out)
    return path, mask


def _pick_trial(study: Any, name: str, which: str | int) -> Any:
    from optuna.trial import TrialState

    if which in (None, "best"):
        best = _best_trial(study)
        if best is None:
            raise LayersearchError(f"study {name!r} has no completed trial to export")
        return best
    try:
        number = int(which)
    except (TypeError, ValueError):
        raise LayersearchError(f"--trial must be 'best' or a trial number, got {which!r}") from None
    for trial in study.get_trials(deepcopy=False):
        if trial.number == number:
            if trial.state != TrialState.COMPLETE:
                raise LayersearchError(f"trial {number} of study {name!r} is {trial.state.name}, not COMPLETE")
            return trial
    raise LayersearchError(f"study {name!r} has no trial {number}")


# ----- compare ----------------------------------------------------------------------------------
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
    out_prefix: str | Path | None = "compare",
    measure: bool = True,
    repeats: int = 1,
    loaded: Mapping[tuple[str, str, str], Any] | None = None,
    log: Callable[[str], None] | None = None,
) -> CompareResult:
    """Compare studies' best masks; with ``measure``, time each against plain generate in this run.

    The speculative decoder with each study's best mask and transformers' plain ``generate``
    run on the study's own domain prompts (samples, seed, max new tokens of its settings),
    back to back in this process, ``repeats`` times (plain runs before and after the masks).
    M, alpha and tokens/s then come from this measurement; without it, from the best trial's
    attributes. Writes ``<out_prefix>.csv`` and ``.json`` atomically (None: nothing written).
    """
    say = log or (lambda message: None)
    if not names:
        raise LayersearchError("no study names to compare")
    if repeats < 1:
        raise LayersearchError(f"--repeats must be >= 1, got {repeats}")
    entries = []
    for name in names:  # every study is checked before anything is measured or written
        study, settings, location, _ = _load(name, storage)
        best = _best_trial(study)
        if best is None:
            raise LayersearchError(f"study {name!r} has no completed trial to compare")
        entries.append((name, study, settings, best))
    rows = [_compare_row(name, study, settings, best) for name, study, settings, best in entries]
    if measure:
        _measure_rows(rows, entries, repeats, dict(loaded or {}), say)
    csv_path = json_path = None
    if out_prefix is not None:
        csv_path, json_path = write_table(rows, out_prefix, COMPARE_COLUMNS)
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


def _measure_rows(rows: list[dict[str, Any]], entries: list[Any], repeats: int, models: dict, say: Callable[[str], None]) -> None:
    from layersearch.objectives import ModelRuntime
    from layersearch.strategies import mask_from_params

    groups: dict[tuple, list[int]] = {}
    for index, (_, _, settings, _) in enumerate(entries):
        key = (settings.model, settings.device, settings.dtype, settings.domain, settings.samples,
               settings.seed, settings.max_new_tokens, settings.max_draft, settings.draft_threshold)
        groups.setdefault(key, []).append(index)
    for key, indices in groups.items():
        settings = entries[indices[0]][2]
        model_key = (settings.model, settings.device, settings.dtype)
        if model_key not in models:
            say(f"loading {settings.model} ...")
            models[model_key] = _load_model(settings)
        loaded = models[model_key]
        runtime = ModelRuntime.from_texts(
            loaded, _prompt_texts(settings), max_new_tokens=settings.max_new_tokens,
            max_draft=settings.max_draft, draft_threshold=settings.draft_threshold,
        )
        masks = {}
        for index in indices:
            _, _, study_settings, best = entries[index]
            info = study_settings.info()
            if info.fingerprint != loaded.info.fingerprint:
                raise LayersearchError(f"model {settings.model!r} is not the one study {entries[index][0]!r} was made for")
            masks[index] = mask_from_params(best.params, info.num_layers).with_model(info)
        say(f"measuring plain generate and {len(indices)} mask(s) on {settings.domain} ({settings.samples} prompts) ...")
        base_runs, mask_runs = [], {index: [] for index in indices}
        for _ in range(repeats):
            base_runs.append(runtime.baseline())
            for index in indices:
                mask_runs[index].append(runtime.decode(masks[index]))
            base_runs.append(runtime.baseline())  # before and after: drift hits both sides alike
        base_tps = sum(r.new_tokens for r in base_runs) / sum(r.seconds for r in base_runs)
        for index in indices:
            runs = mask_runs[index]
            tokens, seconds = sum(r.new_tokens for r in runs), sum(r.seconds for r in runs)
            drafted, accepted = sum(r.drafted for r in runs), sum(r.accepted for r in runs)
            forwards, decode_tokens = sum(r.target_forwards for r in runs), sum(r.decode_tokens for r in runs)
            tps = tokens / seconds if seconds > 0 else 0.0
            rows[index].update(
                M=decode_tokens / forwards if forwards else 1.0,
                alpha=accepted / drafted if drafted else None,
                tokens_per_second=tps,
                baseline_tokens_per_second=base_tps,
                speedup=tps / base_tps if base_tps > 0 else None,
            )


def write_table(rows: Sequence[Mapping[str, Any]], out_prefix: str | Path, columns: Sequence[str]) -> tuple[Path, Path]:
    """Write ``rows`` as ``<prefix>.csv`` and ``<prefix>.json``, each atomically."""
    prefix = Path(out_prefix)
    if prefix.suffix in (".csv", ".json"):
        prefix = prefix.with_suffix("")
    csv_path, json_path = Path(f"{prefix}.csv"), Path(f"{prefix}.json")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: "" if row.get(key) is None else row.get(key) for key in columns})
    write_text_atomic(csv_path, buffer.getvalue())
    write_json_atomic(json_path, [dict(row) for row in rows])
    return csv_path, json_path


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` via a temporary file in the same folder and a rename."""
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# ----- shared helpers ---------------------------------------------------------------------------
def load_study(name: str, *, storage: str | None = None) -> Any:
    """The Optuna study ``name`` (for plots); clear errors for a missing storage or study."""
    return _load(name, storage)[0]


def _strategy_plan(settings: StudySettings, num_layers: int, *, n_finished: int) -> _StrategyPlan:
    """The sampler and stop rule of the study's strategy, rebuilt from its settings."""
    extras = _extra_strategies() if settings.strategy not in _builtin_strategies() else {}
    if settings.strategy in extras:
        return extras[settings.strategy].plan(settings, num_layers, n_finished)
    from layersearch.strategies import StopRule, make_sampler, stop_reason

    # Mask samplers draw from (seed, trial number): the plain seed keeps resumption exact.
    # TPE draws from one stream, so a resumed run starts it past the draws already made.
    seed = settings.seed + n_finished if settings.strategy == "tpe" else settings.seed
    sampler = make_sampler(settings.strategy, num_layers=num_layers, skip_ratio=settings.skip_ratio, seed=seed)
    # SWIFT's target (0.95) is a matchness level; with another objective only patience/length apply.
    rule = None if settings.objective == "matchness" else StopRule(target=None)
    return _StrategyPlan(sampler, lambda study: stop_reason(settings.strategy, study, rule=rule))


def _initial_masks(settings: StudySettings, loaded: Any, texts: Sequence[str], profile: Any) -> tuple[SkipMask, ...]:
    """Masks to enqueue when the study is created (Self-SD's probes, SWIFT's start, candidates)."""
    if settings.strategy not in _builtin_strategies():
        return _extra_strategies()[settings.strategy].initial(settings, loaded, texts, profile)
    from layersearch.strategies import initial_masks

    return initial_masks(settings.strategy, num_layers=loaded.info.num_layers, skip_ratio=settings.skip_ratio)


def _builtin_strategies() -> tuple[str, ...]:
    from layersearch.strategies import STRATEGIES

    return tuple(STRATEGIES)


def _prompt_texts(settings: StudySettings) -> list[str]:
    from layersearch.data import load_prompts

    return [prompt.text for prompt in load_prompts(settings.domain, settings.samples, seed=settings.seed)]


def _load_model(settings: StudySettings) -> Any:
    from layersearch.models.loading import load_model

    return load_model(settings.model, device=settings.device, dtype=settings.dtype)


def _finished(study: Any) -> list[Any]:
    from optuna.trial import TrialState

    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED))


def _best_trial(study: Any) -> Any:
    """The best COMPLETE trial, or None (Optuna raises when there is none)."""
    try:
        return study.best_trial
    except ValueError:
        return None


def _best_value(study: Any) -> float | None:
    best = _best_trial(study)
    return None if best is None else float(best.value)


def _json_value(value: Any) -> Any:
    """Plain JSON scalars for user attrs (NaN/inf become None)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@contextmanager
def _quiet_warnings() -> Iterator[None]:
    """Hide Optuna's ExperimentalWarning (heartbeat, journal) from users."""
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text
    return text if len(text) <= 200 else text[:197] + "..."


__all__ = [
    "CompareResult",
    "CreateResult",
    "DEFAULT_HEARTBEAT",
    "RunSummary",
    "STUDIES_DIR",
    "SETTINGS_ATTR",
    "StorageLocation",
    "StudySettings",
    "WORKER_ATTR",
    "available_strategies",
    "check_name",
    "check_strategy",
    "compare_studies",
    "create_study",
    "default_storage_url",
    "export_mask",
    "fail_stale_trials",
    "list_studies",
    "load_study",
    "open_storage",
    "run_study",
    "search_seconds",
    "show_study",
    "storage_location",
    "write_table",
]
