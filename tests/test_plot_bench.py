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
