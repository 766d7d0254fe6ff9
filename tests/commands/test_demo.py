"""``layersearch demo``: the plan rows beside tune's table, end to end on the embedded model."""

from __future__ import annotations

import pytest

from layersearch.tune import demo


@pytest.mark.embedded
def test_demo_prints_the_plan_rows_beside_tune(tmp_path, capsys, embedded_dir):
    from layersearch.cli import main

    assert main(["demo", "--budget", "5", "--max-new-tokens", "12", "--threads", "1", "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    tune_table, plan_table = out.split("the model as its own draft", 1)
    assert "chosen:" in tune_table
    lines = plan_table.splitlines()
    for label in ("plain generate", "ours: prompt-lookup", "ours: int8 self-draft", "ours: searched plan",
                  "ours: hybrid (searched plan)"):
        (row,) = [line for line in lines if line.startswith(label)]
        assert row.rstrip().endswith("yes"), row  # every row's output is plain decoding's
    assert f"--mask {demo.shipped_plan()}" in out
