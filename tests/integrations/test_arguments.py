"""Every ``generate`` argument layersearch's decoding cannot honour is refused in one
LayersearchError line naming it, before any token is decoded; what it honours is read right."""

from __future__ import annotations

import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

import layersearch
from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DecoderSpec, LookaheadSpec, MaskSourceSpec, ModelRef, ModelSpec
from layersearch.integrations.arguments import caller_arguments

PROMPT = [[5, 9, 17, 33, 8, 64, 3, 5]]
SPEC = DecoderSpec(ModelSpec(ModelRef("tiny")), mask_source=MaskSourceSpec("uniform", skip_ratio=0.5),
                   lookahead=LookaheadSpec("static", 3))


class Halve(LogitsProcessor):
    def __call__(self, input_ids, scores):
        return scores / 2


class Never(StoppingCriteria):
    def __call__(self, input_ids, scores, **kwargs):
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)


def refused(model):
    """argument name -> generate's keyword arguments that ask for it."""
    return {
        "a batch of 2 prompts": dict(inputs=torch.tensor(PROMPT * 2)),
        "num_beams=2": dict(num_beams=2),
        "num_return_sequences=2": dict(num_return_sequences=2, do_sample=True),
        "logits_processor (Halve)": dict(logits_processor=LogitsProcessorList([Halve()])),
        "assistant_model": dict(assistant_model=model),
        "repetition_penalty": dict(repetition_penalty=1.3),
        "no_repeat_ngram_size": dict(no_repeat_ngram_size=2),
        "min_new_tokens": dict(min_new_tokens=3, eos_token_id=1),
        "bad_words_ids": dict(bad_words_ids=[[7]]),
        "min_p": dict(do_sample=True, min_p=0.1),
        "typical_p": dict(do_sample=True, typical_p=0.5),
        "max_time=5.0": dict(max_time=5.0),
        "stopping_criteria (Never)": dict(stopping_criteria=StoppingCriteriaList([Never()])),
        "output_scores=True": dict(output_scores=True, return_dict_in_generate=True),
        "output_logits=True": dict(output_logits=True, return_dict_in_generate=True),
        "penalty_alpha=0.6": dict(penalty_alpha=0.6, top_k=4),
        "dola_layers='high'": dict(dola_layers="high"),
        "prompt_lookup_num_tokens=3": dict(prompt_lookup_num_tokens=3),
        "synced_gpus": dict(synced_gpus=True),
        "attention_mask with padding": dict(attention_mask=torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1]])),
    }


@pytest.mark.parametrize("name", list(refused(None)))
def test_each_unsupported_argument_is_one_line_naming_it(tiny_llama, name):
    puts = []

    class Watch:
        def put(self, value):
            puts.append(value.reshape(-1).tolist())

        def end(self):
            puts.append("end")

    arguments = {"inputs": torch.tensor(PROMPT), "max_new_tokens": 6, **refused(tiny_llama)[name]}
    with pytest.raises(LayersearchError) as error:
        tiny_llama.generate(**arguments, streamer=Watch(), custom_generate=layersearch.decoding(SPEC))
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"generate argument {name} is not supported"), message
    assert "end" in puts and all(p == "end" or p in (PROMPT[0], PROMPT[0] * 2) for p in puts)  # nothing decoded, nothing left waiting


def test_a_filled_cache_and_other_inputs_are_refused(tiny_llama):
    from transformers import DynamicCache

    cache = DynamicCache(config=tiny_llama.config)
    tiny_llama(torch.tensor(PROMPT), cache=cache)
    with pytest.raises(LayersearchError, match="generate argument .*cache"):
        tiny_llama.generate(torch.tensor(PROMPT), cache=cache, max_new_tokens=3,
                            custom_generate=layersearch.decoding(SPEC))
    embeds = tiny_llama.get_input_embeddings()(torch.tensor(PROMPT))
    with pytest.raises(LayersearchError, match="generate argument inputs_embeds is not supported"):
        tiny_llama.generate(inputs_embeds=embeds, max_new_tokens=3, custom_generate=layersearch.decoding(SPEC))


def test_an_encoder_decoder_model_is_refused():
    from transformers import T5Config, T5ForConditionalGeneration

    t5 = T5ForConditionalGeneration(T5Config(vocab_size=32, d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8,
                                             decoder_start_token_id=0))
    with pytest.raises(LayersearchError, match="generate argument an encoder-decoder model .T5ForConditionalGeneration."):
        t5.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=3, custom_generate=layersearch.decoding(SPEC))


def test_more_tokens_than_the_context_holds_are_refused(tiny_llama):
    with pytest.raises(LayersearchError, match="max_new_tokens") as error:
        tiny_llama.generate(torch.tensor(PROMPT), max_new_tokens=600, custom_generate=layersearch.decoding(SPEC))
    assert "\n" not in str(error.value) and "512" in str(error.value)  # the tiny model's context


def test_greedy_warpers_change_no_token_and_top_k_samples(tiny_llama):
    """Temperature, top-k and top-p are read, not refused: greedy ignores them as plain generate does."""
    ids = torch.tensor(PROMPT)
    plain = tiny_llama.generate(ids, max_new_tokens=8)
    method = layersearch.decoding(SPEC)
    assert tiny_llama.generate(ids, max_new_tokens=8, temperature=0.5, top_k=3, top_p=0.5,
                               custom_generate=method).tolist() == plain.tolist()
    sampled = tiny_llama.generate(ids, max_new_tokens=8, do_sample=True, top_k=1, custom_generate=method)
    assert sampled.tolist() == plain.tolist()  # top-k 1 samples the argmax: the warper is applied


def test_decoding_checks_its_own_arguments(tmp_path):
    bad = {
        "decoding takes a DecoderSpec or the path": dict(spec_or_path=3),
        "spec path is empty": dict(spec_or_path=" "),
        "spec file not found": dict(spec_or_path=str(tmp_path / "missing.json")),
        "kernels must be one of": dict(spec_or_path=SPEC, kernels="gpu"),
        "seed": dict(spec_or_path=SPEC, seed=-1),
        "tokenizer must be a transformers tokenizer": dict(spec_or_path=SPEC, tokenizer="gpt2"),
    }
    for words, arguments in bad.items():
        with pytest.raises(LayersearchError, match=words):
            layersearch.decoding(**arguments)


def test_caller_arguments_are_read_only_from_generate():
    def method():
        return caller_arguments()

    assert method() == {}  # called directly: no generate frame to read


def _direct(model="tiny", ids=None, **arguments):
    """The decoding method called directly, as transformers would call it (model, input_ids, ...)."""
    from transformers import GenerationConfig

    return layersearch.decoding(SPEC)(model, torch.tensor(PROMPT) if ids is None else ids,
                                      **{"generation_config": GenerationConfig(max_new_tokens=3), **arguments})


@pytest.mark.parametrize("call, says", [
    (lambda m: _direct("gpt2"), "custom_generate needs a transformers model, got str"),
    (lambda m: _direct(None), "custom_generate needs a transformers model, got NoneType"),
    (lambda m: _direct(m, generation_config="greedy"), "generation_config must be a transformers GenerationConfig, got str"),
    (lambda m: _direct(m, generation_config=None), "generation_config sets neither max_length nor max_new_tokens"),
    (lambda m: _direct(m, torch.tensor([[5.0, 9.0]])), "inputs must be integer token ids, got dtype float32"),
    (lambda m: _direct(m, torch.tensor([[5, 9, 999]])), "inputs: token id 999 (position 2) is outside the model's vocabulary (ids 0..127)"),
    (lambda m: _direct(m, torch.tensor([[5, -1]])), "inputs: token id -1 (position 1) is outside the model's vocabulary"),
    (lambda m: _direct(m, logits_processor=3), "logits_processor must be a list of logits processors"),
    (lambda m: _direct(m, stopping_criteria="eos"), "stopping_criteria must be a list of stopping criteria"),
    (lambda m: _direct(m, streamer=print), "streamer must have put() and end() methods"),
    (lambda m: _direct(m, attention_mask=[[1] * 8]), "attention_mask must be a tensor, got list"),
])
def test_a_direct_call_checks_every_argument_before_reading_it(tiny_llama, call, says):
    """The decoding method called by hand (not through generate) refuses a wrong model or input
    with one LayersearchError, the model's check first, never a TypeError or AttributeError from inside."""
    with pytest.raises(LayersearchError) as error:
        call(tiny_llama)
    assert str(error.value).startswith(says), str(error.value)


def test_a_direct_call_with_good_arguments_decodes(tiny_llama):
    out = _direct(tiny_llama)
    plain = tiny_llama.generate(torch.tensor(PROMPT), max_new_tokens=3)
    assert out.tolist() == plain.tolist()


def _wrapped(method):
    """A custom_generate that calls the decoding method itself: generate is then its caller's caller."""
    def wrapper(model, input_ids, **arguments):
        return method(model, input_ids, **arguments)

    return wrapper


class _Watch:
    def __init__(self):
        self.puts = []

    def put(self, value):
        self.puts.append(value.reshape(-1).tolist())

    def end(self):
        self.puts.append("end")


@pytest.mark.parametrize("name", ["streamer", "assistant_model"])
def test_arguments_only_generate_holds_are_never_lost_behind_a_wrapper(tiny_llama, name):
    """Called from a frame that is not generate's, what reaches the method only through generate's
    frame is one LayersearchError naming it (its streamer ended), not a silent default."""
    watch = _Watch()
    given = {"streamer": watch} if name == "streamer" else {"assistant_model": tiny_llama}
    with pytest.raises(LayersearchError) as error:
        tiny_llama.generate(torch.tensor(PROMPT), max_new_tokens=4, custom_generate=_wrapped(layersearch.decoding(SPEC)),
                            **given)
    message = str(error.value)
    assert "\n" not in message and message.startswith("the decoding method was called by "), message
    assert "test_arguments._wrapped.<locals>.wrapper, not by transformers' generate" in message
    assert f"generate's {name} cannot reach it" in message and error.value.fields == (name,)
    if name == "streamer":
        assert watch.puts == [PROMPT[0], "end"]  # the prompt generate put, then end(): nothing left waiting


def test_a_wrapper_that_loses_nothing_decodes(tiny_llama):
    ids = torch.tensor(PROMPT)
    out = tiny_llama.generate(ids, max_new_tokens=6, custom_generate=_wrapped(layersearch.decoding(SPEC)))
    assert out.tolist() == tiny_llama.generate(ids, max_new_tokens=6).tolist()
