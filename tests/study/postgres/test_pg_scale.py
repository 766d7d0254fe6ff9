"""benchmarks/pg_scale.py end to end on the private server: a short throughput run and an overhead run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "pg_scale.py"


def test_pg_scale_measures_and_cleans_up(postgres, tmp_path):
    import optuna

    spec = importlib.util.spec_from_file_location("benchmarks_pg_scale", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    url, out = postgres.create_database("pgscale"), tmp_path / "scale.json"
    assert module.main(["--storage", url, "--workers", "1", "--seconds", "3", "--history", "0", "--trials", "2",
                        "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["throughput"][0]["trials"] > 0 and report["overhead"][0]["trials"] == 2
    assert optuna.get_all_study_names(storage=url) == []  # its own studies deleted
