"""``layersearch bench`` options that name draft models and lookahead rules: parsed below the
model load, refused in one line when malformed."""

from __future__ import annotations

import json

import pytest

from layersearch.cli import main


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("option, value, fragment", [
    ("--peers", "assisted", "unknown item 'assisted'"),
    ("--peers", "assisted:", "unknown item 'assisted:'"),
    ("--peers", "speculative:x", "choose from prompt-lookup, early-exit, assisted:MODEL"),
    ("--drafters", "model", "unknown item 'model'"),
    ("--drafters", "prompt-lookup:x", "unknown item"),
    ("--lookaheads", "confidence,fast", "unknown rule 'fast'"),
])
def test_malformed_options_are_one_line(capsys, tmp_path, option, value, fragment):
    code, _, err = run_cli(capsys, "bench", "--model", tmp_path / "nowhere", option, value, "--out", tmp_path / "b.json")
    assert code == 2 and err.strip().count("\n") == 0 and fragment in err, err
    assert not (tmp_path / "b.json").exists()


def test_a_draft_model_with_another_vocabulary_is_refused(capsys, tiny_with_embedded_tokenizer, tmp_path):
    from layersearch.models.tiny import build_tiny_model

    _, tokenizer, verifier = tiny_with_embedded_tokenizer(0)
    build_tiny_model("llama", num_layers=1, vocab_size=128).save_pretrained(tmp_path / "other")
    tokenizer.save_pretrained(tmp_path / "other")
    code, _, err = run_cli(capsys, "bench", "--model", verifier, "--drafters", f"model:{tmp_path / 'other'}",
                           "--out", tmp_path / "b.json")
    assert code == 2 and "vocabulary" in err and not (tmp_path / "b.json").exists()


def test_bench_with_a_draft_model_end_to_end(capsys, tiny_with_embedded_tokenizer, tmp_path):
    from layersearch.models.tiny import build_tiny_model

    _, tokenizer, verifier = tiny_with_embedded_tokenizer(0)
    small = build_tiny_model("llama", num_layers=1, hidden_size=32, vocab_size=len(tokenizer), seed=9)
    small.save_pretrained(tmp_path / "small")
    tokenizer.save_pretrained(tmp_path / "small")
    out = tmp_path / "bench.json"
    code, stdout, err = run_cli(
        capsys, "bench", "--model", verifier, "--domains", "code", "--prompts-per-domain", 1, "--max-new-tokens", 6,
        "--repeats", 1, "--skip-ratios", "", "--peers", f"assisted:{tmp_path / 'small'}",
        "--drafters", f"model:{tmp_path / 'small'}", "--lookaheads", "heuristic", "--out", out,
    )
    assert code == 0, err
    rows = {r["config"]: r for r in json.loads(out.read_text())["domains"]["code"]["rows"]}
    assert rows["hf assisted (small)"]["identical_to_plain"] is True
    assert rows["ours: model (small) [heuristic]"]["identical_to_plain"] is True
    assert "ours: model (small) [heuristic]" in stdout


def test_bench_with_int8_draft_models(capsys, tiny_with_embedded_tokenizer, tmp_path):
    """``MODEL@int8`` rows beside the fp32 ones: the same model loaded once, outputs still exact."""
    _, _, verifier = tiny_with_embedded_tokenizer(0)
    out = tmp_path / "bench.json"
    code, stdout, err = run_cli(
        capsys, "bench", "--model", verifier, "--domains", "code", "--prompts-per-domain", 1, "--max-new-tokens", 8,
        "--repeats", 1, "--skip-ratios", "", "--peers", f"assisted:{verifier}@int8",
        "--drafters", f"model:{verifier},model:{verifier}@int8,hybrid:{verifier}@int8", "--lookaheads", "static",
        "--out", out,
    )
    assert code == 0, err
    rows = {r["config"]: r for r in json.loads(out.read_text())["domains"]["code"]["rows"]}
    for label in ("hf assisted (tiny int8)", "ours: model (tiny) [static]", "ours: model (tiny int8) [static]",
                  "ours: hybrid (tiny int8) [static]"):
        assert rows[label]["identical_to_plain"] is True, label
    assert rows["ours: model (tiny int8) [static]"]["alpha"] > 0.5  # an int8 copy of the target mostly agrees with it
    assert err.count("loading draft model") == 1


def test_an_int8_draft_in_half_precision_is_refused_before_loading(capsys, tmp_path):
    code, _, err = run_cli(capsys, "bench", "--model", tmp_path / "nowhere", "--dtype", "bfloat16",
                           "--drafters", "model:small@int8", "--out", tmp_path / "b.json")
    assert code == 2 and "quantizes float32 weights" in err and err.strip().count("\n") == 0, err


def test_bench_on_the_users_own_prompts(capsys, tiny_with_embedded_tokenizer, tmp_path):
    _, _, verifier = tiny_with_embedded_tokenizer(0)
    rows = [{"prompt": f"def f{i}(x): return x + {i}"} for i in range(20)]
    rows += [{"messages": [{"role": "user", "content": f"Add {i} and {i + 1}."}]} for i in range(20)]
    prompts = tmp_path / "mine.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "bench.json"
    code, stdout, err = run_cli(
        capsys, "bench", "--model", verifier, "--prompts", prompts, "--prompts-per-domain", 3, "--max-new-tokens", 4,
        "--repeats", 1, "--skip-ratios", "0.5", "--peers", "", "--drafters", "", "--out", out,
    )
    assert code == 0, err
    domains = json.loads(out.read_text())["domains"]
    assert list(domains) == [f"file:{prompts}"]
    assert all(r["identical_to_plain"] for r in domains[f"file:{prompts}"]["rows"])


def test_captured_rows_are_timed_after_their_compiling(capsys, tiny_with_embedded_tokenizer, tmp_path, monkeypatch):
    """``--compile on``: one untimed generation per configuration compiles its shapes first, so
    the measured runs hold no compiling (dynamo's cheap backend stands in for inductor here)."""
    from layersearch.runtime import backend as runtime_backend

    real = runtime_backend.dynamo_compiler
    monkeypatch.setattr(runtime_backend, "dynamo_compiler", lambda backend="inductor": real("eager"))
    _, _, folder = tiny_with_embedded_tokenizer(0)
    out = tmp_path / "bench.json"
    code, _, err = run_cli(capsys, "bench", "--model", folder, "--domains", "code", "--prompts-per-domain", 1,
                           "--max-new-tokens", 6, "--repeats", 1, "--skip-ratios", "0.25", "--peers", "", "--drafters", "",
                           "--lookaheads", "static", "--compile", "on", "--threads", 1, "--out", out)
    assert code == 0, err
    assert "compiling: one untimed generation per configuration" in err  # before the timed repeats
    ours = [r for r in json.loads(out.read_text())["domains"]["code"]["rows"] if r["config"].startswith("ours")]
    assert len(ours) == 2 and all(r["path"] == "captured" and r["identical_to_plain"] for r in ours), ours
    assert all(r["compile_seconds"] == 0 for r in ours), [r["compile_seconds"] for r in ours]
