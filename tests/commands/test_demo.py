"""``layersearch demo``: the plan rows beside tune's table, end to end on the embedded model; one
trial numbering, "-" where nothing was measured, and a next command that measured faster."""

from __future__ import annotations

import re
import shlex
from types import SimpleNamespace

import pytest

from layersearch.commands.demo import suggestion
from layersearch.decoder.spec import DecoderSpec, ModelRef, ModelSpec
from layersearch.tune import demo
from layersearch.tune.demo import PlanTable, shipped_plan
from layersearch.tune.select import HeldOutRow, Selection


@pytest.mark.embedded
def test_demo_prints_the_plan_rows_beside_tune(tmp_path, capsys, embedded_dir):
    from layersearch.cli import main

    assert main(["demo", "--budget", "5", "--max-new-tokens", "12", "--threads", "1", "--out-dir", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    out, err = captured.out, captured.err
    tune_table, plan_table = out.split("the model as its own draft", 1)
    assert "chosen:" in tune_table
    assert "decode-phase speedup" in tune_table  # the table says which phase its speedups measure
    for label in ("plain generate", "hf prompt-lookup (10)"):  # transformers' generate counts no drafts: M and alpha "-"
        (row,) = [line for line in tune_table.splitlines() if line.startswith(label)]
        assert row.split()[-3:] == ["-", "-", "yes"], row
    # Trials are numbered one way: each table row "trial N" is the progress line "trial N (kind)".
    for number in re.findall(r"^trial (\d+) ", tune_table, flags=re.M):
        assert f"trial {number} (" in err
    assert "(plain)" not in err  # the budget never goes to plain decoding
    assert "search budget" in err
    lines = plan_table.splitlines()
    for label in ("plain generate", "ours: prompt-lookup", "ours: int8 self-draft", "ours: searched plan",
                  "ours: hybrid (searched plan)"):
        (row,) = [line for line in lines if line.startswith(label)]
        assert row.rstrip().endswith("yes"), row  # every row's output is plain decoding's
    assert (tmp_path / "held_out.jsonl").exists() and (tmp_path / "plan_held_out.jsonl").exists()
    (advice,) = [line for line in lines if line.startswith("run next")]
    if "nothing measured faster" in advice:
        return
    end_to_end, decode = (float(x) for x in re.findall(r"([\d.]+)x", advice)[:2])
    assert end_to_end > 1.0 and decode > 1.0  # the suggestion is a configuration measured faster than plain
    command = shlex.split(lines[lines.index(advice) + 1])
    assert command[:2] == ["layersearch", "generate"]
    assert main([*command[1:], "--max-new-tokens", "3"]) == 0  # and it runs as printed


def _row(label, decode, end_to_end, identical=True, spec=None):
    return HeldOutRow(label, decode, end_to_end, 2.0, 0.5, identical, spec=spec)


def _result(rows, winner, plain_chosen=False):
    spec = DecoderSpec(model=ModelSpec(ModelRef("m")), plain=True)
    return SimpleNamespace(selection=Selection(tuple(rows), winner, spec, plain_chosen), kernels="numba")


def test_the_faster_of_tunes_pick_and_the_plan_rows_is_suggested_on_its_prompts():
    tuned = _result([_row("plain generate", 1.0, 1.0), _row("trial 3", 1.5, 1.2, spec="s")], "trial 3")
    plans = PlanTable(("table",), (_row("plain generate", 1.0, 1.0), _row("ours: hybrid (searched plan)", 1.9, 1.4),
                                   _row("ours: searched plan", 2.5, 1.6, identical=False)), ("p",))
    chosen = suggestion(tuned, plans, "d/spec.json", "d/held_out.jsonl", "d/plan.jsonl")
    assert chosen.label == "ours: hybrid (searched plan)" and chosen.prompts == "d/plan.jsonl"  # the non-identical row is out
    assert chosen.command == (f"layersearch generate --drafter hybrid --mask {shipped_plan()} --lookahead confidence "
                              "--max-draft 3 --prompts d/plan.jsonl --kernels numba")
    plans = PlanTable(("table",), (_row("ours: hybrid (searched plan)", 1.9, 1.1),))
    chosen = suggestion(tuned, plans, "d/spec.json", "d/held_out.jsonl", "d/plan.jsonl")
    assert chosen.command == "layersearch generate --spec d/spec.json --prompts d/held_out.jsonl --kernels numba"


def test_nothing_faster_than_plain_end_to_end_suggests_nothing():
    tuned = _result([_row("plain generate", 1.0, 1.0)], "plain generate", plain_chosen=True)
    plans = PlanTable(("table",), (_row("ours: prompt-lookup", 1.2, 0.97), _row("ours: searched plan", 0.8, 0.9)))
    assert suggestion(tuned, plans, "s", "a", "b") is None
