"""A private PostgreSQL server for the storage tests, started once per test session.

Debian's ``postgresql`` package provides the server binaries (``.ci/run`` installs it when
missing); ``initdb`` makes a cluster in a temporary folder and ``pg_ctl`` starts it on a free
loopback port with password (scram) authentication, and stops it at the end. PostgreSQL
refuses to run as root, so as root the server runs as the package's ``postgres`` user. The
tests skip, saying why, only where no server binaries are installed.
"""

from __future__ import annotations

import glob
import hashlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

USER = "layersearch"
PASSWORD = "s3cret-pw"
SERVER_USER = "postgres"  # created by Debian's package; the server's owner when tests run as root


@dataclass(frozen=True)
class PostgresServer:
    """A running private cluster: where it listens and how to reach its databases."""

    host: str
    port: int
    folder: Path

    def url(self, database: str, *, driver: str = "", password: str = PASSWORD, user: str = USER) -> str:
        """``postgresql[+driver]://user:password@host:port/database``."""
        scheme = f"postgresql+{driver}" if driver else "postgresql"
        return f"{scheme}://{user}:{password}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new empty database ``name``; returns its URL."""
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def tables(self, database: str) -> list[str]:
        """Names of the tables in ``database``'s public schema."""
        import psycopg

        with psycopg.connect(self.url(database)) as connection:
            rows = connection.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            ).fetchall()
        return sorted(row[0] for row in rows)


def server_binaries() -> Path | None:
    """The folder holding initdb and pg_ctl (PATH first, then Debian's newest version)."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(versions[-1]).parent if versions else None


def free_port() -> int:
    """A loopback port the OS reports free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_server_user() -> dict[str, Any]:
    """subprocess arguments running a command as the unprivileged server user when we are root."""
    if os.geteuid() != 0:
        return {}
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        pytest.skip(f"running as root and no {SERVER_USER!r} user to run PostgreSQL as (install postgresql)")
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": [],
            "env": {**os.environ, "HOME": entry.pw_dir, "USER": SERVER_USER}}


def _run(command: list[str], log: Path, **kwargs: Any) -> None:
    with log.open("ab") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=120, **kwargs)
    if done.returncode != 0:
        pytest.fail(f"{Path(command[0]).name} failed ({done.returncode}):\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A private PostgreSQL cluster on a free loopback port for the whole session."""
    pytest.importorskip("psycopg", reason='psycopg not installed: pip install -e ".[postgres]"')
    binaries = server_binaries()
    if binaries is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install postgresql")
    as_server = _as_server_user()
    folder = Path(tempfile.mkdtemp(prefix="layersearch-pg-"))
    log = folder / "server.log"
    try:
        (folder / "password").write_text(PASSWORD + "\n")
        if as_server:  # the server user must own its folder (mkdtemp made it root's, mode 0700)
            for path in (folder, folder / "password"):
                os.chown(path, as_server["user"], as_server["group"])
        _run([str(binaries / "initdb"), "-D", str(folder / "data"), "-U", USER, f"--pwfile={folder / 'password'}",
              "--auth-host=scram-sha-256", "--auth-local=scram-sha-256", "-E", "UTF8", "--no-sync"],
             folder / "initdb.log", cwd=folder, **as_server)
        port = free_port()
        # Only TCP on loopback, the socket file in our folder; no fsync: test data is disposable.
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {folder} -c fsync=off -c max_connections=100"
        _run([str(binaries / "pg_ctl"), "-D", str(folder / "data"), "-l", str(log), "-w", "-t", "60",
              "-o", options, "start"], folder / "pg_ctl.log", cwd=folder, **as_server)
        try:
            yield PostgresServer("127.0.0.1", port, folder)
        finally:
            subprocess.run([str(binaries / "pg_ctl"), "-D", str(folder / "data"), "-m", "immediate", "-w", "stop"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60, cwd=folder, **as_server)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def database(postgres, request) -> str:
    """The URL of a fresh database named after the test."""
    readable = "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:40]
    # PostgreSQL cuts names at 63 bytes: a digest keeps long parametrized names apart.
    name = f"t_{readable}_{hashlib.sha1(request.node.name.encode()).hexdigest()[:10]}"
    return postgres.create_database(name)
