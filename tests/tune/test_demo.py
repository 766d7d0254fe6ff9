"""The demo's next command: the fastest configuration it measured faster than plain generate,
on the prompts it was measured on; none when nothing was."""

from __future__ import annotations

from types import SimpleNamespace

from layersearch.decoder.spec import DecoderSpec, ModelRef, ModelSpec
from layersearch.tune.demo import PlanTable, shipped_plan, suggestion
from layersearch.tune.select import HeldOutRow, Selection


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
    assert chosen.command == (f"layersearch generate --drafter hybrid --mask {shipped_plan()} --lookahead static "
                              "--max-draft 3 --prompts d/plan.jsonl --kernels numba")
    plans = PlanTable(("table",), (_row("ours: hybrid (searched plan)", 1.9, 1.1),))
    chosen = suggestion(tuned, plans, "d/spec.json", "d/held_out.jsonl", "d/plan.jsonl")
    assert chosen.command == "layersearch generate --spec d/spec.json --prompts d/held_out.jsonl --kernels numba"


def test_nothing_faster_than_plain_end_to_end_suggests_nothing():
    tuned = _result([_row("plain generate", 1.0, 1.0)], "plain generate", plain_chosen=True)
    plans = PlanTable(("table",), (_row("ours: prompt-lookup", 1.2, 0.97), _row("ours: searched plan", 0.8, 0.9)))
    assert suggestion(tuned, plans, "s", "a", "b") is None
