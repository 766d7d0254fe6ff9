"""``layersearch swift stream`` end to end on a tiny model with a real tokenizer (small settings)."""

from __future__ import annotations

import json

from layersearch.masks.mask import SkipMask
from layersearch.experiments.swift import InputResult, StreamInput, StreamReport


def test_swift_stream_writes_report_table_and_plot(tmp_path, capsys, tiny_with_embedded_tokenizer):
    from layersearch.cli import main

    _, _, folder = tiny_with_embedded_tokenizer(seed=6)
    out, plot = tmp_path / "s.json", tmp_path / "s.png"
    argv = ["swift", "stream", "--model", str(folder), "--domains", "translation,math", "--per-domain", "2",
            "--max-new-tokens", "12", "--search-trials", "3", "--search-prompts", "1", "--swift-window", "4",
            "--swift-bo-interval", "4", "--skip-ratio", "0.5", "--out", str(out), "--plot", str(plot)]
    assert main(argv) == 0  # raises inside if any method's output differs from plain decoding
    report = json.loads(out.read_text())
    assert [s["domain"] for s in report["inputs"]] == ["translation", "translation", "math", "math"]
    methods = [row["method"] for row in report["summary"]]
    assert methods == ["plain", "fixed", "swift", "fixed-tree", "swift-tree"]
    swift = [r for r in report["results"] if r["method"] == "swift"]
    assert len(swift) == 4 and any(r["optimization_seconds"] > 0 for r in swift)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = capsys.readouterr().out
    assert "speedup" in table and "swift-tree" in table


def test_summary_pools_counts_and_speedups_are_per_input():
    inputs = (StreamInput(0, "a", "x"), StreamInput(1, "b", "y"))
    results = (
        InputResult("plain", 0, "a", 10, 2.0, 9, 0, 0), InputResult("plain", 1, "b", 10, 2.0, 9, 0, 0),
        InputResult("swift", 0, "a", 10, 1.0, 3, 8, 6), InputResult("swift", 1, "b", 10, 4.0, 9, 4, 0),
    )
    report = StreamReport(inputs, results, SkipMask.none(4), 0.5)
    assert report.speedups("swift") == [2.0, 0.5]
    row = {r["method"]: r for r in report.summary()}["swift"]
    assert row["M"] == (20 - 2) / 12 and row["alpha"] == 0.5 and row["speedup"] == 4.0 / 5.0
