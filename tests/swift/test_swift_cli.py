"""``layersearch generate --mask swift`` end to end on a tiny model with a real tokenizer."""

from __future__ import annotations

import dataclasses
import json

from layersearch.commands.args import SWIFT_DEFAULTS
from layersearch.swift import SwiftConfig


def test_cli_defaults_are_the_configs():
    defaults = {f.name: f.default for f in dataclasses.fields(SwiftConfig)}
    assert {k: defaults[k] for k in SWIFT_DEFAULTS} == SWIFT_DEFAULTS


def test_generate_on_the_fly_over_a_prompt_file_equals_baseline(tmp_path, capsys, tiny_with_embedded_tokenizer):
    from layersearch.cli import main

    _, _, folder = tiny_with_embedded_tokenizer(seed=5)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in ("The quick brown fox", "Once upon a time", "def f(x):")))
    common = ["generate", "--model", str(folder), "--prompts", str(prompts), "--max-new-tokens", "20", "--json"]
    assert main(common + ["--mask", "swift:0.5", "--swift-window", "4",
                          "--swift-bo-interval", "5", "--max-draft", "4", "--draft-threshold", "0"]) == 0
    swift = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert main(common + ["--baseline"]) == 0
    plain = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [r["token_ids"] for r in swift] == [r["token_ids"] for r in plain]
    summaries = [r["stats"]["swift"] for r in swift]
    assert sum(s["optimization_steps"] for s in summaries) > 0
    for record, summary in zip(swift, summaries):
        assert sum(summary["phase_steps"].values()) == record["stats"]["target_forwards"]
        assert summary["matchness"] is None or 0 <= summary["matchness"] <= 1
        assert len(record["stats"]["selections"]) == record["stats"]["target_forwards"]
