"""``run``: more trials of a study, resumable and crash-safe, until its strategy says stop.

A run loses at most the trial it was running: stale trials of dead workers are failed first
(:mod:`layersearch.study.workers`), and Ctrl-C or SIGTERM fail the current trial before the
process exits (:mod:`layersearch.study.interrupts`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from layersearch.common.checks import check_int, check_positive
from layersearch.common.errors import LayersearchError
from layersearch.study.interrupts import fail_if_running, Interrupts, no_interrupt_tracebacks
from layersearch.study.rebuild import load_study_model, prompt_texts, strategy_plan
from layersearch.study.storage import DEFAULT_HEARTBEAT, open_study, quiet_warnings
from layersearch.study.trials import best_trial, best_value_of, finished_trials, json_value
from layersearch.study.workers import WORKER_ATTR, worker_record, fail_stale_trials

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
    requeued: int = 0  # enqueued candidates of interrupted trials enqueued again on start


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

    from layersearch.strategies.queue import requeue_unmeasured

    trials = check_budget(trials, timeout)
    started = time.perf_counter()
    study, settings, location, storage_obj = open_study(name, storage, heartbeat=heartbeat)
    stale = fail_stale_trials(study)
    requeued = requeue_unmeasured(study)  # candidates an interrupted trial took with it: measured on this run
    plan = strategy_plan(settings, settings.info().num_layers, n_finished=len(finished_trials(study)))
    study = optuna.load_study(study_name=name, storage=storage_obj, sampler=plan.sampler)
    reason = plan.stop_reason(study)
    ran = 0
    if reason is None:
        evaluate = trial_function(study, settings, storage_obj, loaded)
        ran, reason = optimize(study, evaluate, plan, trials=trials, timeout=timeout, quiet=quiet, stream=stream,
                               url=location.url)
    summary = summarize(study, settings, location, ran=ran, stale=stale, reason=reason, seconds=time.perf_counter() - started)
    return replace(summary, requeued=requeued)


def check_budget(trials: int | None, timeout: float | None) -> int | None:
    """The number of trials to run (50 when neither ``trials`` nor ``timeout`` is given)."""
    if trials is not None:
        check_int(trials, "trials")
    if timeout is not None:
        check_positive(timeout, "timeout", unit="seconds")
    return 50 if trials is None and timeout is None else trials


def trial_function(study: Any, settings: Any, storage_obj: Any, loaded: Any = None) -> "TrialFunction":
    """The study's objective as an Optuna trial function: model, prompts and objective rebuilt
    from the stored settings (``loaded`` reused when given, checked against the study's model)."""
    from layersearch.objectives import ModelRuntime, make_objective

    info = settings.info()
    loaded = loaded if loaded is not None else load_study_model(settings)
    texts = prompt_texts(settings, tokenizer=loaded.tokenizer)
    if loaded.info.fingerprint != info.fingerprint:
        raise LayersearchError(
            f"model {settings.model!r} is not the one the study was created with "
            f"(fingerprint {loaded.info.fingerprint}, expected {info.fingerprint})"
        )
    runtime = ModelRuntime.from_texts(
        loaded, texts, max_new_tokens=settings.max_new_tokens,
        max_draft=settings.max_draft, draft_threshold=settings.draft_threshold,
    )
    objective = make_objective(
        settings.objective, profile=settings.latency_profile(), gamma=settings.gamma,
        decode_stats=settings.decode_stats,
    )
    return TrialFunction(study, storage_obj, info, runtime, objective, space=settings.space)


#: Trial user attribute: the int4 group size the trial's plan ran with (its parameters hold none).
INT4_GROUP_ATTR = "int4_group_size"


def trial_mask(params: Any, user_attrs: Any, num_layers: int) -> Any:
    """The plan a stored trial measured: its parameters' plan, in the int4 group size it ran with."""
    from dataclasses import replace

    from layersearch.strategies import mask_from_params

    mask = mask_from_params(params, num_layers)
    group = user_attrs.get(INT4_GROUP_ATTR)
    return replace(mask, int4_group_size=group) if mask.has_int4 and group is not None else mask


class TrialFunction:
    """Scores one trial's mask; remembers the trial it is in (to fail it on an interrupt)."""

    def __init__(self, study: Any, storage_obj: Any, info: Any, runtime: Any, objective: Any, space: str = "skips") -> None:
        self.storage = storage_obj
        self.space = space
        self.info = info
        self.runtime = runtime
        self.objective = objective
        self.interrupts = Interrupts(study)
        self.worker = worker_record()
        self.trial_id: int | None = None

    def __call__(self, trial: "optuna.Trial") -> float:
        """The objective value of the trial's mask; its attributes recorded on the trial."""
        from layersearch.strategies import suggest_mask

        self.trial_id = trial._trial_id
        self.storage.set_trial_system_attr(trial._trial_id, WORKER_ATTR, self.worker)
        mask = suggest_mask(trial, self.info.num_layers, self.space).with_model(self.info)
        if mask.has_int4:  # searched int4 plans run in groups of 128, or what the model's widths take
            from layersearch.models.int4 import fit_group_size

            mask = fit_group_size(mask, self.runtime.model)
            trial.set_user_attr(INT4_GROUP_ATTR, mask.int4_group_size)  # export writes the plan that ran
        with self.interrupts.raising():  # only here may Ctrl-C / SIGTERM raise: no storage write runs
            score = self.objective.evaluate(self.runtime, mask)
        for key, value in score.attrs.items():
            trial.set_user_attr(key, json_value(value))
        return float(score.value)


def optimize(
    study: Any, evaluate: TrialFunction, plan: Any, *, trials: int | None, timeout: float | None,
    quiet: bool = False, stream: Any = None, url: str = "",
) -> tuple[int, str | None]:
    """Run trials with a progress bar until the budget ends or the strategy stops:
    ``(trials finished, stop reason)``. An interrupt fails the running trial, then re-raises;
    a storage failing under the run (read-only, locked, gone, disk full) ends it in one
    :class:`LayersearchError` line, the running trial failed where the storage still allows."""
    from optuna.trial import TrialState

    from layersearch.common.progress import TrialProgress

    stop: dict[str, Any] = {"reason": None, "trials": 0}
    with TrialProgress(total=trials, quiet=quiet, stream=stream) as progress:

        def after_trial(study_now: Any, trial: Any) -> None:
            evaluate.trial_id = None
            stop["trials"] += 1
            progress.update(best=best_value_of(study_now), last=trial.value, state=trial.state.name)
            why = plan.stop_reason(study_now)
            if why is not None:
                stop["reason"] = why
                study_now.stop()

        try:
            with evaluate.interrupts.installed(), quiet_warnings(), no_interrupt_tracebacks():
                study.optimize(evaluate, n_trials=trials, timeout=timeout, callbacks=[after_trial], catch=())
                evaluate.interrupts.raise_pending()  # one that arrived outside a trial's computation
        except KeyboardInterrupt:
            progress.close()
            trial_id = evaluate.trial_id
            storage = evaluate.storage
            fail_if_running(storage, trial_id)
            if trial_id is not None and storage.get_trial(trial_id).state == TrialState.FAIL:
                number = storage.get_trial(trial_id).number
                print(f"layersearch: trial {number} of {study.study_name} marked FAIL", file=sys.stderr)
            raise
        except LayersearchError:
            progress.close()
            fail_if_running(evaluate.storage, evaluate.trial_id)
            raise
        except Exception as exc:
            progress.close()
            fault = storage_fault(exc)
            if fault is None:
                raise
            raise LayersearchError(storage_fault_message(evaluate.storage, url, evaluate.trial_id, fault)) from None
    return stop["trials"], stop["reason"]


def format_run_summary(summary: Any) -> str:
    """One line: trials run, completed, best value and mask, stop reason, stale trials failed."""
    parts = [f"study {summary.name}: ran {summary.ran} trial(s) in {summary.seconds:.1f} s",
             f"{summary.completed} complete of {summary.total}"]
    if summary.best_value is not None:
        parts.append(f"best {summary.best_value:.6g} ({summary.direction}) at trial {summary.best_trial} [{summary.best_mask}]")
    if summary.stale_failed:
        parts.append(f"{summary.stale_failed} stale trial(s) of dead workers marked FAIL")
    if getattr(summary, "requeued", 0):
        parts.append(f"{summary.requeued} candidate(s) of interrupted trials enqueued again")
    if summary.stop_reason:
        parts.append(f"stopped: {summary.stop_reason}")
    text = "; ".join(parts)
    if getattr(summary, "advice", None):
        text += f"\nlayersearch: note: {summary.advice}"
    return text


def summarize(study: Any, settings: Any, location: Any, *, ran: int, stale: int, reason: str | None, seconds: float) -> RunSummary:
    """The :class:`RunSummary` of a run that ended."""
    from optuna.trial import TrialState

    best = best_trial(study)
    return RunSummary(
        name=study.study_name,
        url=location.url,
        ran=ran,
        completed=len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))),
        total=len(study.get_trials(deepcopy=False)),
        stale_failed=stale,
        best_value=None if best is None else float(best.value),
        best_trial=None if best is None else best.number,
        best_mask=None if best is None else best.user_attrs.get("mask"),
        stop_reason=reason,
        seconds=seconds,
        direction=settings.direction,
        advice=flat_search_advice(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), settings),
    )


def storage_fault(exc: BaseException) -> BaseException | None:
    """The storage failing under a run (read-only, locked, gone, disk full) in ``exc`` or what
    it was raised from: Optuna's own clean-up may fail on the same storage and hide the cause."""
    faults: tuple[type[BaseException], ...] = (OSError,)  # no SQLAlchemy: only file faults
    try:
        from sqlalchemy.exc import SQLAlchemyError

        faults = (OSError, SQLAlchemyError)
    except ImportError:
        pass
    seen = 0
    cause: BaseException | None = exc
    while cause is not None and seen < 10:
        if isinstance(cause, faults):
            return cause
        cause = cause.__cause__ or cause.__context__
        seen += 1
    return None


def storage_fault_message(storage: Any, url: str, trial_id: int | None, exc: BaseException) -> str:
    """One line: what failed, and what became of the running trial (failed now, or left for the next run)."""
    from layersearch.study.storage import one_line

    reason = storage_reason(exc)
    fate = ""
    if trial_id is not None:
        try:
            fail_if_running(storage, trial_id)
            fate = f"; trial {storage.get_trial(trial_id).number} marked FAIL"
        except Exception:  # the storage still refuses: the next run fails the stale trial
            fate = "; the running trial could not be marked FAIL (the next run fails it as stale)"
    return f"storage {url} failed during the run: {reason or one_line(exc)}{fate}; completed trials are kept"


def storage_reason(exc: BaseException) -> str | None:
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
        change = f"lower the skip ratio (now {ratio:g}; try {max(0.05, round(ratio / 2, 2)):g})"
    else:
        change = "give a small skip ratio (e.g. 0.15)"
    return (f"all {len(complete)} completed trials scored {value:g}: the search sees no signal; "
            f"the masks skip too much for {settings.model}: {change} in a new study")
