"""The user's prompt file as the domain ``file:PATH`` in the commands that train or build from a
domain (steer train, disco train, knn build); chat rows go through the model's chat template."""

from __future__ import annotations

import json

import pytest

from layersearch.cli import main
from layersearch.masks.mask import SkipMask
from layersearch.models.loading import load_model


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def setup(tiny_with_embedded_tokenizer, tmp_path):
    """A tiny model folder with the embedded tokenizer (it has a chat template) and a prompt file
    of plain and chat rows."""
    _, _, folder = tiny_with_embedded_tokenizer(0)
    rows = [{"prompt": f"def double_{i}(x):\n    return"} for i in range(30)]
    rows += [{"messages": [{"role": "user", "content": f"Write function number {i}."}]} for i in range(30)]
    prompts = tmp_path / "mine.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder, f"file:{prompts}"


def test_steer_train_on_a_prompt_file(setup, tmp_path, capsys):
    folder, domain = setup
    out = tmp_path / "steer.safetensors"
    code, _, err = run_cli(capsys, "steer", "train", "--model", folder, "--skip-ratio", "0.5", "--domain", domain,
                           "--prompts", 2, "--new-tokens", 4, "--max-prompt-tokens", 24, "--steps", 2, "--out", out)
    assert code == 0, err
    assert out.is_file()


def test_disco_train_on_a_prompt_file(setup, tmp_path, capsys):
    folder, domain = setup
    out = tmp_path / "disco.json"
    code, _, err = run_cli(capsys, "disco", "train", "--model", folder, "--skip-ratio", "0.25", "--domain", domain,
                           "--train-prompts", 2, "--val-prompts", 1, "--max-new-tokens", 6, "--out", out)
    assert code == 0, err
    assert json.loads(out.read_text())["kind"]


def test_knn_build_on_a_prompt_file(setup, tmp_path, capsys):
    folder, domain = setup
    info = load_model(str(folder)).info
    mask = tmp_path / "m.json"
    SkipMask(4, (1,), (2,), info).save(mask)
    other = tmp_path / "o.json"
    SkipMask(4, (2,), (), info).save(other)
    code, _, err = run_cli(capsys, "knn", "build", "--model", folder, "--samples", 2, "--anchors", 1,
                           "--domain", f"{domain}={mask}", "--domain", f"code={other}", "--out", tmp_path / "r.json")
    assert code == 0, err


@pytest.mark.parametrize("command", [
    ("steer", "train", "--out", "s.safetensors"),
    ("disco", "train", "--out", "d.json"),
])
def test_a_bad_prompt_file_is_one_line_before_the_model_loads(tmp_path, capsys, command, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.jsonl").write_text('{"text": "no prompt key"}\n')
    code, _, err = run_cli(capsys, *command[:2], "--model", tmp_path / "no-model", "--domain", "file:bad.jsonl", *command[2:])
    assert code == 2 and err.count("\n") == 1 and 'either a "prompt" string' in err, err


def test_transfer_on_chat_rows_uses_the_chat_template(tiny_with_embedded_tokenizer, tmp_path, capsys):
    """transfer formats a file: domain's chat rows with the model's chat template (it refused them before)."""
    _, _, folder = tiny_with_embedded_tokenizer(0)
    rows = [{"messages": [{"role": "user", "content": f"Write function number {i}."}]} for i in range(40)]
    prompts = tmp_path / "chat.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = load_model(str(folder)).info
    mask = tmp_path / "m.json"
    SkipMask(4, (1,), (2,), info).save(mask)
    for where in (("--domains", f"file:{prompts}"), ("--domains", "code", "--prompts", prompts)):
        code, out, err = run_cli(capsys, "transfer", "--model", folder, "--mask", f"code={mask}", *where,
                                 "--samples", 2, "--max-new-tokens", 4, "--repeats", 1, "--out-prefix", tmp_path / "t")
        assert code == 0, err
        assert "chat.jsonl" in out
