"""Connection failures and missing drivers on PostgreSQL URLs: one ``layersearch: error:`` line,
exit status 2, no traceback, no file created locally and no table on the server.

Unreachable server (a closed port), wrong password, missing database, and the two drivers
absent: ``postgresql://`` needs psycopg (3), ``postgresql+psycopg2://`` needs psycopg2. A
missing driver is simulated by ``sys.modules[name] = None``, which makes ``import name`` fail
exactly as it does where the package is not installed.
"""

from __future__ import annotations

import socket
import sys

import pytest

# (command, whether it would create the storage): a writer, a runner and a reader.
COMMANDS = {
    "create": lambda create_args, url: create_args("e", "random", "time-per-token", "--storage", url),
    "run": lambda create_args, url: ["study", "run", "--name", "e", "--storage", url, "--trials", "1"],
    "show": lambda create_args, url: ["study", "show", "--name", "e", "--storage", url],
}


def check_one_error_line(status: int, out: str, err: str, *needles: str) -> None:
    assert status == 2, (status, out, err)
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("layersearch: error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err


WRONG_PASSWORD = "not-the-pw-42"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def bad_url(postgres, case: str) -> tuple[str, tuple[str, ...]]:
    """The URL of a failure ``case`` and what its message must say."""
    if case == "closed port":
        port = closed_port()
        return (f"postgresql://layersearch:{WRONG_PASSWORD}@127.0.0.1:{port}/x",
                (f"cannot open storage postgresql://layersearch:***@127.0.0.1:{port}/x", "Connection refused"))
    if case == "wrong password":
        return (postgres.url("postgres", password=WRONG_PASSWORD),
                ("cannot open storage", 'password authentication failed for user "layersearch"'))
    return (postgres.url("no_such_db"), ("cannot open storage", 'database "no_such_db" does not exist'))


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("case", ["closed port", "wrong password", "missing database"])
def test_connection_failures(postgres, workdir, cli, create_args, listing, case, command):
    url, needles = bad_url(postgres, case)
    status, out, err = cli(*COMMANDS[command](create_args, url))
    check_one_error_line(status, out, err, *needles)
    assert WRONG_PASSWORD not in err  # passwords are never shown
    assert listing(workdir) == set()  # not even the default studies/ folder
    assert postgres.tables("postgres") == []  # nothing written in the database it did reach


@pytest.mark.parametrize(
    "driver, module, package",
    [("", "psycopg", 'pip install "psycopg[binary]" (or pip install "layersearch[postgres]")'),
     ("psycopg2", "psycopg2", 'pip install "psycopg2-binary"')],
    ids=["postgresql", "postgresql+psycopg2"],
)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_missing_driver_names_its_package(postgres, database, workdir, cli, create_args, listing, monkeypatch,
                                          driver, module, package, command):
    name = database.rsplit("/", 1)[1]
    url = postgres.url(name, driver=driver)
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, module, None)  # import psycopg[2] now fails as if not installed
        status, out, err = cli(*COMMANDS[command](create_args, url))
    check_one_error_line(status, out, err, f"the database driver {module} is not installed: {package}")
    assert listing(workdir) == set()
    assert postgres.tables(name) == []


def test_psycopg2_url_works_with_psycopg2(postgres, database, workdir, cli, create_args, listing):
    pytest.importorskip("psycopg2", reason="psycopg2 not installed")
    name = database.rsplit("/", 1)[1]
    url = postgres.url(name, driver="psycopg2")
    status, out, err = cli(*COMMANDS["create"](create_args, url))
    assert status == 0, err
    assert "study e" in out and "s3cret" not in out
    status, out, err = cli("study", "show", "--name", "e", "--storage", url)
    assert status == 0 and "trials     0" in out, (out, err)
    assert "studies" in postgres.tables(name) and listing(workdir) == set()
