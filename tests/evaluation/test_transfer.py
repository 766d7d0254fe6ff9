"""Tests for ``layersearch transfer``: the matrix of masks x domains on held-out prompts."""

from __future__ import annotations

import json

import pytest

from layersearch.cli import main
from layersearch.data import split_of


def _questions(path):
    """A small Spec-Bench-like file: 20 short qa and 20 short rag questions."""
    rows = [{"question_id": 300 + i, "category": cat, "turns": [f"Question {i} about {cat}?"]}
            for cat in ("qa", "rag") for i in range(20)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_transfer_matrix_on_test_prompts(tiny_with_embedded_tokenizer, tmp_path):
    from layersearch.data import load_prompts
    from layersearch.masks.mask import SkipMask
    from layersearch.models.loading import load_model
    from layersearch.evaluation.transfer import format_matrix, transfer_matrix

    _, _, folder = tiny_with_embedded_tokenizer(0)
    loaded = load_model(str(folder))
    questions = _questions(tmp_path / "q.jsonl")
    masks = {"spec-bench:qa": SkipMask(4, (1,), (2,), loaded.info), "spec-bench:rag": SkipMask.none(4, loaded.info)}
    domains = ["spec-bench:qa", "spec-bench:rag"]
    result = transfer_matrix(loaded, masks, domains, samples=2, max_new_tokens=6, specbench=str(questions))
    assert len(result.cells) == 4 and len(result.grid("speedup")) == 2
    assert [c.M for c in result.cells if c.mask_domain == "spec-bench:rag"] == [1.0, 1.0]  # nothing skipped: plain steps
    assert all(c.M >= 1.0 and c.speedup > 0 for c in result.cells)
    # The prompts measured are the test split's.
    used = load_prompts("spec-bench:qa", 2, split="test", specbench=str(questions))
    assert {split_of(p.id) for p in used} == {"test"}
    assert "speedup over plain generate" in format_matrix(result)


def test_transfer_cli_writes_json_and_heatmap(tiny_with_embedded_tokenizer, tmp_path, capsys):
    from layersearch.masks.mask import SkipMask
    from layersearch.models.loading import load_model

    _, _, folder = tiny_with_embedded_tokenizer(0)
    info = load_model(str(folder)).info
    mask = SkipMask(4, (0, 3), (), info).save(tmp_path / "m.json")
    prefix = tmp_path / "out" / "transfer"
    prefix.parent.mkdir()  # a given folder must exist
    code = main(["transfer", "--model", str(folder), "--threads", "1", "--mask", f"spec-bench:qa={mask}",
                 "--domains", "spec-bench:qa,spec-bench:rag", "--samples", "1", "--max-new-tokens", "4",
                 "--spec-bench", str(_questions(tmp_path / "q.jsonl")), "--out-prefix", str(prefix)])
    assert code == 0, capsys.readouterr()
    report = json.loads(prefix.with_suffix(".json").read_text())
    assert report["eval_domains"] == ["spec-bench:qa", "spec-bench:rag"] and len(report["cells"]) == 2
    assert prefix.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("masks,message", [
    (["summarization"], "--mask takes DOMAIN=FILE"),
    (["code=a.json", "code=b.json"], "two masks for domain 'code'"),
])
def test_bad_mask_options_are_one_error_line(masks, message, capsys):
    args = ["transfer"] + [part for m in masks for part in ("--mask", m)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
