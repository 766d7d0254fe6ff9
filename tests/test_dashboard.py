"""End-to-end check that optuna-dashboard shows a layersearch study and its trial user_attrs.

Starts a real ``optuna-dashboard`` process on a free local port over a sqlite study written
the way the study framework writes it, and reads the dashboard's JSON API with urllib:
``/api/studies`` (list) and ``/api/studies/<id>?after=0`` (detail with trials), the routes
of ``optuna_dashboard/_app.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import optuna
import pytest

STUDY_NAME = "layersearch-dashboard-test"
READY_TIMEOUT_S = 30.0
BINARY = optuna.distributions.IntDistribution(0, 1)
TRIALS = [  # (mask, M, alpha, objective value)
    ("A:1 M:-", 2.25, 0.61, 0.031),
    ("A:1,3 M:2", 2.5, 0.64, 0.029),
    ("A:- M:0,3", 1.75, 0.52, 0.034),
]

optuna.logging.set_verbosity(optuna.logging.WARNING)


def dashboard_command() -> list[str]:
    """The optuna-dashboard executable of this interpreter's environment (PATH as fallback)."""
    beside = Path(sys.executable).with_name("optuna-dashboard")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("optuna-dashboard")
    if found is None:
        pytest.skip("optuna-dashboard executable not found")
    return [found]


def free_port() -> int:
    """A port the OS reports free right now (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_study(db: Path) -> None:
    """A 4-layer study with the trials of ``TRIALS`` and the conventional user_attrs."""
    study = optuna.create_study(storage=f"sqlite:///{db}", study_name=STUDY_NAME, direction="minimize")
    study.set_user_attr("settings", {"model": "tiny", "domain": "gsm8k", "strategy": "tpe",
                                     "objective": "time-per-token", "skip_ratio": 0.25, "seed": 0})
    base = dt.datetime(2025, 1, 1, 12, 0, 0)
    for i, (mask, m, alpha, value) in enumerate(TRIALS):
        params = {f"{kind}_{layer:02d}": 0 for layer in range(4) for kind in ("attn", "mlp")}
        trial = optuna.trial.create_trial(
            params=params, distributions={k: BINARY for k in params}, value=value,
            user_attrs={"mask": mask, "M": m, "alpha": alpha, "skip_ratio": 0.25,
                        "tokens_per_second": 1.0 / value})
        trial.datetime_start = base + dt.timedelta(seconds=10 * i)
        trial.datetime_complete = base + dt.timedelta(seconds=10 * i + 5)
        study.add_trial(trial)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        return json.loads(response.read().decode("utf-8"))


def wait_until_ready(proc: subprocess.Popen, url: str, log: Path) -> None:
    """Poll ``url`` until it answers; fail early with the log if the process died."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"optuna-dashboard exited with {proc.returncode}:\n{log.read_text()}")
        try:
            get_json(url)
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)  # server still binding or loading the storage
    pytest.fail(f"optuna-dashboard not ready after {READY_TIMEOUT_S:.0f} s:\n{log.read_text()}")


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[str]:
    """Base URL of a running optuna-dashboard over a fresh study; the process ends on teardown."""
    db = tmp_path / "study.db"
    make_study(db)
    port = free_port()
    log = tmp_path / "dashboard.log"
    command = dashboard_command() + [f"sqlite:///{db}", "--host", "127.0.0.1", "--port", str(port)]
    # Output goes to a file, not a pipe, so a chatty server can never block on a full pipe.
    with log.open("wb") as log_file:
        proc = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(proc, f"{base}/api/studies", log)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def attrs(serialized: list[dict[str, str]]) -> dict[str, str]:
    """The dashboard's ``[{"key": k, "value": v}]`` attribute list as a dict."""
    return {item["key"]: item["value"] for item in serialized}


def test_dashboard_lists_study_and_trial_user_attrs(dashboard):
    summaries = get_json(f"{dashboard}/api/studies")["study_summaries"]
    assert [s["study_name"] for s in summaries] == [STUDY_NAME]
    assert summaries[0]["directions"] == ["minimize"]
    assert json.loads(attrs(summaries[0]["user_attrs"])["settings"])["strategy"] == "tpe"

    detail = get_json(f"{dashboard}/api/studies/{summaries[0]['study_id']}?after=0")
    assert detail["name"] == STUDY_NAME
    trials = sorted(detail["trials"], key=lambda t: t["number"])
    assert len(trials) == len(TRIALS)
    for trial, (mask, m, alpha, value) in zip(trials, TRIALS):
        user_attrs = attrs(trial["user_attrs"])
        # The dashboard serialises numbers with str(); compare as written.
        assert user_attrs["mask"] == mask
        assert float(user_attrs["M"]) == m
        assert float(user_attrs["alpha"]) == alpha
        assert trial["state"] == "Complete" and trial["values"] == [value]
