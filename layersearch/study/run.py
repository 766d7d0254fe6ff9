"""``run``: more trials of a study, resumable and crash-safe, until its strategy says stop.

A run loses at most the trial it was running: stale trials of dead workers are failed first
(:mod:`layersearch.study.workers`), and Ctrl-C or SIGTERM fail the current trial before the
process exits (:mod:`layersearch.study.interrupts`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from layersearch.errors import LayersearchError
from layersearch.objectives import make_objective
from layersearch.study.interrupts import _fail_if_running, _Interrupts, _no_interrupt_tracebacks
from layersearch.study.rebuild import _load_model, _prompt_texts, _strategy_plan
from layersearch.study.storage import DEFAULT_HEARTBEAT, _load, _quiet_warnings
from layersearch.study.trials import _best_trial, _best_value, _finished, _json_value
from layersearch.study.workers import WORKER_ATTR, _worker_record, fail_stale_trials

if TYPE_CHECKING:
    import optuna  # noqa: F811


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
    advice: str | None = None  # said when the search sees no signal (every trial scored the same)


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
            except LayersearchError:
                progress.close()
                _fail_if_running(storage_obj, current.get("trial_id"))
                raise
            except Exception as exc:
                progress.close()
                fault = _storage_fault(exc)
                if fault is None:
                    raise
                raise LayersearchError(_storage_fault_message(storage_obj, location.url, current.get("trial_id"), fault)) from None
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
        advice=flat_search_advice(complete, settings),
    )


def _storage_fault(exc: BaseException) -> BaseException | None:
    """The storage failing under a run (read-only, locked, gone, disk full) in ``exc`` or what
    it was raised from: Optuna's own clean-up may fail on the same storage and hide the cause."""
    try:
        from sqlalchemy.exc import SQLAlchemyError
    except ImportError:
        SQLAlchemyError = OSError  # noqa: N806 (no SQLAlchemy: only file faults)
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, (OSError, SQLAlchemyError)):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def _storage_fault_message(storage: Any, url: str, trial_id: int | None, exc: BaseException) -> str:
    """One line: what failed, and what became of the running trial (failed now, or left for the next run)."""
    from layersearch.study.storage import _one_line

    reason = _storage_reason(exc)
    fate = ""
    if trial_id is not None:
        try:
            _fail_if_running(storage, trial_id)
            fate = f"; trial {storage.get_trial(trial_id).number} marked FAIL"
        except Exception:  # the storage still refuses: the next run fails the stale trial
            fate = "; the running trial could not be marked FAIL (the next run fails it as stale)"
    return f"storage {url} failed during the run: {reason or _one_line(exc)}{fate}; completed trials are kept"


def _storage_reason(exc: BaseException) -> str | None:
    """The driver's own short reason (``database is locked``), without SQL text or library links."""
    orig = getattr(exc, "orig", None)
    if orig is not None and str(orig).strip():
        return " ".join(str(orig).split())
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return None


#: Completed trials that must all score the same before a run says the search sees no signal.
FLAT_MIN_TRIALS = 5


def flat_search_advice(complete: Any, settings: Any) -> str | None:
    """Advice when every completed trial scored the same value (typically the floor: matchness
    0): the masks skip too much for this model and the search cannot tell them apart."""
    values = {round(float(t.value), 12) for t in complete if t.value is not None}
    if len(complete) < FLAT_MIN_TRIALS or len(values) != 1:
        return None
    value = values.pop()
    ratio = settings.skip_ratio
    if ratio is not None:
        change = f"lower --skip-ratio (now {ratio:g}; try {max(0.05, round(ratio / 2, 2)):g})"
    else:
        change = "give a small --skip-ratio (e.g. 0.15)"
    return (f"all {len(complete)} completed trials scored {value:g}: the search sees no signal; "
            f"the masks skip too much for {settings.model}: {change} in a new study")
