"""Studies on a real PostgreSQL server: concurrent ``study run`` workers, a worker killed
mid-trial (its trial failed by the heartbeat, a restart resumes). Reading commands, plots and the
dashboard are in test_reading_postgres.py, connection failures in test_errors_postgres.py.

The server is the session's private cluster (see conftest.py). Workers are real
``python -m layersearch study run`` processes on one study, as on several hosts.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from layersearch.strategies import PROPOSAL_ATTR, mask_from_params, skip_count
from layersearch.study import WORKER_ATTR

optuna.logging.set_verbosity(optuna.logging.WARNING)

NUM_LAYERS = 4  # the tiny model of tests/study/conftest.py


def trials_of(name: str, storage) -> list[optuna.trial.FrozenTrial]:
    """The trials of study ``name`` in ``storage`` (a URL, or one RDBStorage reused by a polling loop:
    a fresh storage per poll opens a connection pool each time, and a slow machine's loop then
    exhausts the server's 100 connections before the garbage collector closes them)."""
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


def start_worker(name: str, url: str, folder: Path, *extra: str) -> subprocess.Popen:
    """A ``layersearch study run`` process; its output goes to ``folder/<name>-<n>.out``."""
    out = folder / f"{name}-{len(list(folder.glob(f'{name}-*.out')))}.out"
    with out.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "layersearch", "study", "run", "--name", name, "--storage", url, "--quiet", *extra],
            cwd=folder, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=sink, stderr=subprocess.STDOUT,
        )


def worker_output(folder: Path, name: str, index: int) -> str:
    return (folder / f"{name}-{index}.out").read_text()


def ran(output: str) -> int:
    """Trials a worker reports having run (``study X: ran N trial(s) ...``)."""
    found = re.search(r"ran (\d+) trial\(s\)", output)
    assert found, output
    return int(found.group(1))


def check_valid(trial: optuna.trial.FrozenTrial, strategy: str, skip_ratio: float | None) -> None:
    """A finished trial's mask is one its strategy may propose, and is what the trial measured."""
    mask = mask_from_params(trial.params, NUM_LAYERS)
    assert trial.user_attrs["mask"] == mask.short_string()
    count = skip_count(strategy, num_layers=NUM_LAYERS, skip_ratio=skip_ratio) if strategy != "knapsack" else None
    if count is not None:
        assert mask.num_skipped == count, (strategy, trial.number, mask.short_string())
    if strategy == "swift":
        assert not {0, NUM_LAYERS - 1} & (set(mask.attention) | set(mask.mlp))


# (strategy, workers, trials per worker). selfsd-bo switches to GP-BO after 10 finished trials
# and swift makes trial 24 a GP-UCB step: no worker runs that many alone, so BO proposals show
# that each worker's sampler reads the history the others wrote.
# Kept to the strategies that read the shared history or a shared queue: each worker process
# costs seconds of imports on a 2-core machine (swift's BO step needs 25 trials: see docs).
WORKERS = [("selfsd-bo", 2, 6), ("knapsack", 2, 50)]


def test_concurrent_workers_share_one_study(postgres, database, workdir, cli, create_args):
    enqueued = {}
    for strategy, _, _ in WORKERS:
        status, _, err = cli(*create_args(f"w-{strategy}", strategy, "time-per-token", "--storage", database))
        assert status == 0, err
        enqueued[strategy] = len([t for t in trials_of(f"w-{strategy}", database) if t.state == TrialState.WAITING])
    procs = {strategy: [start_worker(f"w-{strategy}", database, workdir, "--trials", str(per_worker))
                        for _ in range(workers)]
             for strategy, workers, per_worker in WORKERS}
    for strategy, group in procs.items():
        for proc in group:
            proc.wait(timeout=300)
    for strategy, workers, per_worker in WORKERS:
        name = f"w-{strategy}"
        outputs = [worker_output(workdir, name, i) for i in range(workers)]
        assert all(proc.returncode == 0 for proc in procs[strategy]), outputs
        trials = trials_of(name, database)
        # Unique, contiguous numbers; every trial a worker ran is there and finished: none lost.
        assert [t.number for t in trials] == list(range(len(trials)))
        assert len(trials) == sum(ran(out) for out in outputs)
        assert {t.state for t in trials} == {TrialState.COMPLETE}, name
        settings = optuna.load_study(study_name=name, storage=database).user_attrs["settings"]
        for trial in trials:
            check_valid(trial, strategy, settings.get("skip_ratio"))
        origins = [t.system_attrs.get(PROPOSAL_ATTR) for t in trials]
        if strategy in ("selfsd-bo", "swift", "random", "tpe"):  # no stop rule meets these studies
            assert len(trials) == workers * per_worker
            assert len({t.system_attrs[WORKER_ATTR]["pid"] for t in trials}) == workers
        if strategy == "selfsd-bo":
            assert "bo" in origins, origins
        if strategy == "swift":
            assert origins[24] == "bo" and origins.count("bo") == 1, origins
        if strategy == "uniform":
            assert 1 <= len(trials) <= workers  # a worker stops once one measurement exists
        if strategy == "knapsack":
            # Every enqueued candidate was measured by exactly one worker.
            measured = [t for t in trials if "fixed_params" in t.system_attrs]
            assert len(measured) == enqueued[strategy] > 0
            assert len({t.user_attrs["mask"] for t in measured}) == len(measured)


def worker_trials(name: str, storage, pid: int) -> list[optuna.trial.FrozenTrial]:
    return [t for t in trials_of(name, storage) if t.system_attrs.get(WORKER_ATTR, {}).get("pid") == pid]


def test_killed_worker_fails_by_heartbeat_others_continue_restart_resumes(postgres, database, workdir, cli, create_args):
    # Longer trials (4 prompts x 24 tokens) so that the kill lands inside one; 1 s heartbeats,
    # so a trial whose worker stopped beating is stale after 3 s.
    argv = create_args("hb", "random", "time-per-token", "--storage", database)
    argv[argv.index("--samples") + 1] = "4"
    argv[argv.index("--max-new-tokens") + 1] = "24"
    assert cli(*argv)[0] == 0
    survivor = start_worker("hb", database, workdir, "--heartbeat", "1", "--timeout", "15")
    victim = start_worker("hb", database, workdir, "--heartbeat", "1", "--trials", "10000")
    killed_at, victim_trial = None, None
    polled = optuna.storages.RDBStorage(database)  # one connection pool for the whole polling loop
    try:
        deadline = time.monotonic() + 120
        while victim_trial is None and time.monotonic() < deadline and victim.poll() is None:
            time.sleep(0.02)
            mine = worker_trials("hb", polled, victim.pid)
            # A trial of its own behind it and one running with all 8 mask parameters: measuring.
            measuring = [t for t in mine if t.state == TrialState.RUNNING and len(t.params) == 8]
            if measuring and any(t.state == TrialState.COMPLETE for t in mine):
                os.kill(victim.pid, signal.SIGKILL)
                killed_at = time.time()
                victim.wait()
                victim_trial = measuring[0].number
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
        survivor.wait(timeout=120)
    assert victim_trial is not None, worker_output(workdir, "hb", 1)
    assert survivor.returncode == 0, worker_output(workdir, "hb", 0)

    # No process restarted: the survivor's own trials failed the silent one through the heartbeat.
    trials = trials_of("hb", database)
    assert trials[victim_trial].state == TrialState.FAIL
    assert [t.number for t in trials if t.state == TrialState.RUNNING] == []
    survivors = worker_trials("hb", database, survivor.pid)
    assert {t.state for t in survivors} == {TrialState.COMPLETE}
    assert len(survivors) == ran(worker_output(workdir, "hb", 0))
    # It went on after the kill, past the 3 s grace period.
    assert max(t.datetime_start.timestamp() for t in survivors) > killed_at + 3

    # A restarted worker resumes the study: numbering continues, nothing stale is left to fail.
    status, out, err = cli("study", "run", "--name", "hb", "--storage", database, "--trials", "2",
                           "--heartbeat", "1", "--quiet")
    assert status == 0, err
    assert "stale" not in out and "ran 2 trial(s)" in out, out
    after = trials_of("hb", database)
    assert [t.number for t in after] == list(range(len(trials) + 2))
    assert [t.state for t in after[len(trials):]] == [TrialState.COMPLETE] * 2
