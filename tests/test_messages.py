"""Issue 16 items 7, 11 and 13: messages that help, checks before the model loads."""

from __future__ import annotations


import pytest

from layersearch.cli import main
from layersearch.common.errors import LayersearchError


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("layersearch: error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("name", ["SmolLM2-135M", "smollm2-135", "smollm2_135m"])
def test_a_near_miss_of_the_embedded_name_is_suggested(name):
    from layersearch.models.loading import load_model

    with pytest.raises(LayersearchError, match="did you mean the embedded model 'smollm2-135m'"):
        load_model(name)


def test_an_encoder_model_is_told_it_needs_a_decoder_only_causal_lm():
    from transformers import BertConfig, BertLMHeadModel

    from layersearch.models.skipping import decoder_layers

    model = BertLMHeadModel(BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=32, is_decoder=True))
    with pytest.raises(LayersearchError, match="decoder-only causal language model"):
        decoder_layers(model)


def test_a_mask_given_as_a_profile_is_named_for_what_it_is(tmp_path):
    from layersearch.masks.mask import SkipMask
    from layersearch.profiling.profile import LatencyProfile

    path = SkipMask(4, (1,), ()).save(tmp_path / "mask.json")
    with pytest.raises(LayersearchError, match="this is a mask file, not a latency profile"):
        LatencyProfile.load(path)


def test_storage_errors_leave_out_sql_text_and_links():
    import sqlalchemy

    from layersearch.study.storage_safety import driver_text

    exc = sqlalchemy.exc.OperationalError("INSERT INTO trials VALUES (?)", (1,), Exception("attempt to write a readonly database"))
    assert driver_text(exc) == "attempt to write a readonly database"


def test_a_prompt_beyond_the_context_length_fails_before_any_output(tmp_path, capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from layersearch.models.tiny import build_tiny_model

    model = build_tiny_model("llama", num_layers=2, vocab_size=64, seed=0)
    model.config.max_position_embeddings = 64
    backend = Tokenizer(models.WordLevel({f"w{i}": i for i in range(64)}, unk_token="w0"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    model.save_pretrained(tmp_path)
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="w0", eos_token="w2").save_pretrained(tmp_path)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "w5 w6"}\n{"prompt": "' + " ".join(["w7"] * 80) + '"}\n')
    capsys.readouterr()  # save_pretrained's own progress bar
    status = main(["generate", "--model", str(tmp_path), "--prompts", str(prompts), "--max-new-tokens", "4"])
    line = error_line(capsys)
    assert status == 2 and "prompt 2 (80 tokens)" in line and "context length of 64" in line
    assert capsys.readouterr().out == ""  # not even the first prompt's output


def test_a_bad_cache_folder_is_one_line(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "cache-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("LAYERSEARCH_CACHE", str(blocker))
    status = main(["generate", "--prompt", "hello", "--max-new-tokens", "1"])
    assert status == 2 and "LAYERSEARCH_CACHE" in error_line(capsys)


def test_generate_arguments_are_checked_before_the_model_loads(monkeypatch, capsys):
    import layersearch.commands.generate as generate

    monkeypatch.setattr(generate, "load", lambda args: pytest.fail("the model loaded before the arguments were checked"))
    for argv in (["--max-draft", "0"], ["--mask", "uniform:1.5"], ["--threads", "0"], ["--temperature", "nan"],
                 ["--mask", "swift:x"]):
        assert main(["generate", "--prompt", "x", *argv]) == 2
        error_line(capsys)
