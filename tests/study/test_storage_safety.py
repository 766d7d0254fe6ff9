"""Issue 16, storage items: another tool's study or database is never touched, a crashed journal
is recovered keeping every complete record, and a storage failing mid-run is one line."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import warnings
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("layersearch: error: ") and "Traceback" not in err, err
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def journal(path: Path):
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    return JournalStorage(JournalFileBackend(str(path)))


# ----- item 1: create never deletes another tool's study ------------------------------------------
@pytest.mark.parametrize("user_attrs", [{"owner": "another tool"}, {}])
def test_create_never_replaces_a_study_it_did_not_make(workdir, cli, create_args, user_attrs):
    url = f"sqlite:///{workdir / 'shared.db'}"
    other = optuna.create_study(study_name="shared", storage=url)
    for key, value in user_attrs.items():
        other.set_user_attr(key, value)
    study_id = other._study_id
    status, _, err = cli(*create_args("shared"), "--storage", url)
    assert status == 2
    assert "layersearch leaves it as it is" in one_error_line(err)
    kept = optuna.load_study(study_name="shared", storage=url)
    assert kept._study_id == study_id and kept.user_attrs == user_attrs


# ----- item 3: reading commands create and migrate nothing ----------------------------------------
def test_show_and_list_leave_another_applications_database_untouched(workdir, cli):
    other = workdir / "app.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
        connection.execute("INSERT INTO notes (text) VALUES ('mine')")
    connection.close()
    before = digest(other)
    for argv in (["study", "show", "--name", "x", "--storage", str(other)],
                 ["study", "list", "--storage", str(other)],
                 ["study", "export", "--name", "x", "--storage", str(other), "--out", "m.json"],
                 ["plot", "history", "--name", "x", "--storage", str(other)]):
        status, _, err = cli(*argv)
        assert status == 2 and "another application" in one_error_line(err), argv
        assert digest(other) == before
    assert not (workdir / "m.json").exists() and not (workdir / "plots").exists()


def test_list_does_not_turn_an_empty_file_into_a_database(workdir, cli):
    empty = workdir / "empty.db"
    empty.touch()
    status, _, err = cli("study", "list", "--storage", str(empty))
    assert status == 2 and "empty file" in one_error_line(err)
    assert empty.stat().st_size == 0


# ----- a .log that is no Optuna journal is never opened (nor "repaired") as one -------------
@pytest.mark.parametrize("data", [b"app started\nready\n", bytes(range(256)) * 4, b'{"level": "info"}\n',
                                  b'{"op_code":0,"worker_id":"x', b'app started\n{"op_code":0,"worker_id":"x"}\n'],
                         ids=["text", "binary", "foreign JSON lines", "a cut-off record only", "text, then a record"])
def test_a_log_that_is_no_journal_is_left_untouched(workdir, cli, create_args, data):
    notes = workdir / "notes.log"
    notes.write_bytes(data)
    for argv in (create_args("x", "random", "matchness", "--storage", "notes.log"),
                 ["study", "run", "--name", "x", "--storage", "notes.log", "--trials", "1"],
                 ["study", "list", "--storage", "journal:///notes.log"]):
        status, _, err = cli(*argv)
        assert status == 2 and "is not an Optuna journal" in one_error_line(err), argv
        assert notes.read_bytes() == data
    assert sorted(p.name for p in workdir.iterdir()) == ["notes.log"]  # no .damaged copy, no lock file


def test_journal_problem_accepts_journals_and_their_crash_damage():
    from layersearch.study.storage_safety import journal_problem

    record = b'{"op_code":0,"worker_id":"w","study_name":"x","directions":[1]}'
    assert journal_problem(b"") is None
    assert journal_problem(record + b"\n") is None
    assert journal_problem(record + b"\n" + record[:20]) is None  # cut off by a crash: repairable
    assert journal_problem(record[:20] + record + b"\n") is None  # a record glued onto a fragment
    assert journal_problem(b'{"op_code": 0, "worker_id": "w"}\n') is None  # older Optuna's spacing
    assert "no complete journal record" in journal_problem(record[:20])
    assert "line 2" in journal_problem(record + b'\n{"level": 1}\n')


# ----- item 10: list with other tools' studies -----------------------------------------------------
def test_list_shows_other_tools_studies_without_failing(workdir, cli, create_args):
    url = f"sqlite:///{workdir / 'mixed.db'}"
    assert cli(*create_args("ours"), "--storage", url)[0] == 0
    stringy = optuna.create_study(study_name="stringy", storage=url)
    stringy.set_user_attr("settings", "their own settings text")
    multi = optuna.create_study(study_name="multi", storage=url, directions=["minimize", "maximize"])
    multi.optimize(lambda t: (t.suggest_float("x", 0, 1), 1.0), n_trials=2)
    status, out, err = cli("study", "list", "--storage", url)
    assert status == 0 and "Traceback" not in err
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert set(rows) == {"ours", "stringy", "multi"}
    assert "(not layersearch)" in rows["stringy"] and "(not layersearch)" in rows["multi"]
    status, _, err = cli("study", "show", "--name", "stringy", "--storage", url)
    assert status == 2 and "not made by layersearch" in one_error_line(err)


# ----- item 2: a journal cut off by a crash ---------------------------------------------------------
def cut_last_record(path: Path, keep: int = 25) -> bytes:
    """Cut the journal's last line after ``keep`` bytes, as a crash mid-write does; returns the cut line."""
    data = path.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[: start + keep])
    return data[start:]


def complete_numbers(url: str, name: str) -> list[int]:
    study = optuna.load_study(study_name=name, storage=journal(Path(url.split(":///", 1)[1])))
    return [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]


def test_cut_off_journal_is_recovered_keeping_every_complete_trial(workdir, cli, create_args):
    log = workdir / "j.log"
    url = f"journal:///{log}"
    assert cli(*create_args("j"), "--storage", url)[0] == 0
    assert cli("study", "run", "--name", "j", "--storage", url, "--trials", "2", "--quiet")[0] == 0
    assert len(complete_numbers(url, "j")) == 2
    cut_last_record(log)  # the last record (the run's last write) lost its end
    damaged = digest(log)
    done = complete_numbers(url, "j")  # what the complete records say (Optuna skips a cut-off last line)
    assert len(done) >= 1

    # Reading commands read the complete records and change nothing.
    status, out, err = cli("study", "show", "--name", "j", "--storage", url)
    assert status == 0 and "damaged by a crash" in err and "the cut-off last record" in err
    assert digest(log) == damaged and list(workdir.glob("j.log.damaged-*")) == []

    # The next run repairs the file (the original kept beside it) and carries on.
    status, out, err = cli("study", "run", "--name", "j", "--storage", url, "--trials", "1", "--quiet")
    assert status == 0, err
    assert "dropped the cut-off last record" in err
    backups = list(workdir.glob("j.log.damaged-*"))
    assert len(backups) == 1 and digest(backups[0]) == damaged
    now = complete_numbers(url, "j")
    assert set(done) <= set(now) and len(now) == len(done) + 1
    status, _, err = cli("study", "run", "--name", "j", "--storage", url, "--trials", "1", "--quiet")
    assert status == 0 and "damaged" not in err


def test_record_glued_to_a_fragment_by_an_unrepaired_append_is_kept(workdir, cli):
    log = workdir / "g.log"
    study = optuna.create_study(study_name="g", storage=journal(log))
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    cut_last_record(log)
    # A writer unaware of the damage appends its new trial: the record is glued to the fragment,
    # Optuna trips over it, and from then on cannot read the journal at all.
    with pytest.raises(Exception):
        optuna.load_study(study_name="g", storage=journal(log)).optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    with pytest.raises(Exception):  # any later write makes the journal unreadable
        optuna.create_study(study_name="g2", storage=journal(log))
    with pytest.raises(Exception):
        optuna.load_study(study_name="g", storage=journal(log)).get_trials()

    from layersearch.study.storage import open_storage, storage_location

    messages: list[str] = []
    storage = open_storage(storage_location(f"journal:///{log}"), read_only=True)
    trials = optuna.load_study(study_name="g", storage=storage).get_trials(deepcopy=False)
    # Trial 1 lost its completion in the crash; the glued record (trial 2's creation) is kept.
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.RUNNING, TrialState.RUNNING]
    from layersearch.study.storage_safety import repair_journal

    repair_journal(log, log=messages.append)
    assert "bytes of a record cut off by an earlier crash" in messages[0]
    again = optuna.load_study(study_name="g", storage=journal(log)).get_trials(deepcopy=False)
    assert [t.state for t in again] == [t.state for t in trials] and [t.value for t in again] == [t.value for t in trials]
    assert set(optuna.get_all_study_names(journal(log))) == {"g", "g2"}


# ----- item 8: the storage fails under a run ------------------------------------------------------
def test_run_on_a_read_only_storage_is_refused_before_work(workdir, cli, create_args, monkeypatch):
    assert cli(*create_args("ro"))[0] == 0
    import layersearch.study.storage_safety as safety

    # Tests run as root here, which may write any file: make the permission check see what a user would.
    monkeypatch.setattr(safety.os, "access", lambda path, mode: not (mode & safety.os.W_OK))
    status, _, err = cli("study", "run", "--name", "ro", "--trials", "1", "--quiet")
    assert status == 2 and "read-only" in one_error_line(err)


def test_database_locked_mid_run_is_one_line_and_keeps_the_study(workdir, cli, create_args, monkeypatch):
    assert cli(*create_args("locked"))[0] == 0
    assert cli("study", "run", "--name", "locked", "--trials", "1", "--quiet")[0] == 0
    import layersearch.objectives as objectives_module
    import layersearch.study.storage as storage_module

    monkeypatch.setattr(storage_module, "SQLITE_LOCK_TIMEOUT", 0.2)
    holder = sqlite3.connect(workdir / "studies/locked.db", timeout=0, isolation_level=None, check_same_thread=False)
    real = objectives_module.make_objective

    def locking_objective(*args, **kwargs):
        objective = real(*args, **kwargs)
        evaluate = objective.evaluate

        def evaluate_then_lock(runtime, mask):
            score = evaluate(runtime, mask)
            holder.execute("BEGIN EXCLUSIVE")  # another process takes the database mid-trial
            threading.Timer(1.5, lambda: holder.execute("COMMIT")).start()
            return score

        monkeypatch.setattr(objective, "evaluate", evaluate_then_lock)
        return objective

    monkeypatch.setattr(objectives_module, "make_objective", locking_objective)  # run_study imports it per run
    status, _, err = cli("study", "run", "--name", "locked", "--trials", "3", "--quiet")
    assert status == 2, err
    line = one_error_line(err)
    assert "database is locked" in line and "completed trials are kept" in line and "SELECT" not in line
    import time

    time.sleep(2)
    holder.close()
    status, out, _ = cli("study", "show", "--name", "locked", "--json")
    assert status == 0 and '"COMPLETE": 1' in out
