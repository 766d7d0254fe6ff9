"""Study commands end to end on a tiny model directory: create, run, resume, show, list,
export, compare, journal storage, strategies' stop rules, plots and head-to-head."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import optuna
import pytest

from layersearch.masks.mask import PROVENANCE_KEYS, SkipMask
from layersearch.objectives import TRIAL_ATTRS

optuna.logging.set_verbosity(optuna.logging.WARNING)


def load(name: str, storage: str | None = None) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=storage or f"sqlite:///studies/{name}.db")


def states(study: optuna.Study) -> list[str]:
    return [t.state.name for t in study.get_trials(deepcopy=False)]


def test_create_run_resume_show_list_export(workdir, cli, create_args, tiny_info):
    status, out, err = cli(*create_args("a"))
    assert status == 0, err
    assert "created study a in sqlite:///studies/a.db" in out
    study = load("a")
    settings = study.user_attrs["settings"]
    assert settings["strategy"] == "random" and settings["domain"] == "translation"
    assert settings["model_info"]["fingerprint"] == tiny_info.fingerprint
    assert settings["profile"]["kind"] == "latency-profile"

    status, out, err = cli("study", "run", "--name", "a", "--trials", "3", "--quiet")
    assert status == 0, err
    assert "ran 3 trial(s)" in out and err.strip() == ""  # stderr not a terminal: no progress output
    status, out, _ = cli("study", "run", "--name", "a", "--trials", "2")
    assert status == 0 and "5 complete of 5" in out
    study = load("a")
    assert states(study) == ["COMPLETE"] * 5
    assert [t.number for t in study.trials] == [0, 1, 2, 3, 4]
    for trial in study.trials:
        assert set(TRIAL_ATTRS) <= set(trial.user_attrs)
        assert trial.user_attrs["mask"] == SkipMask.from_flat([trial.params[k] for k in sorted(trial.params, key=_order)]).short_string()

    status, out, _ = cli("study", "show", "--name", "a")
    assert status == 0
    best = study.best_trial
    assert f"trial {best.number}" in out and best.user_attrs["mask"] in out and "M, alpha" in out and "search" in out

    status, out, _ = cli("study", "list")
    assert status == 0 and "a " in out and "random" in out and "sqlite:///studies/a.db" in out

    status, out, err = cli("study", "export", "--name", "a", "--out", "masks/best.json")
    assert status == 2 and "folder" in err and "does not exist" in err  # a given folder is never created
    Path("masks").mkdir()
    status, out, err = cli("study", "export", "--name", "a", "--out", "masks/best.json")
    assert status == 0, err
    mask = SkipMask.load("masks/best.json", model=tiny_info)
    assert all(mask.provenance[key] is not None for key in PROVENANCE_KEYS)
    assert mask.provenance["study"] == "a" and mask.provenance["trial"] == best.number
    assert mask.provenance["score"] == pytest.approx(best.value)
    assert mask.model is not None and mask.model.fingerprint == tiny_info.fingerprint
    assert mask.short_string() == best.user_attrs["mask"]

    status, _, err = cli("study", "export", "--name", "a", "--trial", "1", "--out", "t1.json")
    assert status == 0, err
    assert SkipMask.load("t1.json").provenance["trial"] == 1

    # The exported file runs as it is.
    status, out, err = cli("generate", "--model", str(load("a").user_attrs["settings"]["model"]),
                           "--mask", "masks/best.json", "--prompt", "Hello", "--max-new-tokens", "4")
    assert status == 0, err


def _order(name: str) -> tuple[int, int]:
    kind, layer = name.split("_")
    return int(layer), 0 if kind == "attn" else 1


def test_create_again_same_settings_is_fine_different_is_an_error(workdir, cli, create_args, listing):
    assert cli(*create_args("s"))[0] == 0
    status, out, _ = cli(*create_args("s"))
    assert status == 0 and "already exists" in out
    before = listing(workdir)
    status, out, err = cli(*create_args("s", "random", "matchness"))
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "different settings" in err and "objective" in err
    assert listing(workdir) == before


def test_compare_writes_csv_and_json(workdir, cli, create_args):
    for name, strategy, objective in (("c1", "random", "time-per-token"), ("c2", "swift", "matchness")):
        assert cli(*create_args(name, strategy, objective))[0] == 0
        assert cli("study", "run", "--name", name, "--trials", "2", "--quiet")[0] == 0
    (workdir / "out").mkdir()
    status, out, err = cli("study", "compare", "--names", "c1", "c2", "--out-prefix", "out/cmp")
    assert status == 0, err
    assert "wrote out/cmp.csv and out/cmp.json" in out
    rows = json.loads((workdir / "out/cmp.json").read_text())
    assert [r["study"] for r in rows] == ["c1", "c2"]
    for row in rows:
        assert row["speedup"] > 0 and row["baseline_tokens_per_second"] > 0 and row["tokens_per_second"] > 0
        assert row["M"] >= 1 and row["trials"] >= 1 and row["search_seconds"] > 0
    with open(workdir / "out/cmp.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [r["study"] for r in table] == ["c1", "c2"]
    assert {"strategy", "objective", "best_value", "trials", "search_seconds", "skip_ratio", "M", "alpha",
            "speedup"} <= set(table[0])
    assert not list((workdir / "out").glob(".*tmp"))  # no temporary file left behind


def test_journal_storage(workdir, cli, create_args, tiny_info):
    for storage in ("journal:///runs/j.log", "plain.log"):
        (workdir / "runs").mkdir(exist_ok=True)
        name = "j1" if storage.startswith("journal") else "j2"
        assert cli(*create_args(name, "random", "matchness", "--storage", storage))[0] == 0
        status, out, err = cli("study", "run", "--name", name, "--storage", storage, "--trials", "2")
        assert status == 0 and "2 complete of 2" in out, err
        status, out, _ = cli("study", "show", "--name", name, "--storage", storage)
        assert status == 0 and "matchness" in out
        status, _, err = cli("study", "export", "--name", name, "--storage", storage, "--out", f"{name}.json")
        assert status == 0, err
        SkipMask.load(f"{name}.json", model=tiny_info)
    assert (workdir / "runs/j.log").is_file() and (workdir / "plain.log").is_file()
    assert not (workdir / "studies").exists()  # nothing went to the default storage
    status, out, _ = cli("study", "list", "--storage", "plain.log")
    assert status == 0 and "j2" in out


def test_uniform_runs_one_trial_and_swift_starts_from_its_uniform_mask(workdir, cli, create_args):
    assert cli(*create_args("u", "uniform", "time-per-token"))[0] == 0
    status, out, _ = cli("study", "run", "--name", "u", "--trials", "5")
    assert status == 0 and "ran 1 trial(s)" in out and "stopped" in out
    status, out, _ = cli("study", "run", "--name", "u", "--trials", "5")
    assert status == 0 and "ran 0 trial(s)" in out  # the stop rule holds: nothing more to do

    assert cli(*create_args("w", "swift", "matchness"))[0] == 0
    assert cli("study", "run", "--name", "w", "--trials", "2")[0] == 0
    study = load("w")
    first = study.trials[0]
    assert first.user_attrs["skip_ratio"] == pytest.approx(int((4 - 2) * 2 * 0.45) / 8)
    assert study.user_attrs["settings"]["skip_ratio"] == 0.45


def test_knapsack_strategy_measures_its_candidates(workdir, cli, create_args):
    status, out, err = cli(*create_args("k", "knapsack", "tpt"))
    assert status == 0, err
    enqueued = len(load("k").trials)
    assert enqueued >= 1
    status, out, _ = cli("study", "run", "--name", "k", "--trials", "50")
    assert status == 0 and f"{enqueued} complete of {enqueued}" in out and "stopped" in out


def test_plots(workdir, cli, create_args):
    for name in ("p1", "p2"):
        assert cli(*create_args(name))[0] == 0
        assert cli("study", "run", "--name", name, "--trials", "2")[0] == 0
    assert cli("study", "export", "--name", "p1", "--out", "p1.json")[0] == 0
    (workdir / "figs").mkdir()  # a given folder must exist; the default plots/ is made
    for argv, expected in (
        (("plot", "mask", "p1.json"), "plots/mask-p1.png"),
        (("plot", "history", "--name", "p1"), "plots/history-p1.png"),
        (("plot", "compare", "--names", "p1", "p2"), "plots/compare-p1-p2.png"),
        (("plot", "history", "--name", "p2", "--out", "figs/h.png"), "figs/h.png"),
    ):
        status, out, err = cli(*argv)
        assert status == 0, err
        assert out.strip() == expected
        assert (workdir / expected).read_bytes()[:4] == b"\x89PNG"


def test_head_to_head_small_budget(workdir, cli, tiny_model_dir, tiny_profile):
    status, out, err = cli(
        "study", "head-to-head", "--model", tiny_model_dir, "--domain", "translation", "--budget", "0.5",
        "--samples", "2", "--max-new-tokens", "4", "--gamma", "6", "--draft-threshold", "0",
        "--prefix", "hh", "--profile", tiny_profile, "--quiet",
    )
    assert status == 0, err
    rows = json.loads((workdir / "hh.json").read_text())
    assert [(r["strategy"], r["objective"]) for r in rows] == [
        ("swift", "matchness"), ("selfsd-bo", "time-per-token"), ("random", "matchness")]
    assert all(r["speedup"] > 0 for r in rows)
    assert "ordering swift > selfsd-bo" in out and "Table 12" in out
    assert (workdir / "hh.csv").is_file()
    report = json.loads((workdir / "hh-head-to-head.json").read_text())
    assert list(report["strategies"]) == ["swift", "selfsd-bo", "random"] and report["split"] == "test"
    for name, entry in report["strategies"].items():
        row = next(r for r in rows if r["strategy"] == name)
        assert entry["heldout_speedup"] == row["speedup"] and entry["mask"] == row["mask"]
        seconds = [point[0] for point in entry["curve"]]
        assert len(entry["curve"]) == row["trials"] and seconds == sorted(seconds)
        bests = [point[1] for point in entry["curve"]]
        better = max if entry["direction"] == "maximize" else min
        assert all(bests[i] == better(bests[: i + 1]) for i in range(len(bests)))  # a running best
        assert entry["seconds_to_95pct"] <= seconds[-1]
    assert (workdir / "hh-head-to-head.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_progress_bar_only_on_a_terminal():
    import io

    from layersearch.common.progress import TrialProgress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stream, quiet, drawn in ((Terminal(), False, True), (Terminal(), True, False), (io.StringIO(), False, False)):
        with TrialProgress(total=2, quiet=quiet, stream=stream) as progress:
            progress.update(best=0.5, last=0.5, state="COMPLETE")
            progress.update(best=0.25, last=None, state="FAIL")
        text = stream.getvalue()
        assert ("2/2" in text and "best=0.25" in text) if drawn else text == ""
        assert progress.count == 2


def test_head_to_head_other_strategies_with_the_paper_preset(workdir, cli, tiny_model_dir, tiny_profile):
    status, out, err = cli(
        "study", "head-to-head", "--model", tiny_model_dir, "--domain", "translation", "--budget", "0.5",
        "--strategies", "knapsack,uniform,selfsd-bo", "--preset", "paper", "--samples", "2", "--max-new-tokens", "4",
        "--draft-threshold", "0", "--prefix", "hk", "--profile", tiny_profile, "--quiet",
        "--out", "report.json", "--plot", "curves.png",
    )
    assert status == 0, err
    report = json.loads((workdir / "report.json").read_text())
    assert {name: entry["objective"] for name, entry in report["strategies"].items()} == {
        "knapsack": "tpt", "uniform": "matchness", "selfsd-bo": "time-per-token"}
    settings = load("hk-selfsd-bo").user_attrs["settings"]
    assert settings["strategy_options"].get("acquisition") == "ucb"  # the paper preset reached selfsd-bo
    assert all(entry["heldout_speedup"] > 0 for entry in report["strategies"].values())
    assert (workdir / "curves.png").is_file()


def test_a_study_on_the_users_own_prompts(workdir, cli, tiny_model_dir, tiny_profile):
    rows = [{"prompt": f"w{3 + i % 50} w{5 + i % 40} w{7 + i % 30}"} for i in range(30)]
    (workdir / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    status, out, err = cli(
        "study", "create", "--name", "own", "--model", str(tiny_model_dir), "--prompts", "mine.jsonl",
        "--strategy", "random", "--objective", "time-per-token", "--samples", "2", "--max-new-tokens", "4",
        "--draft-threshold", "0", "--profile", str(tiny_profile),
    )
    assert status == 0, err
    domain = load("own").user_attrs["settings"]["domain"]
    assert domain == f"file:{workdir / 'mine.jsonl'}"  # absolute: the study reruns from any folder
    status, out, err = cli("study", "run", "--name", "own", "--trials", "2", "--quiet")
    assert status == 0 and "ran 2 trial(s)" in out, err
    status, _, err = cli("study", "create", "--name", "x", "--model", str(tiny_model_dir), "--prompts", "mine.jsonl",
                         "--domain", "code", "--strategy", "random", "--objective", "time-per-token")
    assert status == 2 and "not both" in err
    (workdir / "few.jsonl").write_text('{"prompt": "w3 w4"}\n')
    status, _, err = cli("study", "create", "--name", "y", "--model", str(tiny_model_dir), "--prompts", "few.jsonl",
                         "--strategy", "random", "--objective", "time-per-token", "--samples", "2")
    assert status == 2 and "at least about" in err and not (workdir / "studies" / "y.db").exists()


def test_tunes_own_study_is_read_by_the_study_commands(workdir, cli):
    """A study that ``tune`` made (its attribute and each trial's spec) is listed, shown, exported
    and plotted like any of ours, not disowned as another tool's; ``study run`` names tune."""
    from layersearch.decoder.spec import DecoderSpec
    from layersearch.study.settings import TUNE_ATTR, TUNE_SPEC_ATTR

    plan = SkipMask(4, (1,), (2,)).with_int8([0], [], False)
    (workdir / "studies").mkdir()
    study = optuna.create_study(study_name="chat", storage="sqlite:///studies/tune-chat.db", direction="maximize")
    study.set_user_attr(TUNE_ATTR, {"prompts": "file:chat.jsonl", "model": "f" * 16, "max_new_tokens": 8, "seed": 0})
    trial = study.ask()
    trial.set_user_attr(TUNE_SPEC_ATTR, DecoderSpec("m", mask_source=plan).to_dict())
    study.tell(trial, 1.5)
    storage = "sqlite:///studies/tune-chat.db"
    status, out, err = cli("study", "list", "--storage", storage)
    assert status == 0 and "tune" in out and "not layersearch" not in out, err
    status, out, err = cli("study", "show", "--name", "chat", "--storage", storage)
    assert status == 0 and "strategy tune" in out and "1.5" in out, err
    status, out, err = cli("study", "export", "--name", "chat", "--storage", storage, "--out", "plan.json")
    assert status == 0, err
    assert SkipMask.load(workdir / "plan.json") == plan
    status, out, err = cli("plot", "history", "--name", "chat", "--storage", storage, "--out", "h.png")
    assert status == 0 and (workdir / "h.png").stat().st_size > 0, err
    status, out, err = cli("study", "run", "--name", "chat", "--storage", storage, "--trials", "1", "--quiet")
    assert status == 2 and "is a tune study: tune resumes it" in err


def test_two_creators_of_one_new_storage_both_open_it(monkeypatch, tmp_path):
    """Two processes creating Optuna's tables at once: the loser's "already exists" is the winner's
    tables, opened on a retry, never a SQL error shown to the user."""
    from layersearch.study import storage

    calls = []

    def racing(url, **kwargs):
        calls.append(url)
        if len(calls) == 1:
            raise RuntimeError("(sqlite3.OperationalError) table studies already exists")
        return "opened"

    monkeypatch.setattr(optuna.storages, "RDBStorage", racing)
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    assert storage._rdb_storage("sqlite:///x.db", {}, {}) == "opened" and len(calls) == 2
    calls.clear()
    monkeypatch.setattr(optuna.storages, "RDBStorage", lambda url, **kw: (_ for _ in ()).throw(RuntimeError("disk I/O error")))
    with pytest.raises(RuntimeError, match="disk I/O"):
        storage._rdb_storage("sqlite:///x.db", {}, {})
