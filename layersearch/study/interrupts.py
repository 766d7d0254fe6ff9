"""Ctrl-C and SIGTERM during a run: fail the current trial cleanly, never inside a storage write."""

from __future__ import annotations

import logging
import signal
from contextlib import contextmanager
from typing import Any, Iterator


class Terminated(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM so the running trial fails cleanly."""


def fail_if_running(storage: Any, trial_id: int | None) -> None:
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
def no_interrupt_tracebacks() -> Iterator[None]:
    """Hide Optuna's log lines for a trial failed by an interrupt (the run reports it once)."""
    logger = logging.getLogger("optuna.study._optimize")
    interrupt_filter = _InterruptFilter()
    logger.addFilter(interrupt_filter)
    try:
        yield
    finally:
        logger.removeFilter(interrupt_filter)


class Interrupts:
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
        """The signal handler: raise inside :meth:`raising`, else note the signal and stop the study."""
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
        """Raise a signal noted outside :meth:`raising`, if any."""
        if self.pending is not None:
            exc, self.pending = self.pending, None
            raise exc

    @contextmanager
    def raising(self) -> Iterator[None]:
        """The block in which a signal raises at once (the objective's computation)."""
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
