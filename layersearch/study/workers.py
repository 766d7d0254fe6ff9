"""Which worker ran a trial, and failing the RUNNING trials of dead workers (stale trials).

Each trial records its worker (system attribute :data:`WORKER_ATTR`: host, pid, process
start). On start a run fails every RUNNING trial whose worker process on this host is gone,
after Optuna's own heartbeat check (RDB storages); this covers journal files, which have no
heartbeat, and a restart right after ``kill -9``.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Mapping

from layersearch.study.storage import quiet_warnings


WORKER_ATTR = "layersearch:worker"


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
    with quiet_warnings():
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


def worker_record() -> dict[str, Any]:
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
