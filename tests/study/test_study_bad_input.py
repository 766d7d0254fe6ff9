"""Bad input to the study and plot commands: one error line, exit status 2, no traceback, no file."""

from __future__ import annotations

import os

import pytest

STRATEGY, OBJECTIVE = "random", "time-per-token"


def check_one_error_line(status: int, out: str, err: str, *needles: str) -> None:
    assert status == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("layersearch: error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err


@pytest.mark.parametrize(
    "change, needles",
    [
        ({"--strategy": "simulated-annealing"}, ("unknown strategy", "selfsd-bo", "swift")),
        ({"--objective": "speed"}, ("unknown objective", "matchness", "time-per-token")),
        ({"--domain": "poetry"}, ("unknown domain", "summarization")),
        ({"--strategy": "selfsd-bo", "--skip-ratio": "0.3"}, ("takes no skip ratio",)),
        ({"--skip-ratio": "1.5"}, ("--skip-ratio",)),
        ({"--samples": "0"}, ("samples",)),
        ({"--name": "no/slash"}, ("invalid study name",)),
        ({"--storage": "postgresql://nobody@127.0.0.1:1/x"}, ("cannot open storage postgresql://nobody@127.0.0.1:1/x",)),
        ({"--storage": "sqlite:///missing/dir/x.db"}, ("directory missing/dir does not exist",)),
        ({"--storage": "journal:///missing/x.log"}, ("directory missing does not exist",)),
        ({"--storage": "redis-ish"}, ("unsupported storage",)),
        ({"--model": "/no/such/model/dir"}, ("cannot load model",)),
        ({"--profile": "absent.json"}, ("profile file not found",)),
    ],
)
def test_bad_create(workdir, cli, create_args, listing, change, needles):
    argv = create_args("bad", STRATEGY, OBJECTIVE)
    for flag, value in change.items():
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    status, out, err = cli(*argv)
    check_one_error_line(status, out, err, *needles)
    assert listing(workdir) == set()  # not even the default studies/ folder


def test_unwritable_storage_location(workdir, cli, create_args, listing):
    (workdir / "afile").write_text("x")
    before = listing(workdir)
    status, out, err = cli(*create_args("bad", STRATEGY, OBJECTIVE, "--storage", "sqlite:///afile/x.db"))
    check_one_error_line(status, out, err, "afile is not a directory")
    if os.geteuid() != 0:  # root may write anywhere
        (workdir / "ro").mkdir(mode=0o555)
        status, out, err = cli(*create_args("bad", STRATEGY, OBJECTIVE, "--storage", "sqlite:///ro/x.db"))
        check_one_error_line(status, out, err, "not writable")
        (workdir / "ro").rmdir()
    assert listing(workdir) == before


@pytest.mark.parametrize(
    "argv, needles",
    [
        (("study", "run", "--name", "ghost"), ("no study named 'ghost'",)),
        (("study", "show", "--name", "ghost"), ("no study named 'ghost'",)),
        (("study", "export", "--name", "ghost", "--out", "m.json"), ("no study named 'ghost'",)),
        (("study", "compare", "--names", "ghost"), ("no study named 'ghost'",)),
        (("plot", "history", "--name", "ghost"), ("no study named 'ghost'",)),
        (("plot", "compare", "--names", "ghost", "other"), ("no study named 'ghost'",)),
        (("study", "show", "--name", "ghost", "--storage", "postgresql://nobody@127.0.0.1:1/x"), ("cannot open storage",)),
        (("study", "run", "--name", "ghost", "--storage", "journal:///nowhere.log"), ("does not exist",)),
        (("study", "list", "--storage", "sqlite:///nowhere.db"), ("does not exist",)),
        (("plot", "mask", "absent.json"), ("mask file not found",)),
    ],
)
def test_missing_study_or_storage(workdir, cli, listing, argv, needles):
    status, out, err = cli(*argv)
    check_one_error_line(status, out, err, *needles)
    assert listing(workdir) == set()


def test_existing_study_problems(workdir, cli, create_args, listing):
    assert cli(*create_args("e", STRATEGY, OBJECTIVE))[0] == 0
    before = listing(workdir)
    cases = [
        (create_args("e", STRATEGY, OBJECTIVE, "--seed", "7"), ("already exists", "different settings", "seed")),
        (("study", "export", "--name", "e", "--out", "m.json"), ("no completed trial",)),
        (("study", "export", "--name", "e", "--trial", "3", "--out", "m.json"), ("no trial 3",)),
        (("study", "export", "--name", "e", "--trial", "last", "--out", "m.json"), ("--trial must be",)),
        (("study", "compare", "--names", "e", "--out-prefix", "cmp"), ("no completed trial",)),
        (("plot", "history", "--name", "e"), ("no completed trial",)),
        (("study", "run", "--name", "e", "--trials", "0"), ("--trials must be an integer >= 1",)),
        (("study", "run", "--name", "e", "--timeout", "-1"), ("--timeout must be > 0",)),
    ]
    for argv, needles in cases:
        status, out, err = cli(*argv)
        check_one_error_line(status, out, err, *needles)
    assert listing(workdir) == before  # no mask, table or plot written
