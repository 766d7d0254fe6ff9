"""benchmarks/pg_scale.py end to end on the private server: a short throughput run and an overhead run."""

from __future__ import annotations

import json

from tests.benchmarks.test_tools import load


def test_pg_scale_measures_and_cleans_up(postgres, tmp_path):
    import optuna

    module = load("pg_scale")  # as a script runs it: benchmarks/ on sys.path
    url, out = postgres.create_database("pgscale"), tmp_path / "scale.json"
    assert module.main(["--storage", url, "--workers", "1", "--seconds", "3", "--history", "0", "--trials", "2",
                        "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["throughput"][0]["trials"] > 0 and report["overhead"][0]["trials"] == 2
    assert optuna.get_all_study_names(storage=url) == []  # its own studies deleted
