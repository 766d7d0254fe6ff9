"""Storage safety: reading never creates or migrates anything, and a damaged journal is recovered.

- :func:`check_optuna_storage`: before Optuna opens a storage (which creates its tables in any
  database it is given), check that the file or database really is an Optuna storage: reading
  commands refuse anything else; writing commands refuse another application's database
  (an empty or new one is fine).
- Journal files (:class:`JournalDamage`): a crash or a full disk mid-write leaves the last
  record cut off; Optuna's next append then glues a complete record onto the fragment, and
  from then on the journal cannot be read. Every complete record is kept: a cut-off last line
  is dropped, and a fragment glued in front of a complete record is cut away. Writing commands
  repair the file (the original is kept beside it as ``<file>.damaged-<time>``); reading
  commands read a repaired copy in memory and change nothing.
- :func:`check_run_writable`: a run needs to write trials; a read-only storage file is
  reported before the model loads, not as a traceback mid-run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from layersearch.common.errors import LayersearchError

#: Tables every Optuna RDB storage has (optuna/storages/_rdb/models.py).
OPTUNA_TABLES = ("studies", "version_info")
_SQLITE_MAGIC = b"SQLite format 3\x00"
_RECORD_START = b'{"op_code":'


def driver_text(exc: BaseException) -> str:
    """The database's own words for ``exc``, on one line: SQLAlchemy's SQL text, parameters and
    "Background on this error" links left out (they help a developer, not a user)."""
    orig = getattr(exc, "orig", None)
    text = str(orig) if orig is not None and str(orig).strip() else str(exc)
    text = re.sub(r"\[SQL: .*?\](?=\s|$)|\[parameters: .*?\](?=\s|$)|\(Background on this error at: [^)]*\)", "", text, flags=re.S)
    return " ".join(text.split())


# ----- is it an Optuna storage? --------------------------------------------------------------
def check_optuna_storage(location: Any, *, write: bool) -> None:
    """Raise unless ``location`` may be opened by Optuna without changing what is not ours."""
    if location.kind == "sqlite":
        _check_sqlite(location, write=write)
    elif location.kind == "journal":
        _check_journal_file(location)
    elif location.kind == "rdb" and not write:
        _check_rdb_tables(location)


def _check_sqlite(location: Any, *, write: bool) -> None:
    path: Path = location.path
    if not path.exists():
        return  # reading: reported by the caller; writing: a new file
    if path.is_dir():
        raise LayersearchError(f"storage {location.url}: {path} is a directory")
    if not path.is_file():  # a FIFO or device: opening it would wait, and SQLite cannot use it
        raise LayersearchError(f"storage {location.url}: {path} is not a regular file")
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise LayersearchError(f"cannot read storage {location.url}: {exc.strerror}") from None
    if not head:
        if write:
            return  # an empty file is an empty database: Optuna sets it up
        raise LayersearchError(f"storage {location.url} is an empty file, not an Optuna storage")
    if head != _SQLITE_MAGIC:
        raise LayersearchError(f"storage {location.url}: {path} is not an SQLite database")
    tables = _sqlite_tables(path, location.url)
    if not tables and write:
        return
    missing = [t for t in OPTUNA_TABLES if t not in tables]
    if missing:
        raise LayersearchError(
            f"storage {location.url} is an SQLite database of another application (no Optuna tables {', '.join(missing)}); "
            "layersearch leaves it untouched: choose another file"
        )


def _sqlite_tables(path: Path, url: str) -> set[str]:
    """Table names of an SQLite file, read through a read-only connection (nothing written)."""
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            rows = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        finally:
            connection.close()
    except sqlite3.Error as exc:
        raise LayersearchError(f"cannot read storage {url}: {' '.join(str(exc).split())}") from None
    return {row[0] for row in rows}


def _check_rdb_tables(location: Any) -> None:
    """A database server: reading needs Optuna's tables there (Optuna would create them)."""
    try:
        import sqlalchemy

        engine = sqlalchemy.create_engine(getattr(location, "connect_url", "") or location.url)
        try:
            names = set(sqlalchemy.inspect(engine).get_table_names())
        finally:
            engine.dispose()
    except ImportError:
        return  # the driver is missing: open_storage names the package to install
    except Exception:
        return  # unreachable server, bad credentials...: open_storage reports them in its words
    missing = [t for t in OPTUNA_TABLES if t not in names]
    if missing:
        raise LayersearchError(f"storage {_safe_url(location.url)} holds no Optuna storage (no tables {', '.join(missing)})")


def _safe_url(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url


def _check_journal_file(location: Any) -> None:
    """A journal file is opened (and, after a crash, repaired) only when it is empty or new, or
    when its records prove it is Optuna's: a log of another program, a text or binary file that
    merely ends in ``.log`` is left untouched."""
    from layersearch.common.inputs import open_input

    path: Path = location.path
    if not path.exists():
        return
    if not path.is_file():
        raise LayersearchError(f"storage {location.url}: {path} is not a regular file")
    try:
        with open_input(path, "storage") as handle:
            data = handle.read()
    except OSError as exc:
        raise LayersearchError(f"cannot read storage {location.url}: {exc.strerror}") from None
    problem = journal_problem(data)
    if problem is not None:
        raise LayersearchError(
            f"storage {location.url}: {path} is not an Optuna journal ({problem}); layersearch leaves it untouched: "
            "choose another file (or an empty or new one)"
        )


def journal_problem(data: bytes) -> str | None:
    """Why ``data`` is not an Optuna journal file, None when it is one (or empty).

    Optuna writes one JSON object per line, each starting ``{"op_code":``; a crash can only cut a
    record short (and the next append glue a record onto the fragment). So every line must start
    as a record, every line that parses must be a record, and at least one must be complete:
    anything else was written by something else, and "repairing" it would destroy it.
    """
    if not data:
        return None
    complete = 0
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        if not line.startswith(_RECORD_START):
            return f"line {number} is not a journal record"
        try:
            record = json.loads(line)
        except ValueError:
            # A record cut off by a crash (repairable), or a complete one glued onto such a fragment.
            start = line.rfind(_RECORD_START)
            complete += start > 0 and _parses(line[start:])
            continue
        if not isinstance(record, dict) or not isinstance(record.get("op_code"), int):
            return f"line {number} is not a journal record"
        complete += 1
    if complete == 0:
        return "it holds no complete journal record"
    return None


def check_run_writable(location: Any) -> None:
    """Raise when a storage file cannot take the trials a run writes (read-only file or folder)."""
    if location.path is None or not location.path.exists():
        return
    if not os.access(location.path, os.W_OK):
        raise LayersearchError(f"storage {location.url} is read-only: a run needs to write its trials there")
    if not os.access(location.path.parent, os.W_OK | os.X_OK):
        # SQLite keeps its rollback journal beside the file; the journal storage its lock.
        raise LayersearchError(
            f"storage {location.url}: folder {location.path.parent} is read-only: a run needs to write there"
        )


# ----- journal recovery ----------------------------------------------------------------------
@dataclass(frozen=True)
class JournalDamage:
    """What recovery would change in a journal file: the repaired bytes and what they drop."""

    repaired: bytes
    dropped: tuple[str, ...]  # one description per dropped piece

    def describe(self) -> str:
        """One line for the user."""
        return "; ".join(self.dropped)


def find_damage(data: bytes) -> JournalDamage | None:
    """The repair of a journal's bytes, or None when every line is a complete record."""
    if not data:
        return None
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    kept: list[bytes] = []
    dropped: list[str] = []
    for number, line in enumerate(lines, 1):
        if not line.strip() or _parses(line):
            kept.append(line)
            continue
        start = line.rfind(_RECORD_START)
        while start > 0 and not _parses(line[start:]):
            start = line.rfind(_RECORD_START, 0, start)
        if start > 0:
            kept.append(line[start:])
            dropped.append(f"line {number}: {start} bytes of a record cut off by an earlier crash")
        else:
            # Not a record and nothing complete in it: no reader ever applied it.
            dropped.append(f"line {number}: an unreadable record ({len(line)} bytes)")
    if tail:
        dropped.append(f"the cut-off last record ({len(tail)} bytes)")
    if not dropped:
        return None
    return JournalDamage(b"".join(line + b"\n" for line in kept), tuple(dropped))


def _parses(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def repair_journal(path: Path, *, log: Callable[[str], None]) -> None:
    """Repair a damaged journal file in place under Optuna's journal lock, keeping a backup."""
    from optuna.storages.journal import JournalFileSymlinkLock

    lock = JournalFileSymlinkLock(str(path))
    _acquire(lock, path)
    try:
        damage = find_damage(path.read_bytes())
        if damage is None:
            return
        backup = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.copy2(path, backup)
        tmp = path.with_name(f".{path.name}.repair.tmp")
        tmp.write_bytes(damage.repaired)
        shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise LayersearchError(f"cannot repair journal {path}: {exc.strerror}") from None
    finally:
        lock.release()
    log(f"layersearch: warning: journal {path} was damaged by a crash: dropped {damage.describe()}; "
        f"every complete record is kept; the original is saved as {backup}")


def _acquire(lock: Any, path: Path) -> None:
    """Optuna's lock waits for the holder (and breaks a lock older than its grace period)."""
    if not lock.acquire():
        raise LayersearchError(f"journal {path} is locked by another process (its lock file {path}.lock); retry")


class RepairedJournalBackend:
    """A read-only journal backend over the repaired records of a damaged file (nothing written)."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        self._records = records

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        """Records from ``log_number_from`` on."""
        yield from self._records[log_number_from:]

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        """Reading commands never write."""
        raise LayersearchError("this command only reads the journal")


def open_journal(path: Path, *, read_only: bool, log: Callable[[str], None]) -> Any:
    """An Optuna JournalStorage over ``path``, recovered from a crash's damage if needed."""
    from optuna.storages.journal import BaseJournalBackend, JournalFileBackend, JournalStorage

    damage = find_damage(path.read_bytes()) if path.exists() else None
    if damage is not None and read_only:
        records = [json.loads(line) for line in damage.repaired.splitlines() if line.strip()]
        backend = type("_Repaired", (RepairedJournalBackend, BaseJournalBackend), {})(records)
        log(f"layersearch: warning: journal {path} was damaged by a crash ({damage.describe()}); "
            "reading the complete records (the next study run repairs the file)")
        return JournalStorage(backend)
    if damage is not None:
        repair_journal(path, log=log)
    return JournalStorage(JournalFileBackend(str(path)))
