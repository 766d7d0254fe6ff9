"""``layersearch profile``: --random-weights measures the architecture from its config alone, and
the file says where and how it was measured."""

from __future__ import annotations

import json

from layersearch.cli import main
from layersearch.models.tiny import build_tiny_model, char_tokenizer


def _model_dir(tmp_path):
    folder = tmp_path / "tiny"
    build_tiny_model("llama", num_layers=2, seed=2).save_pretrained(str(folder))
    char_tokenizer().save_pretrained(str(folder))
    return folder


def test_random_weights_profile_is_bound_to_the_architecture(tmp_path, capsys):
    folder = _model_dir(tmp_path)
    out = tmp_path / "p.json"
    assert main(["profile", "--model", str(folder), "--random-weights", "--contexts", "8,16", "--repeats", "1",
                 "--max-verify", "3", "--threads", "1", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["schema_version"] == 2 and data["random_weights"] is True and data["compile_mode"] == "eager"
    assert data["device"].startswith("cpu: ") and data["commit"] and data["transformers_version"]
    assert data["architecture"]["model_type"] == "llama" and data["architecture"]["num_hidden_layers"] == 2
    assert len(data["verify_ratios"]) == 3
    said = capsys.readouterr()
    assert "verify(3)/verify(1)" in said.out + said.err and "verify(8)" not in said.out + said.err  # the longest measured
    # the profile of random weights validates against the trained model of that architecture
    assert main(["profile", "--model", str(folder), "--validate", str(out), "--contexts", "8", "--repeats", "1",
                 "--masks", "uniform:0.5", "--threads", "1"]) == 0
    assert "measured / predicted" in capsys.readouterr().out
