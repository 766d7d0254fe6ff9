"""``layersearch plot bench``: a bench report's speedups as bars, bad reports in one line."""

from __future__ import annotations

import json

import pytest

from layersearch.cli import main

ROWS = [{"config": "plain generate", "speedup": 1.0, "decode_speedup": 1.0, "identical_to_plain": True},
        {"config": "spec: q05-int8-static3", "speedup": 1.3, "decode_speedup": 1.7, "identical_to_plain": True},
        {"config": "ours: swift", "speedup": 0.75, "decode_speedup": None, "identical_to_plain": False}]


def test_a_report_becomes_a_png(tmp_path, capsys):
    report = tmp_path / "bench.json"
    report.write_text(json.dumps({"domains": {"code": {"rows": ROWS}, "math": {"rows": ROWS[:2]}}}))
    out = tmp_path / "bench.png"
    assert main(["plot", "bench", str(report), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and str(out) in capsys.readouterr().out


@pytest.mark.parametrize("content", ['{"domains": 3}', '{"domains": {"code": {"rows": [{"speedup": 1}]}}}',
                                     '{"domains": {"code": {"rows": [{"config": "x", "speedup": "fast"}]}}}', "[1, 2",
                                     '{"domains": {}}'])
def test_a_bad_report_is_one_line(tmp_path, capsys, content):
    report = tmp_path / "bench.json"
    report.write_text(content)
    out = tmp_path / "bench.png"
    assert main(["plot", "bench", str(report), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("layersearch: error: ") and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_a_huge_report_draws_its_fastest_rows_and_says_so(tmp_path, capsys, monkeypatch):
    """Issue 33: matplotlib lays out 100,000 bars for minutes; the plot is bounded and says what it left out."""
    from layersearch.evaluation import plots

    monkeypatch.setattr(plots, "MAX_BENCH_ROWS", 3)
    drawn = {}
    real = plots.plot_bench
    monkeypatch.setattr(plots, "plot_bench", lambda domains, out: drawn.update(domains) or real(domains, out))
    rows = [{"config": f"c{i}", "speedup": 1.0 + i / 10, "decode_speedup": float("nan")} for i in range(8)]
    report = tmp_path / "bench.json"
    report.write_text(json.dumps({"schema_version": 1, "domains": {"code": {"rows": rows}}}))
    out = tmp_path / "bench.png"
    assert main(["plot", "bench", str(report), "--out", str(out)]) == 0
    assert [r["config"] for r in drawn["code"]] == ["c7", "c6", "c5"]  # the fastest: NaN decode speedups draw no bar
    assert "drawing the 3 fastest of 8 rows" in capsys.readouterr().err and out.exists()


@pytest.mark.parametrize("content, says", [
    ('{"schema_version": 99, "domains": {}}', "schema_version 99"),
    ('{"domains": {"code": {"rows": [{"config": "x", "speedup": Infinity}]}}}', "Infinity is not a finite number"),
    ('{"domains": {"code": {"rows": [{"config": "x", "speedup": 1e999}]}}}', "too large for a float"),
    ("[]", "holds a JSON array"),
])
def test_versions_and_infinities_are_refused(tmp_path, capsys, content, says):
    report = tmp_path / "bench.json"
    report.write_text(content)
    assert main(["plot", "bench", str(report), "--out", str(tmp_path / "b.png")]) == 2
    assert says in capsys.readouterr().err
