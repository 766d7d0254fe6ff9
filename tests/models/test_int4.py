"""int4 twins: the CPU emulation rounds each dequantized weight as the CUDA kernel does, the
codes stand for the weights within half a step, the twins are built once and leave the target
untouched, and bad input is one error line naming the field."""

from __future__ import annotations

import pytest
import torch

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.int4 import (
    Int4Linear, check_int4_weight, dequantize_groups, pack_codes, quantize_groups, unpack_codes,
)
from layersearch.models.precision import int4_twins
from layersearch.models.skipping import skipping
from layersearch.models.tiny import build_tiny_model


def _linear(out_features: int, in_features: int, seed: int, bias: bool = False, dtype=torch.float32) -> torch.nn.Linear:
    torch.manual_seed(seed)
    linear = torch.nn.Linear(in_features, out_features, bias=bias)
    with torch.no_grad():  # a spread of magnitudes per group, and an outlier column
        linear.weight.mul_(torch.logspace(-2, 1, in_features))
    return linear.to(dtype)


@pytest.mark.parametrize("group_size", [32, 64, 128, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_stored_weight_is_the_kernels_single_bf16_rounding(group_size, dtype):
    """The reference: ((q - 8) * s + z) in float64 from the codes, scales and zeros, cast once to bf16."""
    int4 = Int4Linear(_linear(48, 512, group_size, dtype=dtype), group_size)
    codes = int4.codes().to(torch.float64)  # [out, in]
    scales = int4.scales_and_zeros[..., 0].transpose(0, 1).to(torch.float64)  # [out, groups]
    zeros = int4.scales_and_zeros[..., 1].transpose(0, 1).to(torch.float64)
    expected = torch.empty(48, 512, dtype=torch.bfloat16)
    for column in range(512):  # column by column: a different route to the same arithmetic
        group = column // group_size
        expected[:, column] = ((codes[:, column] - 8) * scales[:, group] + zeros[:, group]).to(torch.bfloat16)
    assert int4.weight.dtype == torch.bfloat16
    assert torch.equal(int4.weight.view(torch.int16), expected.view(torch.int16))  # bit for bit
    assert codes.min() >= 0 and codes.max() <= 15


@pytest.mark.parametrize("group_size", [32, 128])
def test_the_codes_stand_for_the_weights_within_half_a_step(group_size):
    """|w - dequantized| <= s/2, plus what rounding s and z to bf16 moves the grid (2^-9 of each,
    at most 8 steps from the zero) and the final bf16 rounding of the weight (2^-9 relative)."""
    linear = _linear(32, 256, 7)
    codes, scales, zeros = quantize_groups(linear.weight, group_size)
    weight = linear.weight.detach().double().reshape(32, -1, group_size)  # [out, groups, g]
    got = dequantize_groups(codes, scales, zeros, group_size).double().reshape(32, -1, group_size)
    s, z = scales.double()[..., None], zeros.double()[..., None]
    bound = s / 2 + 2.0**-9 * (8 * s + z.abs()) + 2.0**-9 * got.abs()
    assert ((weight - got).abs() <= bound).all()
    # and the grid really is used: every group spans codes 0 to 15 (its minimum and maximum)
    grouped = codes.reshape(32, -1, group_size)
    assert (grouped.amin(-1) == 0).all() and (grouped.amax(-1) == 15).all()


def test_packing_two_codes_a_byte_round_trips():
    codes = torch.randint(0, 16, (16, 64), dtype=torch.uint8)
    packed = pack_codes(codes)
    assert packed.shape == (16, 32) and torch.equal(unpack_codes(packed), codes)


def test_a_float32_model_runs_bf16_products_and_returns_its_dtype():
    linear = _linear(24, 64, 3, bias=True)
    int4 = Int4Linear(linear, 32)
    x = torch.randn(2, 5, 64)
    out = int4(x)
    assert out.dtype == torch.float32 and out.shape == (2, 5, 24)
    expected = torch.nn.functional.linear(x.to(torch.bfloat16), int4.weight).float() + linear.bias
    assert torch.equal(out, expected)
    relative = (out - linear(x)).norm() / linear(x).norm()
    assert relative < 0.2  # a 16-step grid over each group: errors near range / 15 / sqrt(12), not something else


def test_twins_are_built_once_per_group_size_and_leave_the_model_alone(tiny_llama):
    before = {name: p.clone() for name, p in tiny_llama.named_parameters()}
    twins = int4_twins(tiny_llama, 32)
    assert int4_twins(tiny_llama, 32) is twins and int4_twins(tiny_llama, 64) is not twins
    assert len(twins.attention) == len(twins.mlp) == 4 and twins.group_size == 32
    assert "int4 twins (groups of 32)" in twins.describe() and "MiB" in twins.describe()
    weights = sum(m.weight.numel() for m in tiny_llama.modules() if isinstance(m, torch.nn.Linear))
    assert weights * 2.5 <= twins.nbytes < weights * 3  # CPU: bf16 emulation weights and the codes
    assert all(torch.equal(p, before[name]) for name, p in tiny_llama.named_parameters())


def test_a_plan_with_int4_changes_the_draft_only_inside_its_block(tiny_qwen2):
    ids = torch.tensor([[3, 9, 27, 81, 5, 7]])
    plan = SkipMask(4, (0,), (), int4_attention=(1, 2, 3), int4_mlp=(0, 1, 2, 3), int4_group_size=32)
    with torch.no_grad():
        before = tiny_qwen2(ids).logits
        with skipping(tiny_qwen2, plan):
            during = tiny_qwen2(ids).logits
        after = tiny_qwen2(ids).logits
    assert not torch.equal(before, during) and torch.equal(before, after)


def test_a_group_size_that_does_not_divide_the_width_is_one_error_line(tiny_llama):
    with pytest.raises(LayersearchError, match=r"group_size 128 does not divide the 64 in-features of model\.layers\.0"):
        int4_twins(tiny_llama, 128)
    with pytest.raises(LayersearchError, match="group_size must be one of 32, 64, 128, 256, got 48"):
        int4_twins(tiny_llama, 48)
    for not_an_int in (64.0, True):  # 64.0 == 64 to Python, but the kernel takes an int
        with pytest.raises(LayersearchError, match=f"group_size must be one of 32, 64, 128, 256, got {not_an_int}"):
            int4_twins(tiny_llama, not_an_int)


def test_the_group_size_hint_lists_only_sizes_that_divide_the_widths():
    """SmolLM2-135M's width 576: 128 and 256 do not divide it, so the hint offers 32 and 64 only."""
    model = build_tiny_model("llama", num_layers=1, hidden_size=576, seed=2)
    with pytest.raises(LayersearchError) as error:
        int4_twins(model, 128)
    message = str(error.value)
    assert "does not divide the 576 in-features" in message and message.endswith("choose a group size that does (32 or 64)")
    with pytest.raises(LayersearchError, match=r"choose a group size that does \(32\)$"):
        Int4Linear(_linear(8, 96, 0), 64)


def test_a_model_moved_to_float16_after_its_twins_were_built_is_refused_as_one_loaded_so():
    """The dtype is checked where the twins are used, not only where they are built: a float32
    model's int4 twins do not run after ``model.to(torch.float16)``, with the fresh float16 model's words."""
    plan = SkipMask(2, int4_mlp=(0,), int4_group_size=32)
    fresh = build_tiny_model("llama", num_layers=2, seed=3).to(torch.float16)
    with pytest.raises(LayersearchError) as refused_fresh:
        with skipping(fresh, plan):
            pass
    moved = build_tiny_model("llama", num_layers=2, seed=3)
    with skipping(moved, plan):  # the twins are built in float32
        pass
    moved.to(torch.float16)
    with pytest.raises(LayersearchError) as refused_moved:
        with skipping(moved, plan):
            pass
    assert str(refused_moved.value) == str(refused_fresh.value)
    assert "from float32 or bfloat16 weights, not float16" in str(refused_moved.value)


def test_int4_on_an_unsupported_dtype_or_device_is_one_error_line():
    with pytest.raises(LayersearchError, match="not float16"):
        check_int4_weight(torch.device("cpu"), torch.float16)
    with pytest.raises(LayersearchError, match="on CUDA run torch's bfloat16 tinygemm from float32 or bfloat16 weights, not float16"):
        check_int4_weight(torch.device("cuda"), torch.float16)
    check_int4_weight(torch.device("cuda"), torch.float32)  # fine: activations pass through bf16
    with pytest.raises(LayersearchError, match="CPU .* or CUDA"):
        check_int4_weight(torch.device("meta"), torch.bfloat16)
    model = build_tiny_model("llama", num_layers=2, seed=3).to(torch.float16)
    with pytest.raises(LayersearchError, match="not float16"):
        with skipping(model, SkipMask(2, int4_mlp=(0,), int4_group_size=32)):
            pass


@pytest.mark.skipif(not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"), reason="torch without its CPU int4 kernel")
@pytest.mark.parametrize("group_size", [32, 128])
def test_torchs_int4_kernel_reads_our_codes_scales_and_zeros_as_we_do(group_size):
    """torch's CPU build of the tinygemm kernel, given our codes and [groups, out, 2] scales and
    zeros, computes our product: it dequantizes in fp32 where we round each weight to bf16, so
    they differ by at most 2^-9 of sum |x w| (that rounding), plus an output ulp each."""
    linear = _linear(64, 256, 11)
    int4 = Int4Linear(linear, group_size)
    x = torch.randn(3, 256).to(torch.bfloat16)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(int4.codes().to(torch.int32), 2)
    theirs = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group_size, int4.scales_and_zeros).float()
    ours = int4(x).float()
    magnitude = x.float().abs() @ int4.weight.float().abs().t()  # [3, 64]: sum |x w| per output
    ulp = 2.0 ** (torch.floor(torch.log2(ours.abs().clamp_min(1e-30))) - 7)
    assert ((theirs - ours).abs() <= 2.0**-9 * magnitude + 2 * ulp).all()
