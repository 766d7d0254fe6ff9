"""The CLI on real files: masks, generation on a saved tiny model, and one-line errors."""

from __future__ import annotations

import json

import pytest

from layersearch.cli import main
from layersearch.models.tiny import build_tiny_model


def save_with_word_tokenizer(model, path):
    """Save ``model`` as an ordinary local model directory, with a small word tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(128)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="w0", eos_token="w2", bos_token="w1")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny Llama saved as an ordinary local model directory, with a small word tokenizer."""
    return save_with_word_tokenizer(build_tiny_model("llama", num_layers=4, vocab_size=128, seed=0), tmp_path_factory.mktemp("tiny"))


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_speculative_generate_equals_baseline(tiny_dir, capsys):
    prompt = "w5 w9 w17 w33 w8 w64 w3"
    common = ["generate", "--model", str(tiny_dir), "--prompt", prompt, "--max-new-tokens", "20", "--json"]
    code, out, _ = run_cli(capsys, *common, "--baseline")
    assert code == 0
    plain = json.loads(out)
    code, out, _ = run_cli(capsys, *common, "--mask", "uniform:0.5", "--draft-threshold", "0")
    assert code == 0
    spec = json.loads(out)
    assert spec["token_ids"] == plain["token_ids"] and len(spec["token_ids"]) > 0
    assert spec["stats"]["mean_accepted_length"] >= 1 and "draft_seconds" in spec["stats"]


def test_mask_create_show_and_generate_with_it(tiny_dir, tmp_path, capsys):
    out_file = tmp_path / "mask.json"
    code, out, _ = run_cli(capsys, "mask", "create", "--model", str(tiny_dir), "--attention", "1,3", "--mlp", "2", "--out", str(out_file))
    assert code == 0 and out_file.exists()
    code, out, _ = run_cli(capsys, "mask", "show", str(out_file))
    assert code == 0 and "attn" in out and "3 of 8 sub-layers skipped" in out
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "w1 w2 w3"}\n{"prompt": "w4 w5"}\n')
    code, out, _ = run_cli(capsys, "generate", "--model", str(tiny_dir), "--mask", str(out_file), "--prompts", str(prompts), "--max-new-tokens", "5", "--json")
    assert code == 0 and len(out.strip().splitlines()) == 2


@pytest.mark.parametrize(
    "content, message",
    [("{oops", "malformed JSON"), ('{"schema_version": 1, "num_layers": 9, "attention": [], "mlp": []}', "9 layers")],
)
def test_bad_mask_file_is_one_line(tiny_dir, tmp_path, capsys, content, message):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code, out, err = run_cli(capsys, "generate", "--model", str(tiny_dir), "--mask", str(bad), "--prompt", "w1")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_mask_create_refuses_out_of_range_and_writes_nothing(tiny_dir, tmp_path, capsys):
    out_file = tmp_path / "mask.json"
    code, _, err = run_cli(capsys, "mask", "create", "--model", str(tiny_dir), "--attention", "7", "--out", str(out_file))
    assert code == 2 and "out of range" in err and not out_file.exists()


def test_usage_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--prompt", "x", "--temperature", "hot"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid float value" in err


def test_bad_prompts_file(tiny_dir, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "w1"}\n{"text": "w2"}\n')
    code, _, err = run_cli(capsys, "generate", "--model", str(tiny_dir), "--prompts", str(prompts))
    assert code == 2 and "p.jsonl:2" in err


def test_batch_of_prompts_via_baseline_and_sampling(tiny_dir, capsys):
    args = ["generate", "--model", str(tiny_dir), "--prompt", "w3 w4", "--max-new-tokens", "8", "--temperature", "0.7", "--seed", "3", "--json", "--mask", "uniform:0.25"]
    first = run_cli(capsys, *args)[1]
    second = run_cli(capsys, *args)[1]
    assert json.loads(first)["token_ids"] == json.loads(second)["token_ids"]


@pytest.mark.parametrize("drafter", ["layer-skip", "prompt-lookup", "hybrid"])
@pytest.mark.parametrize("lookahead", ["static", "confidence", "adaptive", "heuristic"])
def test_generate_with_each_drafter_and_lookahead_equals_baseline(tiny_dir, capsys, drafter, lookahead):
    prompt = "w5 w9 w17 w5 w9 w17 w8 w5 w9"
    common = ["generate", "--model", str(tiny_dir), "--prompt", prompt, "--max-new-tokens", "16", "--json"]
    code, out, _ = run_cli(capsys, *common, "--baseline")
    plain = json.loads(out)
    code, out, err = run_cli(capsys, *common, "--mask", "uniform:0.5", "--drafter", drafter, "--lookahead", lookahead,
                             "--draft-threshold", "0.05", "--max-draft", "4")
    assert code == 0, err
    spec = json.loads(out)
    assert spec["token_ids"] == plain["token_ids"]
    used = set(spec["stats"]["drafters"])
    assert used <= {"none", drafter, "layer-skip", "prompt-lookup"}
    assert len(spec["stats"]["accept_lengths"]) == spec["stats"]["target_forwards"]


@pytest.mark.parametrize("drafter", ["layer-skip", "hybrid"])
def test_generate_with_tree_verification_equals_baseline(tiny_dir, capsys, drafter):
    prompt = "w5 w9 w17 w5 w9 w17 w8 w5 w9"
    common = ["generate", "--model", str(tiny_dir), "--prompt", prompt, "--max-new-tokens", "24", "--json"]
    code, out, _ = run_cli(capsys, *common, "--baseline")
    plain = json.loads(out)
    code, out, err = run_cli(capsys, *common, "--mask", "uniform:0.5", "--drafter", drafter, "--verifier", "tree",
                             "--max-draft", "25", "--draft-threshold", "0.05")
    assert code == 0, err
    assert json.loads(out)["token_ids"] == plain["token_ids"]


# ----- sliding-window families, refused families, unforeseen errors ---------------------------


@pytest.mark.parametrize("family", ["mistral", "gemma2"])
def test_generate_with_a_mask_beyond_the_sliding_window(tmp_path, capsys, family):
    # The report: a prompt longer than the window ended in a traceback from the cache.
    folder = save_with_word_tokenizer(build_tiny_model(family, num_layers=4, sliding_window=4, seed=1), tmp_path / family)
    mask = tmp_path / "mask.json"
    assert run_cli(capsys, "mask", "create", "--model", str(folder), "--attention", "0,2", "--mlp", "1", "--out", str(mask))[0] == 0
    prompt = " ".join(f"w{i}" for i in (5, 9, 17, 33, 8, 64, 3, 12, 40, 77, 21, 90, 6, 55))  # 3.5 windows
    common = ["generate", "--model", str(folder), "--prompt", prompt, "--max-new-tokens", "24", "--json"]
    code, out, err = run_cli(capsys, *common, "--baseline")
    assert code == 0, err
    plain = json.loads(out)["token_ids"]
    code, out, err = run_cli(capsys, *common, "--mask", str(mask), "--draft-threshold", "0")
    assert code == 0, err
    assert json.loads(out)["token_ids"] == plain


def test_unsupported_family_is_one_line(tmp_path, capsys):
    from transformers import GPTNeoXConfig

    GPTNeoXConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4).save_pretrained(tmp_path)
    code, out, err = run_cli(capsys, "generate", "--model", str(tmp_path), "--prompt", "w1", "--mask", "uniform:0.5")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "'gpt_neox' is not supported" in err


def test_an_unforeseen_runtime_error_is_one_line(tiny_dir, capsys, monkeypatch):
    import layersearch.commands.generate as generate

    def broken(args):
        raise RuntimeError("cache layer exploded\nsecond line of a library message")

    monkeypatch.setattr(generate, "run", broken)
    monkeypatch.delenv("LAYERSEARCH_DEBUG", raising=False)
    code, out, err = run_cli(capsys, "generate", "--model", str(tiny_dir), "--prompt", "w1")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("layersearch: error: cache layer exploded (RuntimeError")
    monkeypatch.setenv("LAYERSEARCH_DEBUG", "1")
    with pytest.raises(RuntimeError):
        main(["generate", "--model", str(tiny_dir), "--prompt", "w1"])


def test_version_prints_the_package_version(capsys):
    import layersearch

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"layersearch {layersearch.__version__}"


def test_help_names_every_kind_of_draft(capsys):
    """``--help`` and pyproject.toml's description say what the tool drafts with, not only layer skips."""
    import re
    from pathlib import Path

    from layersearch.cli import DESCRIPTION

    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert " ".join(DESCRIPTION.split()) in text
    pyproject = (Path(__file__).parent.parent / "pyproject.toml").read_text(encoding="utf-8")
    described = re.search(r'^description = "([^"]*)"', pyproject, re.MULTILINE).group(1)
    for words in ("draft plans", "int8", "prompt lookup", "draft models"):
        assert words in DESCRIPTION and words in described
