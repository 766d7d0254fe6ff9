"""A killed or terminated run loses at most its running trial, which ends FAIL, and the next
run continues the numbering."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import optuna
from optuna.trial import TrialState

optuna.logging.set_verbosity(optuna.logging.WARNING)

STORAGE = "sqlite:///studies/{}.db"


def trials(name: str) -> list[optuna.trial.FrozenTrial]:
    # The run under test writes to the same sqlite file; a read may meet its write lock briefly.
    for _ in range(100):
        try:
            return optuna.load_study(study_name=name, storage=STORAGE.format(name)).get_trials(deepcopy=False)
        except Exception as exc:
            if "locked" not in str(exc):
                raise
            time.sleep(0.1)
    raise AssertionError("the study database stayed locked")


def running(name: str) -> list[int]:
    return [t.number for t in trials(name) if t.state == TrialState.RUNNING]


def test_kill_9_mid_trial_then_resume(workdir, cli, create_args):
    # Longer trials (4 prompts x 24 tokens) so the kill lands inside one.
    argv = create_args("killed")
    argv[argv.index("--samples") + 1] = "4"
    argv[argv.index("--max-new-tokens") + 1] = "24"
    assert cli(*argv)[0] == 0
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    victim = None
    for _attempt in range(3):  # a trial may finish just before the kill lands; then try again
        proc = subprocess.Popen(
            [sys.executable, "-m", "layersearch", "study", "run", "--name", "killed", "--trials", "10000", "--quiet"],
            cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
                if not (workdir / "studies/killed.db").exists():
                    continue
                now = trials("killed")
                # A complete trial behind it, and a running one with all 8 mask parameters: measuring.
                if any(t.state == TrialState.COMPLETE for t in now) and any(
                    t.state == TrialState.RUNNING and len(t.params) == 8 for t in now
                ):
                    os.kill(proc.pid, signal.SIGKILL)
                    break
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        left_running = running("killed")
        if left_running:
            victim = left_running[0]
            break
    assert victim is not None, "the run never had a running trial to kill"
    assert running("killed") == [victim]  # kill -9 leaves it RUNNING...
    before = len(trials("killed"))

    status, out, err = cli("study", "run", "--name", "killed", "--trials", "2")
    assert status == 0, err
    assert "1 stale trial(s) of dead workers marked FAIL" in out
    after = trials("killed")
    assert not [t for t in after if t.state == TrialState.RUNNING]
    assert after[victim].state == TrialState.FAIL  # ...until the next run fails it
    assert [t.number for t in after] == list(range(before + 2))  # the numbering continues
    assert [t.state for t in after[before:]] == [TrialState.COMPLETE] * 2


def test_sigterm_fails_the_running_trial(workdir, cli, create_args):
    argv = create_args("term")
    argv[argv.index("--samples") + 1] = "4"
    argv[argv.index("--max-new-tokens") + 1] = "24"
    assert cli(*argv)[0] == 0

    def terminate_when_running() -> None:
        # Once a running trial has all 8 mask parameters, the objective is computing.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(t.state == TrialState.RUNNING and len(t.params) == 8 for t in trials("term")):
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.02)

    previous = signal.getsignal(signal.SIGTERM)
    watcher = threading.Thread(target=terminate_when_running, daemon=True)
    watcher.start()
    status, out, err = cli("study", "run", "--name", "term", "--trials", "10000")
    watcher.join()
    assert signal.getsignal(signal.SIGTERM) is previous  # the handler is restored
    assert status == 130
    assert "marked FAIL" in err and "Traceback" not in err
    states = [t.state for t in trials("term")]
    assert TrialState.RUNNING not in states and states[-1] == TrialState.FAIL

    status, out, _ = cli("study", "run", "--name", "term", "--trials", "1")
    assert status == 0 and "ran 1 trial(s)" in out


def test_stale_trials_heartbeat_and_live_workers(workdir, cli, create_args):
    """Optuna's heartbeat fails a silent remote worker's trial; a live local worker's trial stays."""
    import socket

    from layersearch.study import WORKER_ATTR, fail_stale_trials, open_storage, storage_location

    assert cli(*create_args("hb"))[0] == 0
    storage = open_storage(storage_location(None, "hb"), heartbeat=1)  # grace period 3 s
    study = optuna.load_study(study_name="hb", storage=storage)
    study_id = study._study_id
    remote = storage.create_new_trial(study_id)
    storage.set_trial_system_attr(remote, WORKER_ATTR, {"host": "elsewhere", "pid": 1, "start": 1})
    storage.record_heartbeat(remote)
    alive = storage.create_new_trial(study_id)
    storage.set_trial_system_attr(alive, WORKER_ATTR, {"host": socket.gethostname(), "pid": os.getppid(), "start": None})
    assert fail_stale_trials(study) == 0  # the remote worker beat just now; the local one is alive
    time.sleep(4.2)  # > grace; sqlite's clock has one-second steps
    assert fail_stale_trials(study) == 1
    assert storage.get_trial(remote).state == TrialState.FAIL
    assert storage.get_trial(alive).state == TrialState.RUNNING  # no heartbeat record: never stale


def test_signals_outside_the_objective_are_deferred():
    """A signal during storage work only stops the study; it is raised at the next safe point."""
    import pytest

    from layersearch.study.interrupts import Terminated, Interrupts

    class FakeStudy:
        stopped = 0

        def stop(self) -> None:
            self.stopped += 1

    study = FakeStudy()
    interrupts = Interrupts(study)
    interrupts.handler(signal.SIGTERM, None)  # not armed: noted, study stopped
    assert study.stopped == 1 and isinstance(interrupts.pending, Terminated)
    with pytest.raises(Terminated):
        with interrupts.raising():  # the next objective never starts
            raise AssertionError("not reached")
    with pytest.raises(KeyboardInterrupt):
        with interrupts.raising():
            interrupts.handler(signal.SIGINT, None)  # armed: raised at once
    interrupts.raise_pending()  # nothing left over
