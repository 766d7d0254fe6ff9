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
    plans = PlanTable(("table",), (_row("ours: hybrid (searched plan)", 1.2, 1.1),))
    chosen = suggestion(tuned, plans, "d/spec.json", "d/held_out.jsonl", "d/plan.jsonl")
    assert chosen.command == "layersearch generate --spec d/spec.json --prompts d/held_out.jsonl --kernels numba"


def test_run_next_ranks_by_the_decode_column_the_tables_show_and_names_it():
    """The printed tables show the decode-phase speedup, not the end-to-end one: a row higher in
    that column wins even when its end-to-end figure (shown nowhere) is lower."""
    tuned = _result([_row("plain generate", 1.0, 1.0), _row("trial 0", 1.73, 1.60, spec="s")], "trial 0")
    plans = PlanTable(("table",), (_row("ours: prompt-lookup (<=4)", 1.78, 1.45),))
    chosen = suggestion(tuned, plans, "d/spec.json", "d/held_out.jsonl", "d/plan.jsonl")
    assert chosen.label == "ours: prompt-lookup (<=4)"
    from layersearch.commands.demo import next_line

    line = next_line(chosen, "d/held_out.jsonl").splitlines()[0]
    assert "decode column" in line and "1.78x" in line


def _demo_storage(folder, *names, identity=None):
    """``folder``/demo.db holding a study of each name with one finished trial."""
    import optuna

    from layersearch.tune.study import IDENTITY_ATTR

    folder.mkdir(exist_ok=True)
    for name in names:
        study = optuna.create_study(study_name=name, storage=f"sqlite:///{folder / 'demo.db'}", direction="maximize")
        study.set_user_attr(IDENTITY_ATTR, identity or {})
        study.add_trial(optuna.trial.create_trial(value=1.0))
    return folder


def test_the_demo_resumes_its_newest_study_and_fresh_names_a_new_one(tmp_path):
    from layersearch.commands.demo import demo_study

    assert demo_study(tmp_path / "new", fresh=False) == demo_study(tmp_path / "new", fresh=True)
    assert not (tmp_path / "new").exists()  # looking writes nothing
    first = demo_study(tmp_path / "new", fresh=False)
    assert (first.name, first.resumed) == ("demo", False)
    folder = _demo_storage(tmp_path / "d", "demo", "theirs")
    before = (folder / "demo.db").read_bytes()
    resumed = demo_study(folder, fresh=False)
    assert (resumed.name, resumed.resumed, resumed.trials, resumed.file) == ("demo", True, 1, str(folder / "demo.db"))
    fresh = demo_study(folder, fresh=True)
    assert (fresh.name, fresh.resumed, fresh.storage) == ("demo-2", False, resumed.storage)  # same file, nothing moved
    assert (folder / "demo.db").read_bytes() == before
    _demo_storage(folder, "demo-2")
    assert demo_study(folder, fresh=False).name == "demo-2" and demo_study(folder, fresh=True).name == "demo-3"


def test_a_study_made_with_other_sizes_is_refused_pointing_at_fresh(tmp_path):
    from layersearch.commands.demo import check_study, demo_settings, demo_study
    from layersearch.common.errors import LayersearchError

    folder = _demo_storage(tmp_path / "d", "demo", identity={"max_new_tokens": 48})
    args = SimpleNamespace(budget=5.0, max_new_tokens=12)
    with pytest.raises(LayersearchError, match="max_new_tokens 48, not 12; --fresh starts a new study"):
        check_study(demo_study(folder, fresh=False), demo_settings(args), str(folder / "p.jsonl"), "fp")
    check_study(demo_study(folder, fresh=True), demo_settings(args), str(folder / "p.jsonl"), "fp")


def test_a_second_demo_says_it_resumes_the_first_ones_study(tiny_with_embedded_tokenizer, tmp_path, capsys):
    from layersearch.cli import main

    model = tiny_with_embedded_tokenizer(seed=3)[2]
    out = tmp_path / "d"
    argv = ["demo", "--model", str(model), "--budget", "2", "--max-new-tokens", "4", "--threads", "1", "--out-dir", str(out)]
    assert main(argv) == 0
    assert "resuming" not in capsys.readouterr().err
    import optuna

    study = optuna.load_study(study_name="demo", storage=f"sqlite:///{out / 'demo.db'}")
    trials = sum(1 for t in study.trials if t.state.is_finished())  # its enqueued starting points wait unmeasured
    assert main(argv) == 0
    assert f"resuming study demo in {out / 'demo.db'} ({trials} trials); --fresh starts a new one" in capsys.readouterr().err


def test_nothing_faster_than_plain_end_to_end_suggests_nothing():
    tuned = _result([_row("plain generate", 1.0, 1.0)], "plain generate", plain_chosen=True)
    plans = PlanTable(("table",), (_row("ours: prompt-lookup", 1.2, 0.97), _row("ours: searched plan", 0.8, 0.9)))
    assert suggestion(tuned, plans, "s", "a", "b") is None
