"""``layersearch steer train | eval`` and ``generate --steering`` on saved tiny models."""

from __future__ import annotations

import json

from layersearch.cli import main
from layersearch.models.tiny import build_tiny_model
from layersearch.steer import SteeringFile


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_train_eval_and_generate_with_the_self_drafter(tiny_with_embedded_tokenizer, tmp_path, capsys):
    _, _, folder = tiny_with_embedded_tokenizer(0)
    out = tmp_path / "steer.safetensors"
    code, stdout, err = run_cli(
        capsys, "steer", "train", "--model", folder, "--skip-ratio", "0.5", "--domain", "code", "--prompts", 2,
        "--new-tokens", 6, "--max-prompt-tokens", 24, "--steps", 4, "--out", out,
    )
    assert code == 0, err
    assert "4 steps" in stdout and "held-out KL" in stdout and str(out) in stdout
    steering = SteeringFile.load(out)
    assert steering.drafter is None and not steering.mask.is_empty
    assert steering.training["domain"] == "code" and steering.training["steps"] == 4
    assert steering.training["val_prompts"] == 2 and steering.training["val_kl_after"] >= 0
    assert steering.params.s.weight.abs().sum() > 0  # trained away from its zero start

    report = tmp_path / "eval.json"
    code, stdout, err = run_cli(
        capsys, "steer", "eval", "--model", folder, "--steering", out, "--domain", "code", "--prompts", 1,
        "--max-new-tokens", 6, "--max-prompt-tokens", 24, "--seeds", 2, "--out", report,
    )
    assert code == 0, err
    data = json.loads(report.read_text())
    assert set(data["summary"]) == {"T=0", "T=1"}
    assert len(data["summary"]["T=1"]["arms"]["steered"]["block_efficiency_per_seed"]) == 2
    assert len(data["runs"]) == 3 * 3 and all(r["new_tokens"] == 6 for r in data["runs"])
    assert all(1 <= r["block_efficiency"] <= 9 for r in data["runs"])
    assert "T=0:" in stdout and "W_s g" in stdout
    # The plain arm drafts nothing: one token per forward (the prefill gives the first); the
    # others are timed against it.
    plain = [r for r in data["runs"] if r["arm"] == "plain"]
    assert len(plain) == 3
    assert all(r["verifications"] == r["new_tokens"] - 1 and r["block_efficiency"] == 6 / 5 for r in plain)
    assert all(r["draft_ms_per_forward"] == 0 for r in plain) and all(r["draft_ms_per_forward"] > 0 for r in data["runs"][1:3])
    for setting in data["summary"].values():
        ratios = setting["speedup_vs_plain"]
        assert set(ratios) == {"unsteered", "steered"}
        for arm, ratio in ratios.items():
            assert ratio == setting["arms"][arm]["tokens_per_second"] / setting["arms"]["plain"]["tokens_per_second"]
    assert "plain M=" in stdout and "vs plain: unsteered x" in stdout

    common = ("generate", "--model", folder, "--prompt", "def add(a, b):", "--max-new-tokens", 12, "--json")
    code, stdout, err = run_cli(capsys, *common, "--steering", out, "--draft-threshold", 0)
    assert code == 0, err
    steered = json.loads(stdout)
    code, stdout, err = run_cli(capsys, *common, "--baseline")
    assert steered["token_ids"] == json.loads(stdout)["token_ids"]
    assert steered["stats"]["drafted"] > 0


def test_train_and_eval_an_independent_drafter(tiny_with_embedded_tokenizer, tmp_path, capsys):
    _, tokenizer, folder = tiny_with_embedded_tokenizer(0)
    small = build_tiny_model("llama", num_layers=1, hidden_size=32, vocab_size=len(tokenizer), seed=9)
    small_dir = tmp_path / "small"
    small.save_pretrained(small_dir)
    tokenizer.save_pretrained(small_dir)
    out = tmp_path / "steer.safetensors"
    code, stdout, err = run_cli(
        capsys, "steer", "train", "--model", folder, "--drafter", small_dir, "--domain", "code", "--prompts", 1,
        "--new-tokens", 4, "--max-prompt-tokens", 16, "--steps", 2, "--val-prompts", 0, "--out", out,
    )
    assert code == 0, err
    steering = SteeringFile.load(out)
    assert steering.mask is None and steering.drafter.hidden_size == 32
    assert tuple(steering.params.hml.weight.shape) == (32, 3 * 64)
    code, stdout, err = run_cli(
        capsys, "steer", "eval", "--model", folder, "--steering", out, "--drafter", small_dir, "--domain", "code",
        "--prompts", 1, "--max-new-tokens", 4, "--max-prompt-tokens", 16, "--seeds", 1,
    )
    assert code == 0, err
    assert "steered M=" in stdout and "unsteered M=" in stdout
    # Steering an int8 copy of the drafter: the weights are checked before quantizing, the output
    # stays identical to plain decoding.
    common = ("generate", "--model", folder, "--prompt", "def add(a, b):", "--max-new-tokens", 8, "--json")
    code, stdout, err = run_cli(capsys, *common, "--steering", out, "--draft-model", small_dir, "--draft-quant", "int8",
                                "--draft-threshold", 0)
    assert code == 0, err
    steered = json.loads(stdout)
    code, stdout, err = run_cli(capsys, *common, "--baseline")
    assert steered["token_ids"] == json.loads(stdout)["token_ids"] and steered["stats"]["drafted"] > 0
    # The self-drafter's steering is refused for a draft model, in one line.
    code, stdout, err = run_cli(capsys, "generate", "--model", small_dir, "--steering", out, "--prompt", "x")
    assert code == 2 and err.startswith("layersearch: error: ") and len(err.strip().splitlines()) == 1


def test_shrink_finetune_and_generate_with_the_finetuned_drafter(tiny_with_embedded_tokenizer, tmp_path, capsys):
    """shrink -> train --finetune-drafter -> the file names the fine-tuned directory, which
    loads, and generate --steering uses it by default, token-identical to plain decoding."""
    from safetensors.torch import load_file

    from layersearch.models.loading import load_model

    _, _, folder = tiny_with_embedded_tokenizer(0)
    small = tmp_path / "small"
    code, stdout, err = run_cli(capsys, "steer", "shrink", "--model", folder, "--keep-layers", 2, "--out", small)
    assert code == 0, err
    assert "kept layers 0, 3 of 4" in stdout and load_model(str(small)).info.num_layers == 2
    tuned, out = tmp_path / "tuned", tmp_path / "steer.safetensors"
    train = ("steer", "train", "--model", folder, "--drafter", small, "--domain", "code", "--prompts", 2,
             "--new-tokens", 6, "--max-prompt-tokens", 24, "--steps", 4, "--val-prompts", 1)
    code, stdout, err = run_cli(capsys, *train, "--finetune-drafter", tuned, "--drafter-lr", "1e-3", "--out", out)
    assert code == 0, err
    assert f"wrote {tuned}" in stdout and "held-out KL" in stdout
    steering = SteeringFile.load(out)
    assert steering.drafter.name == str(tuned) and steering.training["drafter_lr"] == 1e-3
    assert steering.training["finetuned_from"]["name"] == str(small)
    before, after = load_file(small / "model.safetensors"), load_file(tuned / "model.safetensors")
    assert before.keys() == after.keys()
    changed = {name for name in before if not (before[name] == after[name]).all()}
    assert changed and not any("embed_tokens" in name or "lm_head" in name for name in changed)
    assert not list(tmp_path.glob(".tuned*"))  # no temporary directory left behind

    common = ("generate", "--model", folder, "--prompt", "def add(a, b):", "--max-new-tokens", 12, "--json")
    code, stdout, err = run_cli(capsys, *common, "--steering", out, "--draft-threshold", 0)
    assert code == 0, err
    steered = json.loads(stdout)
    code, stdout, err = run_cli(capsys, *common, "--baseline")
    assert steered["token_ids"] == json.loads(stdout)["token_ids"] and steered["stats"]["drafted"] > 0

    # The drafter before fine-tuning has the same structure (fingerprint) but not the weights the
    # steering was trained with: refused in one line, by generate and by steer eval.
    for argv in ((*common, "--steering", out, "--draft-model", small),
                 (*common, "--steering", out, "--draft-model", small, "--draft-quant", "int8"),
                 ("steer", "eval", "--model", folder, "--steering", out, "--drafter", small, "--domain", "code",
                  "--prompts", 1, "--max-new-tokens", 2, "--seeds", 1)):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and "weights differ" in err and len(err.strip().splitlines()) == 1, err

    # A non-empty target directory is refused before any work, and nothing is written.
    again = tmp_path / "again.safetensors"
    code, stdout, err = run_cli(capsys, *train, "--finetune-drafter", tuned, "--out", again)
    assert code == 2 and "not empty" in err and len(err.strip().splitlines()) == 1 and not again.exists()


def test_shrink_gives_the_umask_modes_and_keeps_an_empty_folders_own(tiny_with_embedded_tokenizer, tmp_path, capsys):
    """Issue 33: the new model folder reads like any the user makes (safetensors saves 0600 and a
    temporary folder is 0700); an existing empty --out folder keeps its mode."""
    import os
    import stat

    _, _, folder = tiny_with_embedded_tokenizer(0)
    kept = tmp_path / "kept"
    kept.mkdir(mode=0o700)
    old = os.umask(0o022)
    try:
        for out in (tmp_path / "small", kept):
            code, _, err = run_cli(capsys, "steer", "shrink", "--model", folder, "--keep-layers", 2, "--out", out)
            assert code == 0, err
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "small").stat().st_mode) == 0o755 and stat.S_IMODE(kept.stat().st_mode) == 0o700
    for out in (tmp_path / "small", kept):
        assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o644}
