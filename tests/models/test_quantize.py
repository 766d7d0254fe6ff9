"""int8 draft models (``models/quantize.py``): cheaper drafts that leave the output exact."""

from __future__ import annotations

import copy

import pytest
import torch

from layersearch.common.errors import LayersearchError
from layersearch.models.quantize import check_quant, is_quantized, is_quantized_linear, quantize_draft
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.drafters import ModelDrafter
from layersearch.runtime.lookahead import StaticLookahead
from layersearch.runtime.sampling import SamplingConfig
from layersearch.frspec.head import SubsetHead, VocabSubset


def test_every_linear_but_the_down_projection_is_int8(tiny_qwen2):
    model = quantize_draft(copy.deepcopy(tiny_qwen2))
    layer = model.model.layers[0]
    assert is_quantized_linear(layer.self_attn.q_proj) and is_quantized_linear(layer.mlp.gate_proj)
    assert type(layer.mlp.down_proj) is torch.nn.Linear  # outlier inputs: kept fp32
    assert is_quantized_linear(model.get_output_embeddings()) and is_quantized(model)
    assert not is_quantized(tiny_qwen2)  # the original is untouched


def test_int8_logits_stay_close_to_fp32(tiny_qwen2):
    ids = torch.arange(3, 40).view(1, -1)
    with torch.inference_mode():
        full = tiny_qwen2(ids).logits
        small = quantize_draft(copy.deepcopy(tiny_qwen2))(ids).logits
    assert torch.corrcoef(torch.stack([full.flatten(), small.flatten()]))[0, 1] > 0.99
    assert (full.argmax(-1) == small.argmax(-1)).float().mean() > 0.8


def test_an_int8_draft_of_the_target_is_greedy_lossless_and_mostly_accepted(tiny_llama):
    drafter = ModelDrafter(quantize_draft(copy.deepcopy(tiny_llama)))
    prompt = list(range(5, 25))
    with torch.inference_mode():
        plain = tiny_llama.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False)[0, len(prompt):].tolist()
    result = SpeculativeDecoder(tiny_llama, drafter=drafter, lookahead=StaticLookahead(4)).generate(prompt, 24)
    assert list(result.token_ids) == plain
    assert result.stats.drafted > 0 and result.stats.accepted / result.stats.drafted > 0.7


def test_a_reduced_head_of_a_quantized_head_scores_only_its_subset(tiny_llama):
    model = quantize_draft(copy.deepcopy(tiny_llama))
    subset = VocabSubset(tuple(range(0, 128, 2)), "t", 64)
    head = SubsetHead(model, subset)
    hidden = torch.randn(3, tiny_llama.config.hidden_size)
    logits = head.logits(hidden)  # [3, 128]
    full = model.get_output_embeddings()(hidden)
    assert torch.isinf(logits[:, 1::2]).all()
    torch.testing.assert_close(logits[:, ::2], full[:, ::2], atol=0.05, rtol=0.05)
    assert head.fits(model) and not head.fits(tiny_llama)


def test_sampling_with_an_int8_draft_follows_the_target_law(three_token_chi_square):
    """Tokens 2 and 3 come from an int8 draft + verify: chi-square against the exact law."""
    target = build_tiny_model("llama", num_layers=2, vocab_size=6, seed=21)
    target.generation_config.eos_token_id = None
    drafter = ModelDrafter(quantize_draft(build_tiny_model("llama", num_layers=1, vocab_size=6, seed=22)))
    runs = 1500
    pvalue, drafted = three_token_chi_square(target, [1, 2, 1, 2], lambda seed: SpeculativeDecoder(
        target, drafter=drafter, lookahead=StaticLookahead(2), sampling=SamplingConfig(temperature=1.0, seed=seed)), runs)
    assert drafted > runs // 5
    assert pvalue > 1e-3


@pytest.mark.parametrize("scheme, device, message", [
    ("int3", "cpu", r"unknown draft quantization 'int3' \(choose from int8, int4; a draft model takes int8\)"),
    ("int4", "cpu", "a draft model takes int8 only"),  # int4 is the model's own draft (its int4 twins)
    ("int8", "cuda", "CPU only"),
])
def test_bad_schemes_are_refused(scheme, device, message):
    with pytest.raises(LayersearchError, match=message):
        check_quant(scheme, device)


@pytest.mark.parametrize("device, dtype, message", [
    ("cuda", "float16", "on CUDA runs torch's bfloat16 tinygemm from float32 or bfloat16 weights, not float16"),
    ("cpu", "float16", "not float16"),
    ("mps", None, "runs on CPU or CUDA"),
])
def test_the_int4_self_draft_names_what_it_runs_on(device, dtype, message):
    check_quant("int4", "cpu", "bfloat16", self_draft=True)  # fine: the bf16 emulation
    check_quant("int4", "cuda", "bfloat16", self_draft=True)  # fine: tinygemm
    check_quant("int4", "cuda", "float32", self_draft=True)  # fine: tinygemm over bf16 activations
    with pytest.raises(LayersearchError, match=message):
        check_quant("int4", device, dtype, self_draft=True)
