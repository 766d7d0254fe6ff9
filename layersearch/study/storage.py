"""Where studies live: study names, storage URLs, opening a storage and loading a study.

Default ``sqlite:///studies/<name>.db``; any SQLAlchemy URL Optuna accepts (PostgreSQL,
MySQL...); a journal file as ``journal:///relative/path.log``, ``journal:////absolute/path.log``
(the sqlite URL convention) or a plain path ending in ``.log``; a plain path ending in ``.db``
is sqlite. Reading commands never create a storage file, nor Optuna's tables in a database.
RDB storages opened for a run get Optuna's heartbeat.

Database URLs (``postgresql://user:password@host/db``) are shown with the password hidden;
connection failures (server unreachable, wrong credentials, missing database) and a missing
driver become one :class:`LayersearchError` line.
"""

from __future__ import annotations

import os
import re
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from layersearch.common.errors import LayersearchError
from layersearch.study.settings import SETTINGS_ATTR, StudySettings


STUDIES_DIR = Path("studies")

#: Heartbeat of RDB storages during ``run``: seconds between beats; a trial whose worker has
#: not beaten for ``grace = 3 x interval`` seconds is failed by the next worker that starts one.
DEFAULT_HEARTBEAT = 10
HEARTBEAT_GRACE_FACTOR = 3


def heartbeat_seconds(given: int | None, what: str = "heartbeat (seconds)") -> int:
    """A run's heartbeat interval: ``given`` checked (an integer >= 1), :data:`DEFAULT_HEARTBEAT` for None."""
    from layersearch.common.checks import check_int

    return check_int(DEFAULT_HEARTBEAT if given is None else given, what)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
#: Longest study name: it becomes a file name (``studies/<name>.db``, at most 255 bytes).
MAX_NAME_LENGTH = 128


@dataclass(frozen=True)
class StorageLocation:
    """Where a study lives: ``kind`` is "sqlite", "journal" or "rdb"; ``path`` for file kinds.

    ``url`` is for people (messages, mask provenance): its password is hidden.
    ``connect_url`` (the URL as given) is the one that connects.
    """

    url: str
    kind: str
    path: Path | None = None
    default: bool = False
    connect_url: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if not self.connect_url:
            object.__setattr__(self, "connect_url", self.url)

    def exists(self) -> bool:
        """False only when the storage surely holds nothing: its file is absent, or the
        database (connected to) has no Optuna tables."""
        if self.kind == "rdb":
            return _database_has_studies(self)
        return self.path is None or self.path.exists()

    def check_creatable(self, *, make_dirs: bool = False) -> None:
        """Raise unless the storage file can be created.

        The default folder ``studies/`` may be missing: ``make_dirs`` creates it (done only
        when the storage is really opened, so rejected input leaves no folder behind).
        """
        if self.path is None or self.path.exists():
            if self.path is not None and not os.access(self.path, os.R_OK | os.W_OK):
                raise LayersearchError(f"cannot open storage {self.url}: {self.path} is not writable")
            return
        parent = self.path.parent
        if self.default and not parent.exists():
            if not make_dirs:
                return
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise LayersearchError(f"cannot create {parent}: {exc.strerror}") from None
        if not parent.exists():
            raise LayersearchError(f"cannot open storage {self.url}: directory {parent} does not exist")
        if not parent.is_dir():
            raise LayersearchError(f"cannot open storage {self.url}: {parent} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise LayersearchError(f"cannot open storage {self.url}: directory {parent} is not writable")


def default_storage_url(name: str) -> str:
    """``sqlite:///studies/<name>.db``."""
    return f"sqlite:///{STUDIES_DIR / (check_name(name) + '.db')}"


def check_name(name: str) -> str:
    """A study name: letters, digits and ``._+-``, starting with a letter or digit."""
    if isinstance(name, str) and len(name) > MAX_NAME_LENGTH:
        raise LayersearchError(f"study name is {len(name)} characters long (at most {MAX_NAME_LENGTH})")
    if not isinstance(name, str) or not _NAME.match(name):
        raise LayersearchError(
            f"invalid study name {name!r}: use letters, digits and ._+- (starting with a letter or digit)"
        )
    return name


def storage_location(url: str | None, name: str | None = None) -> StorageLocation:
    """Parse a ``storage`` URL (None: the default sqlite file of study ``name``)."""
    if url is None:
        if name is None:
            raise LayersearchError("no storage given and no study name to derive the default from")
        return StorageLocation(default_storage_url(name), "sqlite", STUDIES_DIR / f"{name}.db", default=True)
    url = url.strip()
    if not url:
        raise LayersearchError("empty storage", fields="storage")
    if url.startswith("journal:"):
        rest = url[len("journal:") :]
        if not rest.startswith("///") or len(rest) == 3:
            raise LayersearchError(f"journal storage must look like journal:///path.log, got {url!r}")
        return StorageLocation(url, "journal", Path(rest[3:]))
    if url.startswith("sqlite:"):
        rest = url[len("sqlite:") :]
        if not rest.startswith("///") or len(rest) == 3 or rest == "///:memory:":
            raise LayersearchError(f"sqlite storage must name a file, like sqlite:///studies/x.db, got {url!r}")
        return StorageLocation(url, "sqlite", Path(rest[3:]))
    if "://" in url:
        return StorageLocation(_hide_password(url), "rdb", connect_url=url)
    if url.endswith(".log"):
        return StorageLocation(url, "journal", Path(url))
    if url.endswith((".db", ".sqlite", ".sqlite3")):
        return StorageLocation(f"sqlite:///{url}", "sqlite", Path(url))
    raise LayersearchError(
        f"unsupported storage {url!r}: give an Optuna storage URL (sqlite:///x.db, postgresql://...), "
        "journal:///x.log or a path ending in .db or .log"
    )


def open_storage(
    location: StorageLocation, *, create: bool = False, heartbeat: int | None = None, read_only: bool = False
) -> Any:
    """An Optuna storage for ``location``; with ``create=False`` a missing file is an error.

    ``heartbeat`` (seconds) turns on Optuna's heartbeat for RDB storages. ``read_only``:
    the command only reads, so nothing may be created, migrated or repaired (see
    :mod:`layersearch.study.storage_safety`).
    """
    import optuna

    from layersearch.study.storage_safety import check_optuna_storage, open_journal

    if create:
        location.check_creatable(make_dirs=True)
    elif not location.exists():
        if location.kind == "rdb":
            raise LayersearchError(f"storage {location.url} holds no Optuna studies")
        raise LayersearchError(f"storage {location.url} does not exist (no file {location.path})")
    check_optuna_storage(location, write=not read_only)
    with _storage_errors(location), quiet_warnings():
        if location.kind == "journal":
            if location.path is None:
                raise LayersearchError(f"storage {location.url} names no journal file")
            return open_journal(location.path, read_only=read_only, log=_warn)
        kwargs: dict[str, Any] = {}
        engine_kwargs = _engine_kwargs(location.connect_url)
        if location.kind == "sqlite":
            # Wait for another process's write lock rather than fail after SQLite's 5 s default.
            engine_kwargs = {"connect_args": {"timeout": SQLITE_LOCK_TIMEOUT}}
        if heartbeat is not None:
            kwargs.update(heartbeat_interval=int(heartbeat), grace_period=int(heartbeat) * HEARTBEAT_GRACE_FACTOR)
        return _rdb_storage(location.connect_url, engine_kwargs, kwargs)


#: What a database says when another process created the same Optuna tables a moment before.
_SCHEMA_RACE = ("already exists", "unique constraint failed", "duplicate key")


def _rdb_storage(url: str, engine_kwargs: dict[str, Any], kwargs: dict[str, Any], attempts: int = 5) -> Any:
    """Optuna's RDBStorage; two processes creating its tables at once (two ``study create`` on a new
    file) race, and the loser opens the tables the winner made instead of failing on them."""
    import time

    import optuna

    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, **kwargs)
        except Exception as exc:
            if attempt == attempts - 1 or not any(text in str(exc).lower() for text in _SCHEMA_RACE):
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


#: pip package of each SQLAlchemy driver (``make_url(url).get_dialect().driver``).
_DRIVER_PACKAGES = {
    "psycopg": "psycopg[binary]",
    "psycopg2": "psycopg2-binary",
    "pg8000": "pg8000",
    "asyncpg": "asyncpg",
    "pymysql": "PyMySQL",
    "mysqldb": "mysqlclient",
    "mysqlconnector": "mysql-connector-python",
    "mariadbconnector": "mariadb",
}

#: Seconds a PostgreSQL connection attempt may take (libpq waits for the OS's TCP timeout,
#: minutes, when a host does not answer); a ``connect_timeout`` in the URL wins.
CONNECT_TIMEOUT = 10


def _database_has_studies(location: StorageLocation) -> bool:
    """Whether the database holds Optuna's tables (so reading creates none in a foreign one)."""
    import sqlalchemy

    with _storage_errors(location):
        engine = sqlalchemy.create_engine(location.connect_url, **_engine_kwargs(location.connect_url))
        try:
            return sqlalchemy.inspect(engine).has_table("studies")
        finally:
            engine.dispose()


def _engine_kwargs(url: str) -> dict[str, Any]:
    """SQLAlchemy engine arguments: a connect timeout for PostgreSQL drivers."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
        if parsed.get_driver_name() in ("psycopg", "psycopg2"):
            return {"connect_args": {"connect_timeout": CONNECT_TIMEOUT}}
    return {}


@contextmanager
def _storage_errors(location: StorageLocation) -> Iterator[None]:
    """Turn what opening a storage may raise into one LayersearchError line."""
    try:
        yield
    except LayersearchError:
        raise
    except ImportError as exc:
        # SQLAlchemy needs a driver per database; name the package that makes this URL work.
        raise LayersearchError(f"cannot open storage {location.url}: {_missing_driver(location, exc)}") from None
    except Exception as exc:  # a server unreachable, wrong credentials, a file that is no database...
        raise LayersearchError(f"cannot open storage {location.url}: {_connection_problem(exc)}") from None


def _missing_driver(location: StorageLocation, exc: ImportError) -> str:
    from sqlalchemy.engine import make_url

    try:
        driver = make_url(location.connect_url).get_dialect().driver
    except Exception:
        driver = None
    package = _DRIVER_PACKAGES.get(driver or "")
    if package is None:
        return f"its database driver is not installed ({one_line(exc)})"
    hint = ' (or pip install "layersearch[postgres]")' if driver == "psycopg" else ""
    return f'the database driver {driver} is not installed: pip install "{package}"{hint}'


def _connection_problem(exc: BaseException) -> str:
    """The driver's own words for a connection failure, without SQLAlchemy's wrapping."""
    orig = getattr(exc, "orig", None)  # sqlalchemy.exc.DBAPIError wraps the driver's error
    if orig is None:
        return one_line(exc)
    lines = [" ".join(line.split()) for line in str(orig).splitlines()]
    text = "; ".join(line for line in lines if line)
    # libpq repeats the address we already show: 'connection to server at "h" (ip), port p failed:'
    text = re.sub(r'^(connection failed: )?connection to server at "[^"]*"( \([^)]*\))?, port \d+ failed: ', "", text)
    text = re.sub(r"^(FATAL|ERROR): +", "", text)
    text = text or type(orig).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _hide_password(url: str) -> str:
    """``url`` with its password replaced by ``***`` (unchanged when it does not parse)."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:
        return url
    return parsed.render_as_string(hide_password=True) if parsed.password else url


#: Seconds a command waits for another process's lock on an SQLite storage.
SQLITE_LOCK_TIMEOUT = 60


def _warn(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)


def load_study(name: str, *, storage: str | None = None) -> Any:
    """The Optuna study ``name`` (for plots); clear errors for a missing storage or study."""
    return open_study(name, storage, read_only=True, tune_ok=True)[0]


def open_study(name: str, storage_url: str | None, *, heartbeat: int | None = None, sampler: Any = None, read_only: bool = False,
               tune_ok: bool = False):
    """(study, settings, location, storage) of an existing layersearch study; clear errors otherwise.

    ``read_only``: the caller only reads (nothing is created, migrated or repaired);
    otherwise the storage must be writable. ``tune_ok``: a ``tune`` study is read too, its
    settings None (the caller reads its trials); otherwise it is refused naming ``tune``.
    """
    import optuna

    from layersearch.study.storage_safety import check_optuna_storage, check_run_writable

    check_name(name)
    location = storage_location(storage_url, name)
    if not location.exists():
        if location.kind == "rdb":
            raise LayersearchError(f"no study named {name!r} in {location.url} (it holds no Optuna studies)")
        raise LayersearchError(f"no study named {name!r}: {location.path} does not exist")
    # The study must already be there: even a writer may not set up a storage in a file that
    # is not one (an empty file, another application's database).
    check_optuna_storage(location, write=False)
    if not read_only:
        check_run_writable(location)
    storage = open_storage(location, heartbeat=heartbeat, read_only=read_only)
    try:
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    except KeyError:
        raise LayersearchError(f"no study named {name!r} in {location.url}") from None
    settings = _settings_of(study, location, tune_ok)
    return study, settings, location, storage


def _settings_of(study: Any, location: StorageLocation, tune_ok: bool = False) -> StudySettings | None:
    from layersearch.study.settings import TUNE_ATTR

    data = study.user_attrs.get(SETTINGS_ATTR)
    if data is None and TUNE_ATTR in study.user_attrs:  # our own tune's study: its trials are decoder specs
        if tune_ok:
            return None
        raise LayersearchError(f"study {study.study_name!r} in {location.url} is a tune study: tune resumes it "
                               "(the same name); show, list, export and plot read it")
    if data is None:
        raise LayersearchError(f"study {study.study_name!r} in {location.url} has no layersearch settings (another tool's study?)")
    try:
        settings = StudySettings.from_dict(data)
    except LayersearchError as exc:
        raise LayersearchError(f"study {study.study_name!r} in {location.url} was not made by layersearch ({exc})") from None
    from dataclasses import replace

    from layersearch.strategies.space import stored_space

    # A plans study made before int4 keeps its two-precision categoricals (Optuna cannot change them).
    return replace(settings, space=stored_space(study, settings.space))


@contextmanager
def quiet_warnings() -> Iterator[None]:
    """Hide Optuna's ExperimentalWarning (heartbeat, journal) from users."""
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield


def one_line(exc: BaseException) -> str:
    """An exception as one short line for an error message."""
    from layersearch.study.storage_safety import driver_text

    text = driver_text(exc) or type(exc).__name__
    text = f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text
    return text if len(text) <= 200 else text[:197] + "..."
