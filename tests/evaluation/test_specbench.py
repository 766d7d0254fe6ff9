"""Tests for Spec-Bench support: the question reader, the answer rows (a golden row), the
per-group report computed as Spec-Bench's speed.py does, multi-turn answering and the
``bench --spec-bench`` command on a tiny model with the embedded tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layersearch.cli import main
from layersearch.data.specbench import GROUPS, Question, read_questions, select
from layersearch.common.errors import LayersearchError
from layersearch.evaluation.specbench import (
    Turn, answer_question, answer_row, group_table, read_answers, same_answers, write_answers,
)

QUESTIONS = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "spec-bench" / "question.jsonl"
needs_questions = pytest.mark.skipif(not QUESTIONS.is_file(), reason=f"{QUESTIONS} (reference data) is absent")


def test_golden_row(tmp_path):
    question = Question(81, "writing", ("Write a poem.", "Now shorter."))
    turns = (Turn("Roses are red.", 5, 0.5, 3, (2, 1, 1)), Turn("Red.", 2, 0.25, 2, (1,)))
    row = answer_row(question, turns, "smollm2-135m-ours", answer_id="abc", tstamp=1700000000.0)
    golden = (
        '{"question_id": 81, "category": "writing", "answer_id": "abc", "model_id": "smollm2-135m-ours", '
        '"choices": [{"index": 0, "turns": ["Roses are red.", "Red."], "decoding_steps": [3, 2], '
        '"new_tokens": [5, 2], "wall_time": [0.5, 0.25], "accept_lengths": [2, 1, 1, 1]}], '
        '"tstamp": 1700000000.0}\n'
    )
    later = answer_row(Question(7, "qa", ("q",)), (Turn("a", 1, 0.1, 1, (1,)),), "m", answer_id="d", tstamp=1.0)
    path = write_answers(tmp_path / "a.jsonl", [row, later])
    lines = path.read_text().splitlines(keepends=True)
    assert lines[1] == golden  # sorted by question id, as Spec-Bench's reorg_answer_file leaves it
    assert read_answers(path) == [later, row]


def _row(qid, category, turns, new_tokens, wall_time, accept):
    return {"question_id": qid, "category": category, "choices": [
        {"turns": turns, "new_tokens": new_tokens, "wall_time": wall_time, "accept_lengths": accept}]}


def test_group_table_follows_speed_py():
    method = [
        _row(1, "writing", ["a b", "c"], [10, 6], [1.0, 1.0], [2, 3]),  # 8 tok/s
        _row(2, "qa", ["d"], [12], [2.0], [1, 1, 4]),                     # 6 tok/s
    ]
    base = [
        _row(1, "writing", ["w w w w w", "w w w"], [9, 9], [1.0, 1.0], [1]),  # counter: 5 + 3 words -> 4 tok/s
        _row(2, "qa", ["w w w w w w w"], [9], [1.0], [1]),                     # 7 tok/s
    ]
    words = lambda text: len(text.split())  # stands in for len(tokenizer(text).input_ids) - 1
    table = {r.group: r for r in group_table(method, base, words)}
    assert set(table) == {"mt_bench", "qa", "overall"}  # groups without questions are left out
    assert table["mt_bench"].tokens_per_second == 8.0 and table["mt_bench"].baseline_tokens_per_second == 4.0
    assert table["mt_bench"].speedup == 2.0 and table["mt_bench"].mean_accepted == 2.5
    overall = table["overall"]
    # speedup = mean of per-question speeds over mean of baseline speeds (not a ratio of sums)
    assert overall.tokens_per_second == 7.0 and overall.baseline_tokens_per_second == 5.5
    assert overall.speedup == pytest.approx(7.0 / 5.5) and overall.mean_accepted == pytest.approx(11 / 5)


def test_same_answers_is_specbench_equality():
    a = [_row(1, "qa", ["x"], [1], [1.0], [1])]
    assert same_answers(a, [_row(1, "qa", ["x"], [3], [2.0], [1])])
    assert not same_answers(a, [_row(1, "qa", ["y"], [1], [1.0], [1])])


@needs_questions
def test_reads_the_question_set_and_selects_by_group_limit_and_split():
    questions = read_questions(QUESTIONS)
    assert len(questions) == 480 and sum(len(q.turns) == 2 for q in questions) == 80
    assert {q.group for q in questions} == set(GROUPS)
    picked = select(questions, ("mt_bench", "rag"), limit=2)
    assert [q.category for q in picked].count("rag") == 2 and len(picked) == 2 * 8 + 2
    test = select(questions, split="test")
    assert 60 < len(test) < 130 and not set(test) & set(select(questions, split="train"))


def test_bad_question_files(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"question_id": 1, "category": "qa", "turns": ["x"]}\n{"question_id": "2", "turns": []}\n')
    with pytest.raises(LayersearchError, match=r"q.jsonl:2: expected"):
        read_questions(path)
    path.write_text('{"question_id": 1, "category": "qa", "turns": ["x"]}\n')
    with pytest.raises(LayersearchError, match="unknown Spec-Bench categories poetry"):
        select(read_questions(path), ("poetry",))
    with pytest.raises(LayersearchError, match="cannot read the Spec-Bench question file"):
        read_questions(tmp_path / "missing.jsonl")


def test_second_turn_follows_the_models_first_answer_and_ours_equals_vanilla(tiny_with_embedded_tokenizer):
    from layersearch.masks.mask import SkipMask
    from layersearch.runtime.baseline import hf_generate
    from layersearch.runtime.loop import SpeculativeDecoder

    model, tokenizer, _ = tiny_with_embedded_tokenizer(0)
    question = Question(90, "writing", ("Tell me about cats.", "And dogs?"))
    prompts = []

    def vanilla(ids, n):
        prompts.append(tokenizer.decode(ids[0]))
        return hf_generate(model, ids, n)

    ours = SpeculativeDecoder(model, SkipMask(4, (1, 2), (2,))).generate
    plain = answer_question(question, vanilla, tokenizer, 12, vanilla=True)
    spec = answer_question(question, ours, tokenizer, 12)
    assert [t.text for t in spec] == [t.text for t in plain]  # greedy: the same answers
    assert plain[0].text and plain[0].text in prompts[1] and "And dogs?" in prompts[1]
    assert "<|im_start|>assistant" in prompts[0]  # the model's chat template
    assert plain[0].accept_lengths == (1,) * plain[0].new_tokens
    assert all(sum(t.accept_lengths) == t.new_tokens - 1 for t in spec)  # every step after the prefill's token


def test_bench_specbench_writes_one_file_per_method(tiny_with_embedded_tokenizer, tmp_path, capsys):
    _, _, folder = tiny_with_embedded_tokenizer(1)
    questions = tmp_path / "question.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in [
        {"question_id": 81, "category": "writing", "turns": ["Hi there.", "Say more."]},
        {"question_id": 301, "category": "qa", "turns": ["What is 2+2?"]},
        {"question_id": 302, "category": "qa", "turns": ["Name a color."]},
    ]))
    answers = tmp_path / "answers"
    code = main(["bench", "--model", str(folder), "--threads", "1", "--spec-bench", str(questions), "--limit", "1",
                 "--answers", str(answers), "--skip-ratios", "0.25", "--max-new-tokens", "6",
                 "--out", str(tmp_path / "report.json")])
    out = capsys.readouterr().out
    assert code == 0, out
    files = sorted(p.name for p in answers.iterdir())
    assert files == ["tiny-ours-uniform-0.25.jsonl", "tiny-vanilla.jsonl"]
    rows = read_answers(answers / "tiny-ours-uniform-0.25.jsonl")
    assert [r["question_id"] for r in rows] == [81, 301] and len(rows[0]["choices"][0]["turns"]) == 2
    assert "answers equal to vanilla: yes" in out and "overall" in out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["methods"]["ours-uniform-0.25"]["equal_to_vanilla"] is True


def test_bench_specbench_runs_one_method_per_lookahead_rule(tiny_with_embedded_tokenizer, tmp_path, capsys):
    _, _, folder = tiny_with_embedded_tokenizer(1)
    questions = tmp_path / "question.jsonl"
    questions.write_text(json.dumps({"question_id": 301, "category": "qa", "turns": ["What is 2+2?"]}) + "\n")
    answers = tmp_path / "answers"
    code = main(["bench", "--model", str(folder), "--threads", "1", "--spec-bench", str(questions), "--answers",
                 str(answers), "--skip-ratios", "0.25", "--max-new-tokens", "4", "--lookaheads", "static,adaptive",
                 "--out", str(tmp_path / "report.json")])
    out = capsys.readouterr().out
    assert code == 0, out
    files = sorted(p.name for p in answers.iterdir())
    assert files == ["tiny-ours-uniform-0.25-adaptive.jsonl", "tiny-ours-uniform-0.25-static.jsonl", "tiny-vanilla.jsonl"]
    report = json.loads((tmp_path / "report.json").read_text())
    assert list(report["methods"]) == ["vanilla", "ours-uniform-0.25-static", "ours-uniform-0.25-adaptive"]
    assert "== ours-uniform-0.25-static" in out and "== ours-uniform-0.25-adaptive" in out


def test_bench_specbench_needs_an_answers_folder(tiny_with_embedded_tokenizer, tmp_path, capsys):
    _, _, folder = tiny_with_embedded_tokenizer(1)
    code = main(["bench", "--model", str(folder), "--spec-bench", str(tmp_path / "q.jsonl")])
    assert code == 2 and "needs --answers DIR" in capsys.readouterr().err


def test_bench_specbench_refuses_a_question_past_the_context_before_answering(tiny_with_embedded_tokenizer, tmp_path, capsys):
    model, _, folder = tiny_with_embedded_tokenizer(1)
    words = model.config.max_position_embeddings  # at least a token a word: past the context
    questions = tmp_path / "question.jsonl"
    questions.write_text(json.dumps({"question_id": 301, "category": "qa", "turns": [" ".join(["cat"] * words)]}) + "\n")
    answers = tmp_path / "answers"
    code = main(["bench", "--model", str(folder), "--threads", "1", "--spec-bench", str(questions), "--answers",
                 str(answers), "--skip-ratios", "0.25", "--max-new-tokens", "4", "--out", str(tmp_path / "report.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "Spec-Bench question 301 (qa)" in err[0] and "context length" in err[0]
    assert not answers.exists() and not (tmp_path / "report.json").exists()
