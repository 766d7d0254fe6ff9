"""Distributed search on PostgreSQL: throughput with N workers and the storage's own cost.

Against a PostgreSQL database you give (``--storage postgresql://...``; the script adds and
afterwards deletes its own studies ``pgscale-*``, nothing else), on a tiny random 4-layer
Llama so that a trial is short and the storage's share shows:

1. **throughput**: for each N in ``--workers``, N ``layersearch study run`` processes on one
   random-strategy study for ``--seconds``; trials per minute = the sum over workers of each
   worker's finished trials / (its last end - its first start) (process start-up excluded);
2. **storage overhead per trial**: one in-process ``run_study`` of ``--trials`` trials on a
   study already holding H finished trials, for each H in ``--history`` (inserted with
   ``study.add_trials``); every public method of Optuna's ``RDBStorage`` is timed (outermost
   call only, so nested calls are not counted twice). The main thread's storage time is on the
   trial's path; the heartbeat thread's is not. Also reported: loading the study (all its
   trials) when a worker starts.

Run (one line per figure on stdout, JSON with ``--out``):
    PYTHONPATH=. python benchmarks/pg_scale.py --storage postgresql://user:pw@host/db --threads 1
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import optuna
from optuna.trial import TrialState

from layersearch.cli import main as layersearch_main
from layersearch.common.errors import LayersearchError
from layersearch.strategies import param_names
from layersearch.study import WORKER_ATTR, run_study

import tool_args  # benchmarks/ is on sys.path when a script runs
from tool_args import ToolParser, run_tool

NUM_LAYERS = 4


def tiny_model_and_profile(folder: Path) -> tuple[Path, Path]:
    """A 4-layer random Llama (+ char tokenizer) saved in ``folder`` and a made-up latency profile."""
    from layersearch.models.loading import load_model
    from layersearch.models.tiny import build_tiny_model, char_tokenizer
    from layersearch.profiling.profile import LatencyProfile

    model_dir = folder / "tiny-llama"
    model = build_tiny_model("llama", num_layers=NUM_LAYERS, seed=0)
    model.config.max_position_embeddings = 4096  # the domain prompts are ~1000 characters
    model.save_pretrained(str(model_dir))
    char_tokenizer().save_pretrained(str(model_dir))
    profile = LatencyProfile(
        model=load_model(str(model_dir)).info, device="cpu", dtype="float32", torch_version="bench",
        attention_slope=1e-7, attention_intercept=2e-4, mlp_seconds=2e-4, base_seconds=3e-4,
        verify_ratios=(1.0, 1.1, 1.2, 1.3),
    )
    return model_dir, profile.save(folder / "tiny-profile.json")


def create(name: str, url: str, model_dir: Path, profile: Path) -> None:
    """A random-strategy time-per-token study of 2 prompts x 6 new tokens (short trials)."""
    with contextlib.redirect_stdout(io.StringIO()):
        status = layersearch_main([
            "study", "create", "--name", name, "--storage", url, "--model", str(model_dir), "--domain", "translation",
            "--strategy", "random", "--objective", "time-per-token", "--samples", "2", "--max-new-tokens", "6",
            "--gamma", "8", "--draft-threshold", "0", "--profile", str(profile), "--seed", "0",
        ])
    if status != 0:
        sys.exit(f"pg_scale: could not create study {name}")


def throughput(url: str, name: str, workers: int, seconds: float, threads: int) -> dict[str, Any]:
    """Trials per minute of ``workers`` concurrent ``study run`` processes on study ``name``."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, "-m", "layersearch", "study", "run", "--name", name, "--storage", url,
               "--timeout", str(seconds), "--quiet", "--threads", str(threads)]
    procs = [subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for _ in range(workers)]
    for proc in procs:
        _, err = proc.communicate(timeout=seconds + 300)
        if proc.returncode != 0:
            sys.exit(f"pg_scale: a worker failed: {err.decode()[-2000:]}")
    by_worker: dict[int, list[Any]] = defaultdict(list)
    for trial in optuna.load_study(study_name=name, storage=url).get_trials(states=(TrialState.COMPLETE,)):
        by_worker[trial.system_attrs[WORKER_ATTR]["pid"]].append(trial)
    rates = []
    for trials in by_worker.values():
        span = (max(t.datetime_complete for t in trials) - min(t.datetime_start for t in trials)).total_seconds()
        rates.append(60.0 * len(trials) / span)
    return {"workers": workers, "trials": sum(len(t) for t in by_worker.values()),
            "trials_per_minute": sum(rates), "per_worker": sorted(rates)}


class StorageTimer:
    """Times every public RDBStorage method (outermost calls only), per thread kind."""

    def __init__(self) -> None:
        self.records: list[tuple[float, float, str, str]] = []  # (wall start, seconds, method, "main"/"other")
        self._depth = threading.local()
        self._saved: dict[str, Callable[..., Any]] = {}

    def install(self) -> "StorageTimer":
        cls = optuna.storages.RDBStorage
        for name, method in vars(cls).items():
            if callable(method) and not name.startswith("_"):
                self._saved[name] = method
                setattr(cls, name, self._timed(name, method))
        return self

    def uninstall(self) -> None:
        for name, method in self._saved.items():
            setattr(optuna.storages.RDBStorage, name, method)

    def between(self, start: float, end: float) -> list[tuple[float, float, str, str]]:
        """The calls that started in [start, end] (``time.time()`` seconds)."""
        return [r for r in self.records if start <= r[0] <= end]

    def _timed(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        timer = self

        @functools.wraps(method)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(timer._depth, "value", 0)
            if depth:
                return method(*args, **kwargs)
            timer._depth.value = 1
            wall, start = time.time(), time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                timer._depth.value = 0
                kind = "main" if threading.current_thread() is threading.main_thread() else "other"
                timer.records.append((wall, elapsed, name, kind))

        return wrapper


def add_history(name: str, url: str, count: int) -> float:
    """``count`` finished trials (random masks and values) added to study ``name``; returns seconds.

    ``study.add_trials`` writes one trial per transaction (~35 ms each here: 6 minutes for
    10,000), so the trials go in through Optuna's own ORM models in one transaction: the same
    rows ``add_trials`` writes (checked by reading them back through Optuna).
    """
    import random

    from optuna.storages._rdb import models  # Optuna's schema (a private module: benchmark only)

    rng = random.Random(0)
    names = param_names(NUM_LAYERS)
    binary = optuna.distributions.distribution_to_json(optuna.distributions.IntDistribution(0, 1))
    begin = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    storage = optuna.storages.RDBStorage(url)
    study_id = storage.get_study_id_from_name(name)
    start = time.perf_counter()
    session = storage.scoped_session()
    try:
        offset = session.query(models.TrialModel).filter_by(study_id=study_id).count()
        for i in range(count):
            trial = models.TrialModel(number=offset + i, study_id=study_id, state=TrialState.COMPLETE)
            trial.datetime_start = begin + dt.timedelta(seconds=2 * i)
            trial.datetime_complete = trial.datetime_start + dt.timedelta(seconds=1)
            trial.params = [models.TrialParamModel(param_name=p, param_value=float(rng.randint(0, 1)),
                                                   distribution_json=binary) for p in names]
            trial.values = [models.TrialValueModel(objective=0, value=rng.uniform(0.01, 0.05),
                                                   value_type=models.TrialValueModel.TrialValueType.FINITE)]
            trial.user_attributes = [models.TrialUserAttributeModel(key=k, value_json=json.dumps(v))
                                     for k, v in (("mask", "history"), ("M", 2.0), ("alpha", 0.5))]
            session.add(trial)
        session.commit()
    finally:
        session.close()
        storage.remove_session()
        storage.engine.dispose()
    seconds = time.perf_counter() - start
    stored = optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(stored) != offset + count or any(len(t.params) != len(names) for t in stored):
        sys.exit(f"pg_scale: the history of {name} did not read back ({len(stored)} trials)")
    return seconds


def overhead(url: str, name: str, history: int, trials: int, timer: StorageTimer) -> dict[str, Any]:
    """Storage seconds per trial of ``trials`` in-process trials on a study holding ``history`` ones.

    Counted from the first new trial's start to the last one's end, so that opening the
    storage and loading the model are not charged to the trials.
    """
    inserted = add_history(name, url, history) if history else 0.0
    start = time.perf_counter()
    optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)  # what a starting worker reads
    load = time.perf_counter() - start
    run_study(name, storage=url, trials=trials, quiet=True)
    new = [t for t in optuna.load_study(study_name=name, storage=url).get_trials() if t.number >= history]
    first = min(t.datetime_start for t in new).timestamp()
    last = max(t.datetime_complete for t in new).timestamp()
    calls = timer.between(first, last)
    ran = len(new)
    main_calls = [c for c in calls if c[3] == "main"]
    by_method: dict[str, float] = defaultdict(float)
    for _, seconds, method, _ in main_calls:
        by_method[method] += seconds
    top = sorted(by_method.items(), key=lambda kv: -kv[1])[:4]
    return {"history": history, "insert_seconds": inserted, "load_seconds": load, "trials": ran,
            "wall_ms_per_trial": 1e3 * (last - first) / ran,
            "storage_ms_per_trial": 1e3 * sum(c[1] for c in main_calls) / ran,
            "storage_calls_per_trial": len(main_calls) / ran,
            "heartbeat_thread_ms_per_trial": 1e3 * sum(c[1] for c in calls if c[3] == "other") / ran,
            "top_methods_ms_per_trial": {k: 1e3 * v / ran for k, v in top}}


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run both measurements, print them (and write ``--out``)."""
    parser = ToolParser(__file__, description=__doc__.splitlines()[0])
    parser.add_argument("--storage", required=True, help="postgresql://user:password@host:port/database")
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2, 4], help="worker counts (default 1 2 4)")
    parser.add_argument("--seconds", type=float, default=30.0, help="each throughput run (default 30)")
    parser.add_argument("--history", type=int, nargs="*", default=[0, 1000, 10000], help="finished trials already in the study (default 0 1000 10000)")
    parser.add_argument("--trials", type=int, default=20, help="trials per overhead measurement (default 20)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker (default 1)")
    parser.add_argument("--out", help="JSON file to write")
    args = parser.parse_args(argv)
    return run_tool(parser, lambda: measure(args))


def check_args(args) -> None:
    """Every argument checked before a model is built or a study made: one line naming the option otherwise."""
    scheme = args.storage.partition("://")[0].lower()
    if scheme.partition("+")[0] not in ("postgresql", "postgres"):
        shown = f"{scheme}://..." if "://" in args.storage else repr(args.storage)  # no password on screen
        raise LayersearchError(f"--storage {shown}: this script measures "
                               "PostgreSQL; give postgresql://user:password@host:port/database")
    for n in args.workers:
        tool_args.count(n, "--workers")
    for history in args.history:
        tool_args.count(history, "--history", minimum=0)
    tool_args.real(args.seconds, "--seconds", low=0.0, low_open=True)
    tool_args.count(args.trials, "--trials")
    tool_args.threads(args.threads)
    tool_args.output(args.out)


def measure(args) -> int:
    """Both measurements, printed (and written to ``--out``)."""
    check_args(args)
    import torch

    torch.set_num_threads(args.threads)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    stamp = time.strftime("%Y%m%d%H%M%S")
    made: list[str] = []
    results: dict[str, Any] = {"throughput": [], "overhead": []}
    with tempfile.TemporaryDirectory(prefix="pg-scale-") as tmp:
        model_dir, profile = tiny_model_and_profile(Path(tmp))
        try:
            for index, n in enumerate(args.workers):
                name = f"pgscale-{stamp}-w{n}-{index}"
                create(name, args.storage, model_dir, profile)
                made.append(name)
                row = throughput(args.storage, name, n, args.seconds, args.threads)
                results["throughput"].append(row)
                print(f"{n} worker(s): {row['trials_per_minute']:.0f} trials/min "
                      f"({row['trials']} trials; per worker {', '.join(f'{r:.0f}' for r in row['per_worker'])})",
                      flush=True)
            timer = StorageTimer().install()
            try:
                for index, history in enumerate(args.history):
                    name = f"pgscale-{stamp}-h{history}-{index}"
                    create(name, args.storage, model_dir, profile)
                    made.append(name)
                    row = overhead(args.storage, name, history, args.trials, timer)
                    results["overhead"].append(row)
                    print(f"history {history:>6}: storage {row['storage_ms_per_trial']:.1f} ms/trial "
                          f"({row['storage_calls_per_trial']:.0f} calls) of {row['wall_ms_per_trial']:.1f} ms; "
                          f"heartbeat thread {row['heartbeat_thread_ms_per_trial']:.1f} ms/trial; "
                          f"loading the study {row['load_seconds']:.2f} s; inserting the history "
                          f"{row['insert_seconds']:.1f} s; top: "
                          + ", ".join(f"{k} {v:.1f}" for k, v in row["top_methods_ms_per_trial"].items()), flush=True)
            finally:
                timer.uninstall()
        finally:
            for name in made:
                optuna.delete_study(study_name=name, storage=args.storage)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")  # checked writable before the work
    return 0


if __name__ == "__main__":
    sys.exit(main())
