"""Draft plans: every sub-layer full, int8, int4 or skipped, the head full, int8 or int4. Greedy
output stays plain ``generate``'s token for token under random plans; sampled output follows
the exact law; the twins change nothing outside the plan's block."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.precision import check_int8_device, int8_twins
from layersearch.models.skipping import skipping
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.drafters import LayerSkipDrafter, make_drafter
from layersearch.runtime.lookahead import ConfidenceLookahead, StaticLookahead
from layersearch.runtime.sampling import SamplingConfig
from tests.capture import assert_path, captured
from tests.runtime.test_plugins import NEW, plain_generate, repetitive_prompt


def random_plan(num_layers: int, seed: int) -> SkipMask:
    """Each sub-layer full, int8, int4 or skipped at random (int4 in groups of 32 or 64: the
    tiny models are 64 wide); the head full, int8 or int4."""
    rng = random.Random(seed)
    choice = {kind: [rng.choice(("full", "int8", "int4", "skip")) for _ in range(num_layers)] for kind in ("attention", "mlp")}
    pick = lambda kind, what: [i for i, c in enumerate(choice[kind]) if c == what]  # noqa: E731
    head = rng.choice(("full", "int8", "int4"))
    return SkipMask(num_layers, pick("attention", "skip"), pick("mlp", "skip"), None, {},
                    pick("attention", "int8"), pick("mlp", "int8"), head == "int8",
                    pick("attention", "int4"), pick("mlp", "int4"), head == "int4", rng.choice((32, 64)))


@pytest.mark.parametrize("decode_path, seed, family", [
    *[("eager", seed, family) for seed in range(8) for family in ("tiny_llama", "tiny_qwen2")],
    *[("captured", seed, family) for seed in range(4) for family in ("tiny_llama", "tiny_qwen2")],
])
def test_random_plans_keep_greedy_output(request, family, seed, decode_path):
    model = request.getfixturevalue(family)
    plan = random_plan(4, seed)
    prompt = repetitive_prompt(seed)
    lookahead = StaticLookahead(3) if seed % 2 else ConfidenceLookahead(5, 0.05)
    result = SpeculativeDecoder(model, plan, lookahead=lookahead, compile=captured(decode_path)).generate(prompt, NEW)
    assert list(result.token_ids) == plain_generate(model, prompt)
    assert_path(result, decode_path)
    if not plan.is_empty:
        assert result.stats.draft_forwards > 0  # the plan really ran draft forwards
    assert {s.mask for s in result.stats.steps} == {plan}


@pytest.mark.parametrize("skip_ratio", [0.0, 0.25])
@pytest.mark.parametrize("drafter_name", ["layer-skip", "hybrid"])
def test_int8_self_draft_keeps_greedy_output_and_agrees(tiny_llama, skip_ratio, drafter_name, decode_path):
    """``--draft-quant int8`` without a draft model: every kept sub-layer and the head in int8."""
    prompt = repetitive_prompt(7)
    drafter = make_drafter(drafter_name, quant="int8")
    mask = SkipMask.uniform(4, skip_ratio)
    decoder = SpeculativeDecoder(tiny_llama, mask, drafter=drafter, lookahead=StaticLookahead(3), compile=captured(decode_path))
    result = decoder.generate(prompt, NEW)
    assert list(result.token_ids) == plain_generate(tiny_llama, prompt)
    assert_path(result, decode_path)
    if skip_ratio == 0.0 and drafter_name == "layer-skip":
        stats = result.stats
        assert stats.drafted > 0 and stats.accepted / stats.drafted > 0.8  # int8 agrees with its full model


@pytest.mark.parametrize("family", ["tiny_llama", "tiny_qwen2"])
def test_int4_self_draft_keeps_greedy_output_and_agrees(request, family, decode_path):
    """The uniform int4 self-draft (every sub-layer and the head int4), in groups of 32: exact output,
    and it agrees with its full model most of the time."""
    model = request.getfixturevalue(family)
    prompt = repetitive_prompt(5)
    every = tuple(range(4))
    plan = SkipMask(4, int4_attention=every, int4_mlp=every, int4_head=True, int4_group_size=32)
    result = SpeculativeDecoder(model, plan, lookahead=StaticLookahead(3), compile=captured(decode_path)).generate(prompt, NEW)
    assert list(result.token_ids) == plain_generate(model, prompt)
    assert_path(result, decode_path)
    assert result.stats.drafted > 0 and result.stats.accepted / result.stats.drafted > 0.5


def test_quant_int4_turns_the_kept_sub_layers_into_int4():
    plan = LayerSkipDrafter(quant="int4").plan(SkipMask(4, (1,), (2, 3), None, {}, (0,), (), True))
    assert plan.int4_attention == (0, 2, 3) and plan.int4_mlp == (0, 1) and plan.int4_head
    assert not plan.has_int8 and plan.attention == (1,) and plan.mlp == (2, 3) and plan.int4_group_size == 128


def test_quant_turns_the_kept_sub_layers_into_int8():
    drafter = LayerSkipDrafter(quant="int8")
    plan = drafter.plan(SkipMask(4, (1,), (2, 3)))
    assert plan.int8_attention == (0, 2, 3) and plan.int8_mlp == (0, 1) and plan.int8_head
    assert plan.attention == (1,) and plan.mlp == (2, 3)
    assert LayerSkipDrafter().plan(SkipMask(4, (1,), ())) == SkipMask(4, (1,), ())


def test_a_plan_is_applied_only_inside_its_block(tiny_qwen2):
    ids = torch.tensor([[3, 9, 27, 81, 5, 7]])
    plan = SkipMask(4, (0,), (), None, {}, (1, 2, 3), (0, 1, 2, 3), True)
    with torch.no_grad():
        before = tiny_qwen2(ids).logits
        with skipping(tiny_qwen2, plan):
            during = tiny_qwen2(ids).logits
        after = tiny_qwen2(ids).logits
    assert not torch.equal(before, during)  # int8 and the skip did change the draft
    assert torch.equal(before, after)  # and nothing is left behind
    assert not any("forward" in vars(m) for m in tiny_qwen2.modules())


def test_int8_sub_layers_differ_from_full_ones_only_by_rounding(tiny_llama):
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    with torch.no_grad():
        full = tiny_llama(ids).logits
        with skipping(tiny_llama, SkipMask.none(4).kept_in_int8(head=False)):
            int8 = tiny_llama(ids).logits
    error = (full - int8).abs().max() / full.abs().max()
    assert 0 < error < 0.05


def test_twins_are_built_once_and_report_their_memory(tiny_llama):
    twins = int8_twins(tiny_llama)
    assert int8_twins(tiny_llama) is twins
    linear_weights = sum(m.weight.numel() for m in tiny_llama.modules() if isinstance(m, torch.nn.Linear))
    assert linear_weights <= twins.nbytes < 2 * linear_weights  # about one byte a weight


def test_sampling_with_an_int8_plan_follows_the_exact_law(three_token_chi_square):
    """Tokens 2 and 3 come from an int8 plan's draft + verification: chi-square against the law."""
    target = build_tiny_model("llama", num_layers=2, vocab_size=6, seed=21)
    target.generation_config.eos_token_id = None
    plan = SkipMask(2, (), (1,), None, {}, (0, 1), (0,), True)
    runs = 1500
    pvalue, drafted = three_token_chi_square(target, [1, 2, 1, 2], lambda seed: SpeculativeDecoder(
        target, plan, lookahead=StaticLookahead(2), sampling=SamplingConfig(temperature=1.0, seed=seed)), runs)
    assert drafted > runs // 5
    assert pvalue > 1e-3


@pytest.mark.parametrize("family, seed", [("llama", 23), ("qwen2", 24)])
def test_sampling_with_an_int4_plan_follows_the_exact_law(three_token_chi_square, family, seed):
    """Tokens 2 and 3 come from a draft with int4 sub-layers and head (and a skip): chi-square."""
    target = build_tiny_model(family, num_layers=2, vocab_size=6, seed=seed)
    target.generation_config.eos_token_id = None
    plan = SkipMask(2, (), (1,), None, {}, (), (), False, (0, 1), (0,), True, 32)
    runs = 1500
    pvalue, drafted = three_token_chi_square(target, [1, 2, 1, 2], lambda seed: SpeculativeDecoder(
        target, plan, lookahead=StaticLookahead(2), sampling=SamplingConfig(temperature=1.0, seed=seed)), runs)
    assert drafted > runs // 5
    assert pvalue > 1e-3


def test_a_device_without_int8_kernels_is_one_error_line():
    model = build_tiny_model("llama", num_layers=2, seed=3).to(torch.bfloat16)
    with pytest.raises(LayersearchError, match="made from float32 weights"):
        check_int8_device(model)
    with pytest.raises(LayersearchError, match="float32"):
        with skipping(model, SkipMask(2, (), (), None, {}, (0,), ())):
            pass


def test_the_profile_times_int8_sub_layers_and_costs_plans(tiny_llama):
    from layersearch.masks.mask import ModelInfo
    from layersearch.profiling.profile import LatencyProfile
    from layersearch.profiling.profiler import measure_profile

    info = ModelInfo("tiny", 4, tiny_llama.config.hidden_size, "f")
    profile = measure_profile(tiny_llama, info, contexts=(8, 16), max_verify=2, repeats=2)
    assert profile.has_int8 and profile.int8_mlp_seconds >= 0 and profile.int8_head_saving >= 0
    again = LatencyProfile.from_dict(profile.to_dict())
    assert again == profile
    plan = SkipMask(4, (0,), (), info, {}, (1, 2), (0, 1, 2, 3), True)
    costed = profile.base_seconds - profile.int8_head_saving + sum(
        profile.sublayer_seconds(kind, plan.precision(kind, i), 16, i) for i in range(4) for kind in ("attention", "mlp"))
    assert abs(profile.draft_seconds(plan, 16) - costed) < 1e-12
    skip_only = SkipMask(4, (0,), (), info)
    expected = profile.base_seconds + 3 * profile.attention_seconds(16) + 4 * profile.mlp_seconds
    assert abs(profile.draft_seconds(skip_only, 16) - expected) < 1e-12
    older = LatencyProfile.from_dict({k: v for k, v in profile.to_dict().items() if not k.startswith("int8_")})
    assert not older.has_int8 and older.draft_seconds(skip_only, 16) == profile.draft_seconds(skip_only, 16)
    with pytest.raises(LayersearchError, match="no int8 timings"):
        older.draft_seconds(plan, 16)


def test_an_int8_linear_scales_each_token_on_its_own():
    """Several tokens at once give what each token gives alone (decoding runs one at a time), up
    to the rounding of the two int8 paths."""
    from layersearch.models.precision import Int8Linear

    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 32)
    int8 = Int8Linear(linear)
    x = torch.randn(1, 6, 64)
    x[0, 2] *= 100  # one token with outliers must not flatten the others' scales
    with torch.no_grad():
        together = int8(x)
        alone = torch.cat([int8(x[:, i : i + 1]) for i in range(6)], dim=1)
        exact = linear(x)
    assert together.shape == (1, 6, 32)
    for i in (0, 1, 3, 4, 5):
        error = (together[0, i] - exact[0, i]).abs().max() / exact[0, i].abs().max()
        assert error < 0.05
        assert (together[0, i] - alone[0, i]).abs().max() / exact[0, i].abs().max() < 0.05


# ----- CUDA: weight-only int8 twins ---------------------------------------------------------------
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on the GPU machine)")


def test_weight_only_int8_is_the_product_with_the_rounded_weights():
    """The CUDA twin's arithmetic, checked on CPU: int8 weights per output channel, x unquantized."""
    from layersearch.models.precision import Int8Linear, _quantized_bytes

    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 32)
    twin = Int8Linear(linear, weight_only=True)
    x = torch.randn(3, 64)  # [tokens, in]
    rounded = twin.qweight.float() * twin.scale[:, None]  # [out, in]
    assert twin.qweight.dtype == torch.int8 and twin.qweight.abs().max() == 127
    torch.testing.assert_close(twin(x), torch.nn.functional.linear(x, rounded, linear.bias))
    with torch.no_grad():
        error = (twin(x) - linear(x)).abs().max() / linear(x).abs().max()
    assert 0 < error < 0.02
    assert 64 * 32 <= _quantized_bytes(twin) < 2 * 64 * 32


@needs_cuda
@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("seed", range(3))
def test_random_plans_keep_greedy_output_on_cuda(family, seed, monkeypatch):
    """fp32 with TF32 off, so 'identical' means identical; the int8 twins are weight-only there,
    the int4 ones tinygemm over bf16 activations."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    model = build_tiny_model(family, num_layers=4, seed=seed).to("cuda")
    model.generation_config.eos_token_id = None
    plan = random_plan(4, 10 + seed)
    prompt = repetitive_prompt(seed).to("cuda")
    result = SpeculativeDecoder(model, plan, lookahead=StaticLookahead(3)).generate(prompt, NEW)
    assert list(result.token_ids) == plain_generate(model, prompt)
    assert int8_twins(model).attention[0].q_proj.kernel is None  # weight-only, not fbgemm


@needs_cuda
def test_the_cuda_twin_is_the_weight_only_product():
    from layersearch.models.precision import Int8Linear

    linear = torch.nn.Linear(256, 512, device="cuda", dtype=torch.bfloat16)
    twin = Int8Linear(linear)
    x = torch.randn(1, 1, 256, device="cuda", dtype=torch.bfloat16)
    eager = torch.nn.functional.linear(x, twin.qweight.to(x.dtype)) * twin.scale + linear.bias
    torch.testing.assert_close(twin(x), eager, rtol=2e-2, atol=2e-2)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_cuda_int4_twin_is_tinygemm_over_the_emulated_weights(dtype):
    """tinygemm on the packed codes computes the CPU emulation's product (the same bf16 weights;
    only the fp32 accumulation order differs), eager and compiled with fullgraph=True."""
    from layersearch.models.int4 import Int4Linear

    torch.manual_seed(0)
    cpu = torch.nn.Linear(1024, 512).to(dtype)
    emulated = Int4Linear(cpu, 128)  # the CPU path: bf16 weights from float64
    cuda = Int4Linear(copy.deepcopy(cpu).cuda(), 128)  # the same Linear on the GPU
    assert torch.equal(cuda.packed.cpu(), emulated.packed) and torch.equal(cuda.scales_and_zeros.cpu(), emulated.scales_and_zeros)
    x = torch.randn(3, 1024, dtype=dtype)
    expected = emulated(x).float()
    got = cuda(x.cuda()).float().cpu()
    assert cuda(x.cuda()).dtype == dtype
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)
    compiled = torch.compile(cuda, fullgraph=True)  # one graph: no host reads, no breaks
    # inductor may add the bias in fp32 before the final rounding: one bf16 step of the output apart
    torch.testing.assert_close(compiled(x.cuda()).float().cpu(), got, rtol=2.0**-7, atol=2.0**-7)


@needs_cuda
def test_sampling_with_an_int8_plan_on_cuda_follows_the_exact_law(three_token_chi_square):
    target = build_tiny_model("llama", num_layers=2, vocab_size=6, seed=21).to("cuda")
    target.generation_config.eos_token_id = None
    plan = SkipMask(2, (), (1,), None, {}, (0, 1), (0,), True)
    runs = 800
    pvalue, drafted = three_token_chi_square(target, [1, 2, 1, 2], lambda seed: SpeculativeDecoder(
        target, plan, lookahead=StaticLookahead(2), sampling=SamplingConfig(temperature=1.0, seed=seed)), runs)
    assert drafted > runs // 5
    assert pvalue > 1e-3


def test_the_profile_times_int4_sub_layers_and_costs_int4_plans(tiny_llama):
    """int4 costs mirror int8's; a profile without them refuses an int4 plan naming `layersearch profile`."""
    from layersearch.masks.mask import ModelInfo
    from layersearch.profiling.profile import INT4_FIELDS, LatencyProfile
    from layersearch.profiling.profiler import measure_profile

    info = ModelInfo("tiny", 4, tiny_llama.config.hidden_size, "f")
    profile = measure_profile(tiny_llama, info, contexts=(8, 16), max_verify=2, repeats=2)
    assert profile.has_int4 and profile.int4_mlp_seconds >= 0 and profile.int4_head_saving >= 0
    assert LatencyProfile.from_dict(profile.to_dict()) == profile
    plan = SkipMask(4, (0,), (), info, {}, (1,), (), False, (2, 3), (0, 1, 2, 3), True, 64)
    costed = profile.base_seconds - profile.int4_head_saving + sum(
        profile.sublayer_seconds(kind, plan.precision(kind, i), 16, i) for i in range(4) for kind in ("attention", "mlp"))
    assert abs(profile.draft_seconds(plan, 16) - costed) < 1e-12
    assert profile.sublayer_seconds("mlp", "int4", 16, 0) == profile.int4_mlp_seconds
    older = LatencyProfile.from_dict({k: v for k, v in profile.to_dict().items() if k not in INT4_FIELDS})
    assert not older.has_int4 and older.has_int8
    with pytest.raises(LayersearchError, match=r"no int4 timings .*`layersearch profile`"):
        older.draft_seconds(plan, 16)
