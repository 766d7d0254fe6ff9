"""benchmarks/bf16_divergence.py: every method decodes the same rows as plain ``generate``, the
divergences are counted and placed, the raw JSON is auditable, and bad arguments are one line."""

from __future__ import annotations

import json

import pytest

from tests.benchmarks.test_tools import load

EVERY = "loop,prompt-lookup,int8-self,int4-self,draft-model,hf-prompt-lookup,hf-assisted"


@pytest.fixture
def prompt_file(tmp_path):
    """Three rows of the tiny models' words (ids 3..102), each repeating a phrase for prompt lookup."""
    path = tmp_path / "prompts.jsonl"
    rows = [" ".join(f"w{(7 * i + j) % 100 + 3}" for j in list(range(6)) * 2) for i in range(3)]
    path.write_text("".join(json.dumps({"prompt": row}) + "\n" for row in rows))
    return path


def run(argv: list[str]) -> int:
    return load("bf16_divergence").main(argv)


def tiny_args(models, prompts, dtype: str, out) -> list[str]:
    return ["--model", str(models[0]), "--draft-model", str(models[1]), "--prompts", str(prompts), "--split", "all",
            "--rows", "2", "--max-new-tokens", "8", "--methods", EVERY, "--dtype", dtype, "--out", str(out)]


def test_in_float32_every_method_gives_generates_tokens(tiny_word_models, prompt_file, tmp_path, capsys):
    """The control: in fp32 nothing differs, and every method (the int8 self-draft too) runs."""
    out = tmp_path / "fp32.json"
    assert run(tiny_args(tiny_word_models, prompt_file, "float32", out)) == 0
    report = json.loads(out.read_text())
    assert list(report["methods"]) == EVERY.split(",")
    for method, result in report["methods"].items():
        assert result["differing_rows"] == 0 and result["first_difference"] == [None, None], method
        assert result["differing_from_loop"] == 0 and len(result["tokens"]) == 2
    assert report["generated_tokens"] == sum(len(t) for t in report["plain"]["tokens"]) > 0
    assert report["argv"][0] == "bf16_divergence.py" and report["commit"] and report["torch"] and report["transformers"]
    assert "| hf-assisted | 0/2 | - - | 0.00 | 0/2 |" in capsys.readouterr().out


def test_in_bf16_a_refused_method_is_reported_with_its_reason(tiny_word_models, prompt_file, tmp_path, capsys):
    out = tmp_path / "bf16.json"
    assert run(tiny_args(tiny_word_models, prompt_file, "bfloat16", out)) == 0
    report = json.loads(out.read_text())
    assert report["dtype"] == "bfloat16" and "float32" in report["methods"]["int8-self"]["refused"]  # CPU int8: fp32 weights
    assert all("tokens" in r for m, r in report["methods"].items() if m != "int8-self")
    assert "| int8-self | not run: " in capsys.readouterr().out


def test_a_divergence_is_counted_placed_and_its_logit_gap_measured(tiny_word_models, prompt_file, tmp_path, monkeypatch, capsys):
    """A method whose fourth token differs on every row: 2/2 rows, position 3, 2 per 16 tokens."""
    script = load("bf16_divergence")
    honest = script.runner

    def runner(method, args, loaded):
        run_one = honest(method, args, loaded)
        if method != "prompt-lookup":
            return run_one
        return lambda ids: (lambda t: t[:3] + ((t[3] + 1) % 128,) + t[4:])(run_one(ids))

    monkeypatch.setattr(script, "runner", runner)
    out = tmp_path / "d.json"
    argv = ["--model", str(tiny_word_models[0]), "--prompts", str(prompt_file), "--split", "all", "--rows", "2",
            "--max-new-tokens", "8", "--methods", "loop,prompt-lookup", "--dtype", "float32", "--out", str(out)]
    assert script.main(argv) == 0
    result = json.loads(out.read_text())["methods"]["prompt-lookup"]
    assert result["differing_rows"] == 2 and result["first_difference"] == [3, 3] and result["differing_from_loop"] == 2
    assert result["per_1000_tokens"] == pytest.approx(1000 * 2 / 16)
    assert all(gap > 0 for gap in result["logit_gap"])  # fp32: generate's token is the argmax of the same forward
    assert "| prompt-lookup | 2/2 | 3 3 | 125.00 | 2/2 |" in capsys.readouterr().out


def test_first_difference():
    first = load("bf16_divergence").first_difference
    assert first((1, 2, 3), (1, 2, 3)) is None
    assert first((1, 2, 3), (1, 5, 3)) == 1
    assert first((1, 2), (1, 2, 3)) == 2  # one ended early (an end-of-sequence token): it parts there


@pytest.mark.embedded
def test_on_the_embedded_model_two_rows_of_code40(tmp_path, capsys):
    """The script's defaults (the embedded model, examples/code40.jsonl's held-out rows, bf16)."""
    out = tmp_path / "embedded.json"
    assert run(["--rows", "2", "--max-new-tokens", "8", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["model"] == "smollm2-135m" and report["split"] == "held-out" and len(report["row_ids"]) == 2
    assert set(report["methods"]) == {"loop", "prompt-lookup", "int8-self", "int4-self", "hf-prompt-lookup"}
    assert all(len(r["first_difference"]) == 2 for m, r in report["methods"].items() if m != "int8-self")
    assert "smollm2-135m in bfloat16 on cpu, 2 rows" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["--rows", "0"], ["--max-new-tokens", "0"], ["--max-draft", "0"], ["--methods", "loop,beam"],
    ["--methods", "hf-assisted"], ["--dtype", "float64"], ["--dtype", "float32,bfloat16"], ["--split", "dev"],
    ["--kernels", "fast"], ["--device", "tpu"], ["--threads", "0"], ["--rows", "many"], ["--prompts", "no/such.jsonl"],
    ["--rows", "99"], ["--out", "EXISTING"], ["--out", "no/such/folder/x.json"],
])
def test_bad_arguments_are_one_line_and_exit_2(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "EXISTING").write_text("kept")
    try:
        status = run(argv)
    except SystemExit as exc:  # argparse's usage errors
        status = exc.code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith("bf16_divergence.py: error: "), err
    assert out == "" and sorted(p.name for p in tmp_path.iterdir()) == ["EXISTING"]
    assert (tmp_path / "EXISTING").read_text() == "kept"
