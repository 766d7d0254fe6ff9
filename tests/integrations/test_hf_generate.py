"""``model.generate(custom_generate=layersearch.decoding(spec))``: greedy output equals plain
``generate`` token by token (skip, int8 and prompt-lookup specs; tiny Llama and Qwen2; eager and
captured; the embedded model end to end), sampling follows our own Decoder with the same seed and
the model's exact law, streamers and ``return_dict_in_generate`` get what plain ``generate`` gives
them, pipelines return plain greedy's text, and the decoder is built once per model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import layersearch
from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DecoderSpec, DrafterSpec, LookaheadSpec, MaskSourceSpec, ModelRef, ModelSpec
from layersearch.integrations.hf_generate import LayersearchGenerateOutput
from layersearch.models.tiny import build_tiny_model
from tests.capture import captured

PROMPT = [5, 9, 17, 33, 8, 64, 3, 5, 9, 17, 33, 8]  # repeats, so prompt lookup finds matches
SPECS = {
    "skip": dict(mask_source=MaskSourceSpec("uniform", skip_ratio=0.5), lookahead=LookaheadSpec("static", 3)),
    "int8": dict(drafter=DrafterSpec(quant="int8"), mask_source=MaskSourceSpec("uniform", skip_ratio=0.25),
                 lookahead=LookaheadSpec("static", 3)),
    "prompt-lookup": dict(drafter=DrafterSpec("prompt-lookup"), lookahead=LookaheadSpec("static", 3)),
}


def spec_of(kind: str, path: str = "eager", ref: str = "tiny") -> DecoderSpec:
    return DecoderSpec(ModelSpec(ModelRef(ref)), compile="on" if captured(path) else "off", **SPECS[kind])


@pytest.mark.parametrize("kind", SPECS)
@pytest.mark.parametrize("family", ["tiny_llama", "tiny_qwen2"])
def test_greedy_equals_plain_generate(request, family, kind, decode_path):
    model = request.getfixturevalue(family)
    ids = torch.tensor([PROMPT])
    plain = model.generate(ids, max_new_tokens=16, do_sample=False)
    method = layersearch.decoding(spec_of(kind, decode_path))
    out = model.generate(ids, max_new_tokens=16, do_sample=False, custom_generate=method)
    assert out.tolist() == plain.tolist() and out.shape == (1, len(PROMPT) + 16)
    stats = method.last_stats
    assert stats.drafted > 0 and stats.path == ("captured" if captured(decode_path) else "eager"), stats.path_reason


def test_max_length_and_several_eos_ids(tiny_llama):
    ids = torch.tensor([PROMPT])
    method = layersearch.decoding(spec_of("skip"))
    plain = tiny_llama.generate(ids, max_length=len(PROMPT) + 9, do_sample=False)
    assert tiny_llama.generate(ids, max_length=len(PROMPT) + 9, custom_generate=method).tolist() == plain.tolist()
    # stop at the first of two end-of-sequence ids, as plain generate does (tokens 4 and 5 of its run)
    eos = plain[0, len(PROMPT) + 3:len(PROMPT) + 5].tolist()
    plain_eos = tiny_llama.generate(ids, max_new_tokens=9, eos_token_id=eos, pad_token_id=0)
    ours = tiny_llama.generate(ids, max_new_tokens=9, eos_token_id=eos, pad_token_id=0, custom_generate=method)
    assert ours.tolist() == plain_eos.tolist() and ours.shape[1] < len(PROMPT) + 9


def test_return_dict_gives_plain_sequences_and_the_stats(tiny_llama):
    ids = torch.tensor([PROMPT])
    plain = tiny_llama.generate(ids, max_new_tokens=12, return_dict_in_generate=True)
    out = tiny_llama.generate(ids, max_new_tokens=12, return_dict_in_generate=True,
                              custom_generate=layersearch.decoding(spec_of("skip")))
    from transformers.generation.utils import GenerateDecoderOnlyOutput

    assert isinstance(out, GenerateDecoderOnlyOutput) and isinstance(out, LayersearchGenerateOutput)
    assert out.sequences.tolist() == plain.sequences.tolist()
    assert out.decode_stats.new_tokens == 12 and out.decode_stats.drafted > 0


def test_the_decoder_is_built_once_per_model(tiny_llama):
    ids = torch.tensor([PROMPT])
    method = layersearch.decoding(spec_of("int8"))
    tiny_llama.generate(ids, max_new_tokens=4, custom_generate=method)
    built = method.built(tiny_llama)
    tiny_llama.generate(ids, max_new_tokens=4, custom_generate=layersearch.decoding(spec_of("int8")))
    assert method.built(tiny_llama) is built and built.loaded.model is tiny_llama  # no copy of the model



def test_a_model_and_its_decoders_are_freed_together():
    import gc
    import weakref

    model = build_tiny_model("llama", num_layers=2, seed=5)
    model.generate(torch.tensor([PROMPT]), max_new_tokens=4, custom_generate=layersearch.decoding(spec_of("int8")))
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None  # the decoder kept for the model does not keep the model alive


def test_a_captured_spec_compiles_each_shape_once_across_calls(tiny_llama):
    ids = torch.tensor([PROMPT])
    tiny_llama.generate(ids, max_new_tokens=10, custom_generate=layersearch.decoding(spec_of("skip", "captured")))
    method = layersearch.decoding(spec_of("skip", "captured"))
    tiny_llama.generate(ids, max_new_tokens=10, custom_generate=method)
    assert method.last_stats.path == "captured" and method.last_stats.compile_seconds == 0.0  # the model's table, reused


def test_a_plain_spec_runs_transformers_own_decoding(tiny_llama):
    ids = torch.tensor([PROMPT])
    plain_spec = DecoderSpec(ModelSpec(ModelRef("tiny")), plain=True)
    plain = tiny_llama.generate(ids, max_new_tokens=8, do_sample=False)
    assert tiny_llama.generate(ids, max_new_tokens=8, custom_generate=layersearch.decoding(plain_spec)).tolist() == plain.tolist()
    with pytest.raises(LayersearchError, match="num_beams=2"):
        tiny_llama.generate(ids, max_new_tokens=8, num_beams=2, custom_generate=layersearch.decoding(plain_spec))


def test_a_spec_for_another_model_is_refused_before_decoding(tiny_llama, tmp_path):
    other = build_tiny_model("llama", num_layers=2, seed=3)
    bound = layersearch.load_decoder(spec_of("skip"), model=(other, lambda text: text)).spec
    path = bound.save(tmp_path / "spec.json")
    seen = []

    class Watch:
        def put(self, value):
            seen.append(value)

        def end(self):
            seen.append("end")

    with pytest.raises(LayersearchError, match="spec was made for model") as error:
        tiny_llama.generate(torch.tensor([PROMPT]), max_new_tokens=4, custom_generate=layersearch.decoding(path),
                            streamer=Watch())
    assert "\n" not in str(error.value)
    assert len(seen) == 2 and seen[1] == "end"  # the prompt generate put itself, then the end: no token decoded
    qwen = build_tiny_model("qwen2", num_layers=4, seed=1)  # another architecture, the same sizes
    for_qwen = layersearch.load_decoder(spec_of("skip", ref="tiny-qwen2"), model=(qwen, lambda text: text)).spec
    with pytest.raises(LayersearchError, match="spec was made for model 'tiny-qwen2'"):
        tiny_llama.generate(torch.tensor([PROMPT]), max_new_tokens=4, custom_generate=layersearch.decoding(for_qwen))
    from layersearch.masks.mask import SkipMask

    two_layers = DecoderSpec(ModelSpec(ModelRef("tiny")), mask_source=MaskSourceSpec("mask", mask=SkipMask(2, (1,), ())))
    with pytest.raises(LayersearchError, match="mask is for 2 layers but model .* has 4"):
        tiny_llama.generate(torch.tensor([PROMPT]), max_new_tokens=4, custom_generate=layersearch.decoding(two_layers))


def test_sampling_matches_our_decoder_with_the_same_seed(tiny_word_models):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_word_models[0])
    tokenizer = AutoTokenizer.from_pretrained(tiny_word_models[0])
    spec = spec_of("skip", ref=str(tiny_word_models[0]))
    ids = torch.tensor([PROMPT])
    ours = layersearch.load_decoder(spec, model=(model, tokenizer))
    for seed in (1, 2, 3):
        expected = ours.generate(ids, 12, do_sample=True, temperature=0.8, top_p=0.9, seed=seed).token_ids
        out = model.generate(ids, max_new_tokens=12, do_sample=True, temperature=0.8, top_p=0.9, top_k=0,
                             custom_generate=layersearch.decoding(spec, seed=seed))
        assert tuple(out[0, len(PROMPT):].tolist()) == expected
    # without a seed, torch's global generator decides, as for plain generate
    torch.manual_seed(7)
    first = model.generate(ids, max_new_tokens=12, do_sample=True, custom_generate=layersearch.decoding(spec))
    torch.manual_seed(7)
    assert model.generate(ids, max_new_tokens=12, do_sample=True, custom_generate=layersearch.decoding(spec)).tolist() == first.tolist()


def test_sampling_follows_the_exact_law(three_token_chi_square):
    """Three sampled tokens through generate (temperature 1, no top-k: the exact law's setting): chi-square
    against the model's law (top-k's warp equals transformers' own: tests/runtime/test_sampling.py)."""
    target = build_tiny_model("llama", num_layers=2, vocab_size=6, seed=21)
    target.generation_config.eos_token_id = None
    target.generation_config.pad_token_id = None  # token 2 of the prompt is no padding
    spec = DecoderSpec(ModelSpec(ModelRef("tiny")), mask_source=MaskSourceSpec("uniform", skip_ratio=0.5),
                       lookahead=LookaheadSpec("static", 2))
    runs = 1500

    class ThroughGenerate:
        def __init__(self, seed):
            self.method = layersearch.decoding(spec, seed=seed)

        def generate(self, prompt, n):
            out = target.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=True, top_k=0,
                                  custom_generate=self.method)
            return SimpleNamespace(token_ids=tuple(out[0, len(prompt):].tolist()), stats=self.method.last_stats)

    pvalue, drafted = three_token_chi_square(target, [1, 2, 1, 2], ThroughGenerate, runs)
    assert drafted > runs // 5
    assert pvalue > 1e-3


def test_streamers_get_exactly_what_plain_generate_gives_them(tiny_word_models):
    from transformers import AutoModelForCausalLM, AutoTokenizer, TextStreamer

    model = AutoModelForCausalLM.from_pretrained(tiny_word_models[0])
    tokenizer = AutoTokenizer.from_pretrained(tiny_word_models[0])

    class Collect(TextStreamer):
        def __init__(self):
            super().__init__(tokenizer)
            self.puts, self.text, self.ended = [], [], False

        def put(self, value):
            self.puts.append(value.reshape(-1).tolist())
            super().put(value)

        def on_finalized_text(self, text, stream_end=False):
            self.text.append(text)
            self.ended = self.ended or stream_end

    ids = torch.tensor([PROMPT])
    plain, ours = Collect(), Collect()
    expected = model.generate(ids, max_new_tokens=14, do_sample=False, streamer=plain)
    method = layersearch.decoding(spec_of("skip", ref=str(tiny_word_models[0])))
    out = model.generate(ids, max_new_tokens=14, do_sample=False, streamer=ours, custom_generate=method)
    assert out.tolist() == expected.tolist()
    assert "".join(ours.text) == "".join(plain.text) and ours.ended and plain.ended
    assert ours.puts[0] == plain.puts[0] == PROMPT  # the prompt once, then the new tokens
    assert sum(ours.puts[1:], []) == sum(plain.puts[1:], []) == expected[0, len(PROMPT):].tolist()
    assert len(ours.puts) - 1 == method.last_stats.target_forwards + 1  # the prefill's token, then one put per step


def test_stop_strings_end_where_plain_generate_ends(tiny_with_embedded_tokenizer):
    """transformers' stop-string matching needs a real (byte-level) tokenizer: the embedded model's."""
    model, tokenizer, _ = tiny_with_embedded_tokenizer(seed=4)
    ids = tokenizer("The quick brown fox jumps over the lazy dog. The quick", return_tensors="pt").input_ids
    free = model.generate(ids, max_new_tokens=14, do_sample=False)[0, ids.shape[1]:].tolist()
    stop = next(text for text in (tokenizer.decode([t]).strip() for t in free[5:]) if text)  # a word it reaches later
    plain = model.generate(ids, max_new_tokens=14, stop_strings=[stop], tokenizer=tokenizer)
    spec = spec_of("skip", ref="tiny")
    ours = model.generate(ids, max_new_tokens=14, stop_strings=[stop],
                          custom_generate=layersearch.decoding(spec, tokenizer=tokenizer))
    assert ours.tolist() == plain.tolist() and plain.shape[1] < ids.shape[1] + 14
    plain_spec = DecoderSpec(ModelSpec(ModelRef("tiny")), plain=True)  # transformers' own loop, with our stop rule
    assert model.generate(ids, max_new_tokens=14, stop_strings=[stop], custom_generate=layersearch.decoding(
        plain_spec, tokenizer=tokenizer)).tolist() == plain.tolist()
    with pytest.raises(LayersearchError, match="stop_strings without a tokenizer"):
        model.generate(ids, max_new_tokens=4, stop_strings=[stop], custom_generate=layersearch.decoding(spec))


def test_a_pipeline_returns_plain_greedy_text(tiny_word_models):
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    model = AutoModelForCausalLM.from_pretrained(tiny_word_models[0])
    tokenizer = AutoTokenizer.from_pretrained(tiny_word_models[0])
    generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    prompt = "w5 w9 w17 w33 w8 w64 w3 w5 w9"
    plain = generator(prompt, max_new_tokens=12, do_sample=False)
    method = layersearch.decoding(spec_of("skip", ref=str(tiny_word_models[0])))
    ours = generator(prompt, max_new_tokens=12, do_sample=False, custom_generate=method)
    assert ours[0]["generated_text"] == plain[0]["generated_text"] and method.last_stats.new_tokens > 0


def test_the_embedded_model_end_to_end(embedded_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(embedded_dir)
    tokenizer = AutoTokenizer.from_pretrained(embedded_dir)
    inputs = tokenizer("def fibonacci(n):\n    ", return_tensors="pt")
    plain = model.generate(**inputs, max_new_tokens=24, do_sample=False)
    method = layersearch.decoding(spec_of("skip", ref=str(embedded_dir)))
    out = model.generate(**inputs, max_new_tokens=24, do_sample=False, custom_generate=method)
    assert out.tolist() == plain.tolist() and method.last_stats.drafted > 0


def test_a_model_that_ran_a_spec_still_copies_and_its_copy_builds_its_own(tiny_llama):
    """The decoders kept on the model stay out of ``copy.deepcopy`` (a quantized draft copy, a
    user's copy): the copy decodes the same, with a decoder of its own."""
    import copy

    from layersearch.integrations.hf_generate import BUILT_ATTRIBUTE

    model = tiny_llama
    ids = torch.tensor([PROMPT])
    method = layersearch.decoding(spec_of("int8"))
    first = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False, custom_generate=method)
    twin = copy.deepcopy(model)
    assert vars(twin)[BUILT_ATTRIBUTE] == {} and vars(model)[BUILT_ATTRIBUTE]  # the decoders stay with the model
    again = twin.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False, custom_generate=method)
    assert torch.equal(first, again) and len(vars(twin)[BUILT_ATTRIBUTE]) == 1


def test_the_calls_generation_config_decides_the_sampling_not_the_spec(tiny_word_models):
    """The spec samples with top_k 3 at seed 0; through custom_generate the call's generation config
    wins, as for plain generate: greedy stays greedy, top_k=1 samples the argmax, and the call's own
    law is our Decoder's with those settings."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from layersearch.decoder.spec import SamplingSpec

    model = AutoModelForCausalLM.from_pretrained(tiny_word_models[0])
    tokenizer = AutoTokenizer.from_pretrained(tiny_word_models[0])
    spec = DecoderSpec(ModelSpec(ModelRef(str(tiny_word_models[0]))), sampling=SamplingSpec(True, 1.0, top_k=3),
                       **SPECS["skip"])
    ids = torch.tensor([PROMPT])
    greedy = model.generate(ids, max_new_tokens=10)
    assert model.generate(ids, max_new_tokens=10, custom_generate=layersearch.decoding(spec)).tolist() == greedy.tolist()
    assert model.generate(ids, max_new_tokens=10, do_sample=True, top_k=1,
                          custom_generate=layersearch.decoding(spec)).tolist() == greedy.tolist()
    ours = layersearch.load_decoder(spec, model=(model, tokenizer))
    for seed in (1, 2):
        expected = ours.generate(ids, 10, temperature=0.8, top_k=5, seed=seed).token_ids
        out = model.generate(ids, max_new_tokens=10, do_sample=True, temperature=0.8, top_k=5,
                             custom_generate=layersearch.decoding(spec, seed=seed))
        assert tuple(out[0, len(PROMPT):].tolist()) == expected
