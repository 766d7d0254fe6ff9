"""The reading commands, plots and optuna-dashboard on studies in a real PostgreSQL database.

Two short studies are run into one database of the private cluster (see conftest.py); every
reader then gets the ``postgresql://`` URL: ``study list/show/export/compare``, ``plot
history/compare`` and a real ``optuna-dashboard`` process (read through its JSON API, as in
tests/test_dashboard.py). Readers change nothing on the server, and no password reaches their
output or files.
"""

from __future__ import annotations

import csv
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import matplotlib.image
import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy.engine import make_url

optuna.logging.set_verbosity(optuna.logging.WARNING)

NAMES = ("read-a", "read-b")
TRIALS = 4


@pytest.fixture
def studies(postgres, database, workdir, cli, create_args) -> str:
    """``NAMES`` with ``TRIALS`` finished trials each in one database; returns its URL."""
    for name in NAMES:
        status, _, err = cli(*create_args(name, "random", "time-per-token", "--storage", database))
        assert status == 0, err
        status, _, err = cli("study", "run", "--name", name, "--storage", database, "--trials", TRIALS, "--quiet")
        assert status == 0, err
    return database


def snapshot(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every trial of every study (number, state, value, params, attributes): to see that nothing changed."""
    return {s.study_name: [(t.number, t.state, t.value, t.params, t.user_attrs, t.system_attrs)
                           for t in optuna.load_study(study_name=s.study_name, storage=url).get_trials()]
            for s in optuna.get_all_study_summaries(url)}


def best_of(name: str, url: str) -> optuna.trial.FrozenTrial:
    complete = optuna.load_study(study_name=name, storage=url).get_trials(states=(TrialState.COMPLETE,))
    return min(complete, key=lambda t: (t.value, t.number))  # time-per-token: lower is better


def test_reading_commands_and_plots(postgres, studies, workdir, cli):
    password = make_url(studies).password
    before = snapshot(studies)
    status, out, err = cli("study", "list", "--storage", studies, "--json")
    assert status == 0, err
    rows = json.loads(out)
    assert sorted(r["name"] for r in rows) == list(NAMES) and {r["trials"] for r in rows} == {TRIALS}

    status, out, err = cli("study", "show", "--name", "read-a", "--storage", studies, "--json")
    assert status == 0, err
    shown = json.loads(out)
    best = best_of("read-a", studies)
    assert shown["trials"] == TRIALS and shown["states"] == {"COMPLETE": TRIALS}
    assert (shown["best"]["trial"], shown["best"]["mask"]) == (best.number, best.user_attrs["mask"])
    assert shown["storage"] == studies.replace(password, "***")

    status, out, err = cli("study", "export", "--name", "read-a", "--storage", studies, "--out", "best.json")
    assert status == 0, err
    exported = (workdir / "best.json").read_text()
    assert password not in exported
    provenance = json.loads(exported)["provenance"]
    assert (provenance["trial"], provenance["score"]) == (best.number, best.value)

    status, out, err = cli("study", "compare", "--names", *NAMES, "--storage", studies, "--no-measure",
                           "--out-prefix", "cmp")
    assert status == 0, err
    with (workdir / "cmp.csv").open() as f:
        compared = {row["study"]: row for row in csv.DictReader(f)}
    assert set(compared) == set(NAMES)
    for name in NAMES:
        assert compared[name]["mask"] == best_of(name, studies).user_attrs["mask"]

    for argv in (("plot", "history", "--name", "read-a", "--storage", studies, "--out", "history.png"),
                 ("plot", "compare", "--names", *NAMES, "--storage", studies, "--out", "compare.png")):
        status, out, err = cli(*argv)
        assert status == 0, err
        assert password not in out + err
        height, width = matplotlib.image.imread(workdir / argv[-1]).shape[:2]
        assert height > 100 and width > 100
    assert snapshot(studies) == before  # reading changed nothing on the server


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read().decode("utf-8"))


def test_dashboard_on_the_postgres_url(studies, workdir):
    beside = Path(sys.executable).with_name("optuna-dashboard")
    command = str(beside) if beside.exists() else shutil.which("optuna-dashboard")
    if command is None:
        pytest.skip("optuna-dashboard executable not found")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = workdir / "dashboard.log"
    with log.open("wb") as sink:  # a file, not a pipe: a chatty server never blocks
        proc = subprocess.Popen([command, studies, "--host", "127.0.0.1", "--port", str(port)],
                                stdout=sink, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/api/studies"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                summaries = get_json(base)["study_summaries"]
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        assert sorted(s["study_name"] for s in summaries) == list(NAMES)
        for summary in summaries:
            detail = get_json(f"{base}/{summary['study_id']}?after=0")
            stored = optuna.load_study(study_name=summary["study_name"], storage=studies).get_trials()
            shown = sorted(detail["trials"], key=lambda t: t["number"])
            # The dashboard shows each trial's value and its mask (a user attribute).
            assert [(t["number"], t["values"], {a["key"]: a["value"] for a in t["user_attrs"]}["mask"])
                    for t in shown] == [(t.number, [t.value], t.user_attrs["mask"]) for t in stored]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
