"""End to end on the embedded SmolLM2-135M: the CLI's speculative output equals plain generate."""

from __future__ import annotations

import json

import pytest

from layersearch.cli import main
from layersearch.data import load_prompts

pytestmark = pytest.mark.embedded


def test_generate_cli_is_lossless_on_the_embedded_model(tmp_path, capsys):
    prompts = tmp_path / "prompts.jsonl"
    texts = [p.text for p in load_prompts("summarization", 1, seed=0)] + ["def fibonacci(n):"]
    prompts.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in texts))
    common = ["generate", "--prompts", str(prompts), "--max-new-tokens", "24", "--json"]
    assert main([*common, "--baseline"]) == 0
    plain = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    mask = tmp_path / "mask.json"
    assert main(["mask", "create", "--attention", "3,9,15,21", "--mlp", "27", "--out", str(mask)]) == 0
    capsys.readouterr()
    assert main([*common, "--mask", str(mask), "--draft-threshold", "0.3"]) == 0
    spec = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [s["token_ids"] for s in spec] == [p["token_ids"] for p in plain]
    assert all(len(s["token_ids"]) > 0 for s in spec)
    stats = spec[0]["stats"]
    assert stats["target_forwards"] < stats["new_tokens"]  # some drafts were accepted
    assert 0 < stats["acceptance_rate"] <= 1
