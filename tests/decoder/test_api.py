"""``layersearch.load_decoder``: greedy output equals the model's own ``generate``, transformers
streamers get exactly the generated tokens, chats go through the chat template."""

from __future__ import annotations

import threading

from pathlib import Path
import pytest
import torch

import layersearch
from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DecoderSpec, LookaheadSpec, MaskSourceSpec, ModelRef, ModelSpec

PROMPT = "w5 w9 w17 w33 w8 w64 w3 w5 w9"


def spec_for(folder, **fields) -> DecoderSpec:
    return DecoderSpec(ModelSpec(ModelRef(str(folder), True)), mask_source=MaskSourceSpec("uniform", skip_ratio=0.5),
                       lookahead=LookaheadSpec("static", 3), max_new_tokens=20, **fields)


@pytest.fixture(scope="module")
def decoder(tiny_word_models):
    return layersearch.load_decoder(spec_for(tiny_word_models[0]))


def test_greedy_equals_the_models_generate(decoder):
    ids = decoder.tokenizer(PROMPT, return_tensors="pt").input_ids
    plain = decoder.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, do_sample=False)
    out = decoder.generate(PROMPT)
    assert list(out.token_ids) == plain[0, ids.shape[1]:].tolist() and len(out.token_ids) == 20
    assert out.stats.drafted > 0 and out.text == decoder.tokenizer.decode(list(out.token_ids), skip_special_tokens=True)
    assert decoder.generate(ids[0].tolist(), max_new_tokens=7).token_ids == out.token_ids[:7]  # ids in, same tokens
    with pytest.raises(Exception):
        out.text = "x"  # a frozen value


def test_a_spec_file_and_a_loaded_model(decoder, tiny_word_models, tmp_path):
    path = decoder.spec.save(tmp_path / "spec.json")
    from_file = layersearch.load_decoder(path, model=(decoder.model, decoder.tokenizer))
    assert from_file.model is decoder.model  # not loaded again
    assert from_file.generate(PROMPT).token_ids == decoder.generate(PROMPT).token_ids
    assert from_file.spec.model.info == decoder.spec.model.info
    from layersearch.models.tiny import build_tiny_model

    other = build_tiny_model("llama", num_layers=2, vocab_size=128, seed=3)
    with pytest.raises(LayersearchError, match="spec was made for model"):
        layersearch.load_decoder(path, model=(other, decoder.tokenizer))


def test_sampling_is_seeded_and_overridable(decoder):
    first = decoder.generate(PROMPT, do_sample=True, temperature=0.8, seed=5)
    assert decoder.generate(PROMPT, do_sample=True, temperature=0.8, seed=5).token_ids == first.token_ids
    assert len({decoder.generate(PROMPT, do_sample=True, seed=s).token_ids for s in range(4)}) > 1


def test_streamers_get_exactly_the_generated_tokens(decoder):
    from transformers import TextIteratorStreamer
    from transformers.generation.streamers import BaseStreamer

    class Collect(BaseStreamer):
        def __init__(self):
            self.puts = []
            self.ended = False

        def put(self, value):
            self.puts.append(value.reshape(-1).tolist())

        def end(self):
            self.ended = True

    collect = Collect()
    out = decoder.generate(PROMPT, streamer=collect)
    prompt = decoder.tokenizer(PROMPT).input_ids
    assert collect.puts[0] == prompt and collect.ended
    assert sum(collect.puts[1:], []) == list(out.token_ids)
    assert len(collect.puts) - 1 == out.stats.target_forwards + 1  # prefill, then one put per step

    streamer = TextIteratorStreamer(decoder.tokenizer, skip_prompt=True, skip_special_tokens=True)
    result = {}
    worker = threading.Thread(target=lambda: result.update(out=decoder.generate(PROMPT, streamer=streamer)))
    worker.start()
    text = "".join(streamer)
    worker.join()
    assert text.split() == result["out"].text.split() and text.strip()


def test_chat_messages_use_the_chat_template(decoder):
    messages = [{"role": "user", "content": "w5 w9 w17"}]
    with pytest.raises(LayersearchError, match="no chat template"):
        decoder.generate(messages)
    decoder.tokenizer.chat_template = "{% for m in messages %}w1 {{ m['content'] }} {% endfor %}w3"
    try:
        out = decoder.generate(messages, max_new_tokens=6)
        assert out.token_ids == decoder.generate("w1 w5 w9 w17 w3", max_new_tokens=6).token_ids
        with pytest.raises(LayersearchError, match="the chat: message 0 must be an object"):
            decoder.generate([{"role": "user"}])
    finally:
        decoder.tokenizer.chat_template = None
    with pytest.raises(LayersearchError, match="the prompt must be"):
        decoder.generate(3.5)


def test_a_plain_spec_streams_too(tiny_word_models):
    from transformers.generation.streamers import BaseStreamer

    plain = layersearch.load_decoder(DecoderSpec(ModelSpec(ModelRef(str(tiny_word_models[0]), True)), plain=True))
    seen = []

    class Collect(BaseStreamer):
        def put(self, value):
            seen.append(value.reshape(-1).tolist())

        def end(self):
            seen.append("end")

    out = plain.generate(PROMPT, max_new_tokens=5, streamer=Collect())
    assert seen[1] == list(out.token_ids) and seen[-1] == "end" and out.stats.drafted == 0


def test_import_layersearch_stays_light():
    import subprocess
    import sys

    code = "import sys, layersearch; layersearch.DecoderSpec; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_sampling_follows_the_temperature(decoder):
    """One rule with the CLI and spec files: a temperature > 0 samples without do_sample (as
    ``--temperature`` does), so two seeds differ, and the same seed repeats."""
    first = decoder.generate(PROMPT, max_new_tokens=12, temperature=5.0, seed=1)
    assert decoder.generate(PROMPT, max_new_tokens=12, temperature=5.0, seed=1).token_ids == first.token_ids
    assert len({decoder.generate(PROMPT, max_new_tokens=12, temperature=5.0, seed=s).token_ids for s in range(4)}) > 1
    assert decoder.generate(PROMPT, max_new_tokens=12, temperature=0).token_ids == decoder.generate(PROMPT, max_new_tokens=12).token_ids


def test_the_package_exports_its_error_and_version():
    import layersearch
    from layersearch import LayersearchError as exported
    from layersearch.common.errors import LayersearchError as defined

    assert exported is defined
    assert isinstance(layersearch.__version__, str) and layersearch.__version__[0].isdigit()
    assert (Path(layersearch.__file__).parent / "py.typed").is_file()


def test_dir_shows_the_public_api_only():
    """``dir(layersearch)`` lists what a user may call (no typing helper, future import or subpackage)."""
    import layersearch
    import layersearch.common.errors  # noqa: F401 (binds the subpackage as an attribute)

    public = [name for name in dir(layersearch) if not name.startswith("_")]
    assert public == sorted(name for name in layersearch.__all__ if not name.startswith("_"))
    for name in public:
        assert getattr(layersearch, name) is not None
    assert layersearch.common.errors.LayersearchError is layersearch.LayersearchError  # attribute access still works


def test_capture_stats_count_the_captured_forwards(tiny_word_models):
    """``Decoder.capture_stats()``: a captured run compiles its shapes once (misses, compile
    seconds), the same run again only hits them; an eager decoder adds nothing; a plain spec has none."""
    from layersearch.models.loading import load_model
    from tests.capture import cheap_capture

    loaded = load_model(str(tiny_word_models[0]))
    cheap_capture(loaded.model)
    eager = layersearch.load_decoder(spec_for(tiny_word_models[0], compile="off"), model=loaded)
    assert eager.generate(PROMPT, max_new_tokens=6).stats.path == "eager"
    assert eager.capture_stats().entries == 0 and eager.capture_stats().hit_rate is None
    captured = layersearch.load_decoder(spec_for(tiny_word_models[0], compile="on"), model=loaded)
    assert captured.generate(PROMPT, max_new_tokens=6).stats.path == "captured"
    first = captured.capture_stats()
    assert first.entries == first.misses >= 1 and first.compile_seconds > 0
    captured.generate(PROMPT, max_new_tokens=6)
    again = captured.capture_stats()
    assert again.misses == first.misses and again.hits > first.hits and again.compile_seconds == first.compile_seconds
    assert eager.capture_stats() == again  # one table per model, shared by its decoders
    plain = layersearch.load_decoder(DecoderSpec(ModelSpec(ModelRef(str(tiny_word_models[0]), True)), plain=True), model=loaded)
    assert plain.capture_stats() is None


@pytest.mark.parametrize("call, says", [
    (lambda d: layersearch.load_decoder(d.spec, foo=1), "load_decoder() got an unexpected argument 'foo'; "
                                                        "it takes spec_or_path, model and, by keyword, kernels"),
    (lambda d: layersearch.load_decoder(d.spec, None, "stock"), "load_decoder(): too many positional arguments"),
    (lambda d: d.generate(PROMPT, max_tokens=3), "Decoder.generate() got an unexpected argument 'max_tokens' (did you "
                                                 "mean 'max_new_tokens'?); it takes prompt_or_ids, max_new_tokens and, "
                                                 "by keyword, do_sample, temperature, top_p, seed, streamer"),
    (lambda d: d.generate(), "Decoder.generate(): missing a required argument: 'prompt_or_ids'"),
    (lambda d: d.encode(PROMPT, 3), "Decoder.encode(): too many positional arguments; it takes prompt_or_ids"),
    (lambda d: layersearch.decoding(d.spec, kernel="stock"), "decoding() got an unexpected argument 'kernel' (did you "
                                                             "mean 'kernels'?); it takes spec_or_path and, by keyword"),
])
def test_an_unexpected_argument_is_a_layersearch_error(decoder, call, says):
    """The API raises LayersearchError for every bad argument, a misspelt or extra one included."""
    with pytest.raises(LayersearchError) as error:
        call(decoder)
    assert str(error.value).startswith(says), str(error.value)


def test_help_shows_the_real_signatures():
    import inspect

    assert str(inspect.signature(layersearch.load_decoder)).startswith("(spec_or_path: 'DecoderSpec | str | Path', model")
    assert list(inspect.signature(layersearch.Decoder.generate).parameters)[:3] == ["self", "prompt_or_ids", "max_new_tokens"]
    assert list(inspect.signature(layersearch.decoding).parameters) == ["spec_or_path", "kernels", "seed", "tokenizer"]


def _looping_model(seed: int = 0):
    """A random 4-layer Llama without an end-of-sequence token: its greedy output falls into a loop."""
    from layersearch.models.tiny import build_tiny_model

    model = build_tiny_model("llama", num_layers=4, seed=seed)
    model.generation_config.eos_token_id = None
    return model


class _IdsTokenizer:
    """A stand-in tokenizer for a model fed token ids."""

    def __call__(self, text, **kwargs):
        raise AssertionError("prompts here are token ids")

    def decode(self, ids, **kwargs):
        return " ".join(map(str, ids))


def test_a_spec_naming_only_a_model_speculates_by_prompt_lookup_and_stays_lossless():
    """``DecoderSpec(model)`` drafts (prompt lookup, the documented default) where it once decoded
    plainly: more than one token per step on a repeating text, the same tokens as plain fp32 greedy."""
    model = _looping_model()
    decoder = layersearch.load_decoder(DecoderSpec("tiny"), model=(model, _IdsTokenizer()))
    assert decoder.spec.drafter.name == "prompt-lookup" and decoder.spec.mask_source.kind == "none"
    prompt = [5, 9, 17, 33, 8, 64, 3] * 2
    out = decoder.generate(prompt, max_new_tokens=32)
    plain = model.generate(torch.tensor([prompt]), max_new_tokens=32, do_sample=False)[0, len(prompt):].tolist()
    assert list(out.token_ids) == plain
    assert out.stats.mean_accepted_length > 1.5 and out.stats.accepted > 0


def test_the_embedded_model_named_alone_speculates_on_a_repeating_prompt(embedded_dir):
    from layersearch.models.loading import load_model

    loaded = load_model(str(embedded_dir), device="cpu", dtype="float32")
    decoder = layersearch.load_decoder(DecoderSpec(ModelSpec(ModelRef(str(embedded_dir), True))), model=loaded)
    prompt = ("Copy the list exactly.\nList: apple, banana, cherry, date, elderberry, fig, grape\n"
              "Copy: apple, banana, cherry, date, elderberry, fig, grape\nList: red, green, blue, cyan, magenta\nCopy:")
    out = decoder.generate(prompt, max_new_tokens=12)
    ids = decoder.encode(prompt)
    plain = loaded.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
    assert list(out.token_ids) == plain[0, ids.shape[1]:].tolist()
    assert decoder.spec.drafter.name == "prompt-lookup" and out.stats.mean_accepted_length > 2  # the copy is looked up


def test_int4_is_refused_alike_on_a_float16_model_and_on_one_moved_to_float16():
    """The twins' dtype is checked when a decoder runs, not only when it is built: a decoder built
    on a float32 model refuses to run after ``model.to(torch.float16)``, as loading in float16 does."""
    from layersearch.masks.mask import SkipMask

    plan = SkipMask(4, (), int4_mlp=(0, 1), int4_group_size=32)
    spec = DecoderSpec("tiny", mask_source=plan, lookahead=LookaheadSpec("static", 3))
    with pytest.raises(LayersearchError) as loaded_fp16:
        layersearch.load_decoder(spec, model=(_looping_model().to(torch.float16), _IdsTokenizer()))
    model = _looping_model()
    decoder = layersearch.load_decoder(spec, model=(model, _IdsTokenizer()))
    assert len(decoder.generate([5, 9, 17], max_new_tokens=4).token_ids) == 4  # float32: runs
    model.to(torch.float16)
    with pytest.raises(LayersearchError) as moved_fp16:
        decoder.generate([5, 9, 17], max_new_tokens=4)
    assert str(moved_fp16.value) == str(loaded_fp16.value)
    assert "from float32 or bfloat16 weights, not float16" in str(moved_fp16.value)
