"""``sampling.top_k``: checked by type, kept by spec files, and one law through every entry point:
``layersearch generate --spec``, ``Decoder.generate`` and ``model.generate(custom_generate=...)``
(whose generation config carries the law) sample transformers' top-k law, chi-square tested."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

import layersearch
from layersearch.cli import main
from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DecoderSpec, LookaheadSpec, MaskSourceSpec, ModelRef, ModelSpec, SamplingSpec

PROMPT = "w5 w9 w17 w33 w8"
NEW = 3  # tokens sampled per run: the first from the prompt's forward, the rest verified drafts


@pytest.mark.parametrize("value", [True, False, 50.0, 3.5, -1, "3", None])
def test_top_k_is_an_integer_by_type(value):
    with pytest.raises(LayersearchError) as error:
        SamplingSpec(True, 1.0, top_k=value)
    message = str(error.value)
    assert "\n" not in message and message.startswith("sampling.top_k must be an integer >= 0"), message
    assert error.value.fields == ("sampling.top_k",)


def test_top_k_defaults_to_every_token_and_takes_integers():
    assert SamplingSpec().top_k == 0
    assert SamplingSpec(True, 1.0, top_k=50).top_k == 50


def test_top_k_round_trips_through_a_spec_file(tmp_path):
    spec = DecoderSpec("tiny", sampling=SamplingSpec(True, 0.7, 0.9, 5, top_k=7))
    path = spec.save(tmp_path / "spec.json")
    data = json.loads(path.read_text())
    assert data["sampling"]["top_k"] == 7
    assert DecoderSpec.load(path) == spec
    del data["sampling"]["top_k"]  # a file written before the field: every token
    assert DecoderSpec.from_dict(data).sampling == replace(spec.sampling, top_k=0)
    data["sampling"]["top_k"] = 50.0
    path.write_text(json.dumps(data))
    with pytest.raises(LayersearchError, match=r"spec\.json: sampling.top_k must be an integer >= 0, got 50\.0$"):
        DecoderSpec.load(path)


@pytest.fixture(scope="module")
def top_k_spec(tiny_word_models, tmp_path_factory):
    """The spec ``generate --top-k 3 --save-spec`` writes (a uniform half-skip draft, static 2),
    with the tokenizer's prompt ids."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("topk")
    path = folder / "spec.json"
    code = main(["generate", "--model", str(tiny_word_models[0]), "--prompt", PROMPT, "--max-new-tokens", str(NEW),
                 "--mask", "uniform:0.5", "--lookahead", "static", "--max-draft", "2", "--temperature", "1",
                 "--top-k", "3", "--json", "--save-spec", str(path)])
    assert code == 0
    spec = DecoderSpec.load(path)
    assert spec.sampling == SamplingSpec(True, 1.0, 1.0, 0, top_k=3)
    tokenizer = AutoTokenizer.from_pretrained(tiny_word_models[0])
    return spec, folder, tokenizer(PROMPT).input_ids, tokenizer.eos_token_id


def top_k_law(model, prompt, k, eos, n):
    """{token ids: probability} of ``n`` tokens sampled as plain ``generate`` samples with
    ``top_k=k`` (transformers' own warper), a run ending after ``eos``."""
    from transformers import TopKLogitsWarper

    warp = TopKLogitsWarper(top_k=k)
    law = {}

    def walk(tokens, p):
        if len(tokens) == n or (tokens and tokens[-1] == eos):
            law[tuple(tokens)] = p
            return
        ids = torch.tensor([prompt + tokens])
        with torch.no_grad():
            probs = torch.softmax(warp(ids, model(ids).logits[:, -1].float()), -1)[0]
        for token in probs.nonzero().reshape(-1).tolist():
            walk(tokens + [token], p * float(probs[token]))

    walk([], 1.0)
    return law


def chi_square_pvalue(law, observed, runs):
    """Chi-square p-value of ``observed`` sequences against ``law`` (cells expected below 5
    pooled); a sequence outside the law's support fails at once."""
    import numpy as np
    from scipy.stats import chisquare

    outside = [tokens for tokens in observed if tokens not in law]
    assert not outside, f"sampled outside the top-k law: {outside[:3]}"
    cells = sorted(law)
    expected = np.array([law[c] for c in cells]) * runs
    counts = np.array([observed.count(c) for c in cells], dtype=float)
    keep = expected >= 5
    expected = np.append(expected[keep], expected[~keep].sum())
    counts = np.append(counts[keep], counts[~keep].sum())
    if expected[-1] == 0:
        expected, counts = expected[:-1], counts[:-1]
    return chisquare(counts, expected * counts.sum() / expected.sum()).pvalue


def _through_cli(spec, folder, runs, capsys):
    """Each run ``generate --spec`` of the spec with its own seed, read back from ``--json``."""
    capsys.readouterr()  # whatever ran before
    sequences, drafted = [], 0
    for seed in range(runs):
        path = replace(spec, sampling=replace(spec.sampling, seed=seed)).save(folder / f"seed{seed}.json")
        assert main(["generate", "--spec", str(path), "--prompt", PROMPT, "--json"]) == 0
        record = json.loads(capsys.readouterr().out)
        sequences.append(tuple(record["token_ids"]))
        drafted += record["stats"]["drafted"]
    return sequences, drafted


def _through_decoder(spec, model, tokenizer, prompt, runs):
    decoder = layersearch.load_decoder(spec, model=(model, tokenizer))
    results = [decoder.generate(prompt, seed=seed) for seed in range(runs)]  # top_k: the spec's
    return [r.token_ids for r in results], sum(r.stats.drafted for r in results)


def _through_custom_generate(spec, model, prompt, eos, runs):
    """The law named in the model's generation config (what the call's config decides), the spec's
    decode loop run by ``custom_generate``: no sampling argument in the call."""
    from transformers import GenerationConfig

    s = spec.sampling
    model.generation_config = GenerationConfig(do_sample=s.do_sample, temperature=s.temperature, top_k=s.top_k,
                                               top_p=s.top_p, eos_token_id=eos, pad_token_id=eos)
    ids = torch.tensor([prompt])
    sequences, drafted = [], 0
    for seed in range(runs):
        method = layersearch.decoding(spec, seed=seed)
        out = model.generate(ids, max_new_tokens=NEW, custom_generate=method)
        sequences.append(tuple(out[0, len(prompt):].tolist()))
        drafted += method.last_stats.drafted
    return sequences, drafted


@pytest.mark.parametrize("entry, runs", [("cli", 300), ("decoder", 1200), ("custom_generate", 1200), ("plain", 600)])
def test_a_top_k_spec_samples_the_top_k_law_everywhere(entry, runs, top_k_spec, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec, folder, prompt, eos = top_k_spec
    model = AutoModelForCausalLM.from_pretrained(spec.model.ref.ref)
    law = top_k_law(model, prompt, spec.sampling.top_k, eos, NEW)
    if entry == "cli":
        sequences, drafted = _through_cli(spec, folder, runs, capsys)
    elif entry == "decoder":
        sequences, drafted = _through_decoder(spec, model, AutoTokenizer.from_pretrained(spec.model.ref.ref), prompt, runs)
    elif entry == "custom_generate":
        sequences, drafted = _through_custom_generate(spec, model, prompt, eos, runs)
    else:  # a plain spec: transformers' generate, told the spec's top_k (not its own default 50)
        plain = DecoderSpec(spec.model, plain=True, sampling=spec.sampling, max_new_tokens=NEW)
        sequences, _ = _through_decoder(plain, model, AutoTokenizer.from_pretrained(spec.model.ref.ref), prompt, runs)
        drafted = runs
    assert drafted > runs // 5  # the verified drafts are sampled too, not only the first token
    assert chi_square_pvalue(law, sequences, runs) > 1e-3
