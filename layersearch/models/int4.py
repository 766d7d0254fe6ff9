"""int4 twins of a model's sub-layers: what a draft plan's ``int4`` sub-layers and head run.

Weight-only, asymmetric, grouped, in the convention of torch's int4 "tinygemm" kernel
(``torch.ops.aten._weight_int4pack_mm``, the kernel gpt-fast's and torchao's int4 weight-only
Linears run): each row of a Linear's weight is cut into groups of ``group_size`` input columns
(32, 64, 128 or 256); a group has one bf16 scale ``s`` and zero ``z`` and 4-bit codes
``q`` in 0..15, and the weight it stands for is::

    w = (q - 8) * s + z        with  s = (max - min) / 15,  z = min + 8 * s

so ``q = 0`` is the group's minimum and ``q = 15`` its maximum.

CUDA: the codes are packed once by ``_convert_weight_to_int4pack`` and every call is one
``_weight_int4pack_mm`` over bf16 activations, traceable by ``torch.compile(fullgraph=True)``:
no host reads, no data-dependent shapes. The kernel takes bf16 only: a float32 model's
activations pass through bf16 and its output comes back in float32, as on the CPU, so an fp32
target (where greedy equality is exact) drafts in int4 too.

CPU: the GPU-rounding bf16 emulation. The CUDA kernel dequantizes each weight once, rounding
``(q - 8) * s + z`` to bf16, and accumulates the products in fp32. The CPU path computes that
dequantized weight once per model in float64 and rounds it to bf16 (the kernel's single
rounding), and each call runs a bf16 ``F.linear`` over the activations cast to bf16, cast back
to the activations' dtype. Acceptance measured here is then the acceptance the GPU will see
(torch's CPU int4 kernel keeps the dequantized weight in fp32 and agrees with the GPU's rounding
in only about 57% of outputs). It is no speedup on a CPU: it is there for acceptance and
losslessness. float32 models draft in int4 too (their activations pass through bf16); float16
models are refused on both devices: tinygemm deploys bf16, so a float16 draft would measure
a kernel nobody runs (load the model in bfloat16).

The twins are built once per (model, group size) and kept for the model's lifetime, like the
int8 twins (:mod:`layersearch.models.precision`, whose helpers build them); the target's own
weights are never touched.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
from torch import nn

from layersearch.common.checks import check_int_choice
from layersearch.common.errors import LayersearchError
from layersearch.models.twins import TwinHead, build_twins

if TYPE_CHECKING:
    from layersearch.masks.mask import SkipMask

#: Group sizes the tinygemm kernel takes.
GROUP_SIZES = (32, 64, 128, 256)
DEFAULT_GROUP_SIZE = 128

_TWINS: "weakref.WeakKeyDictionary[nn.Module, dict[int, Int4Twins]]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Int4Twins:
    """The int4 twins of one model: per decoder layer an attention and an MLP twin, and the head."""

    attention: tuple[nn.Module, ...]
    mlp: tuple[nn.Module, ...]
    head: TwinHead
    group_size: int = DEFAULT_GROUP_SIZE
    seconds: float = 0.0  # how long building them took

    def describe(self) -> str:
        """One line for the user: their memory, group size and build time."""
        return f"int4 twins (groups of {self.group_size}): {self.nbytes / 2**20:.0f} MiB, built in {self.seconds:.1f} s"

    @property
    def nbytes(self) -> int:
        """Bytes the twins hold (codes, scales and zeros, biases; on CPU the bf16 emulation weights too)."""
        modules = (*self.attention, *self.mlp, self.head.linear)
        return sum(t.numel() * t.element_size() for m in modules for child in m.modules() if isinstance(child, Int4Linear)
                   for t in child.buffers(recurse=False))


def check_group_size(group_size: object) -> int:
    """``group_size`` if the kernel takes it (an int, not 64.0); one error line naming the field otherwise."""
    return check_int_choice(group_size, GROUP_SIZES, "int4 group_size")


def check_int4_device(model: nn.Module) -> None:
    """One error line where ``model``'s weights cannot take the int4 twins: float32 or bf16
    weights on CUDA (tinygemm) or CPU (the GPU-rounding emulation), nothing else."""
    weight = next(model.parameters())
    check_int4_weight(weight.device, weight.dtype)


def check_int4_weight(device: torch.device, dtype: torch.dtype) -> None:
    """The device and dtype check of :func:`check_int4_device` for one weight."""
    name = str(dtype).removeprefix("torch.")
    if device.type not in ("cpu", "cuda"):
        raise LayersearchError(f"int4 sub-layers run on CPU (bf16 emulation) or CUDA (tinygemm); the model is on {device} "
                               "— use a plan without int4 there")
    if dtype not in (torch.float32, torch.bfloat16):
        where = "on CUDA run torch's bfloat16 tinygemm" if device.type == "cuda" else "on CPU emulate the GPU's bfloat16 kernel"
        raise LayersearchError(f"int4 sub-layers {where} from float32 or bfloat16 weights, not {name}")


def quantize_groups(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``weight`` [out, in] -> codes [out, in] (uint8, 0..15), scales and zeros [out, in / group_size]
    (bf16), in tinygemm's convention ``w = (q - 8) * s + z`` (gpt-fast's ``group_quantize_tensor``)."""
    out_features, in_features = weight.shape
    groups = weight.detach().to(torch.float32).reshape(out_features, in_features // group_size, group_size)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)  # [out, groups]
    scales = ((high - low).clamp_min(1e-6) / 15).to(torch.bfloat16)
    zeros = (low + scales.float() * 8).to(torch.bfloat16)
    # The codes come from the bf16 scale and zero the kernel will use, so rounding them costs no code.
    minimum = (zeros.float() - scales.float() * 8)[..., None]  # [out, groups, 1]
    codes = ((groups - minimum) / scales.float()[..., None]).round().clamp(0, 15).to(torch.uint8)
    return codes.reshape(out_features, in_features), scales, zeros


def dequantize_groups(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int) -> torch.Tensor:
    """The weight [out, in] bf16 the CUDA kernel computes: ``(q - 8) * s + z`` in float64 (exact
    for these operands), rounded once to bf16 as the kernel's ``fma.rn.bf16x2`` rounds it."""
    out_features, in_features = codes.shape
    q = codes.to(torch.float64).reshape(out_features, in_features // group_size, group_size)
    weight = (q - 8) * scales.to(torch.float64)[..., None] + zeros.to(torch.float64)[..., None]
    return weight.reshape(out_features, in_features).to(torch.bfloat16)


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """Codes [out, in] (0..15) -> [out, in / 2] uint8, two a byte (even column in the high
    nibble), the layout ``_convert_weight_to_int4pack`` takes."""
    return (codes[:, ::2] << 4 | codes[:, 1::2]).to(torch.uint8)


def unpack_codes(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_codes`: [out, in / 2] uint8 -> [out, in] codes."""
    return torch.stack([packed >> 4, packed & 15], dim=-1).reshape(packed.shape[0], -1)


class Int4Linear(nn.Module):
    """A Linear in weight-only int4 (module docstring). CUDA: tinygemm over bf16 activations;
    CPU: the GPU-rounding bf16 emulation; either way the output comes back in the activations' dtype."""

    # Buffers registered in __init__ (torch types registered buffers as ``Tensor | Module``).
    packed: torch.Tensor  # [out, in / 2] uint8
    scales_and_zeros: torch.Tensor  # [groups, out, 2]
    bias: torch.Tensor | None  # [out]
    tiles: torch.Tensor  # CUDA only: tinygemm's packed weight
    weight: torch.Tensor | None  # CPU: [out, in] bf16; CUDA: None

    def __init__(self, linear: nn.Linear, group_size: int = DEFAULT_GROUP_SIZE, name: str = "a Linear") -> None:
        super().__init__()
        self.group_size = check_group_size(group_size)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight
        check_int4_weight(weight.device, weight.dtype)
        if self.in_features % group_size:
            raise LayersearchError(f"int4 group_size {group_size} does not divide the {self.in_features} in-features "
                                   f"of {name}: {_fitting_words([self.in_features])}")
        codes, scales, zeros = quantize_groups(weight, group_size)  # [out, in], [out, groups] x 2
        self.register_buffer("packed", pack_codes(codes))  # [out, in / 2] uint8
        # [groups, out, 2]: tinygemm's qScaleAndZeros
        self.register_buffer("scales_and_zeros", torch.stack([scales, zeros], dim=-1).transpose(0, 1).contiguous())
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach())
        self.cuda_kernel = weight.device.type == "cuda"
        if self.cuda_kernel:
            if self.out_features % 8:
                raise LayersearchError(f"int4 on CUDA needs out-features in multiples of 8; {name} has {self.out_features}")
            # The largest inner-k tiling (16 columns a tile) the width allows, as gpt-fast chooses.
            self.inner_k_tiles = next((t for t in (8, 4, 2) if self.in_features % (16 * t) == 0), 0)
            if not self.inner_k_tiles:
                raise LayersearchError(f"int4 on CUDA needs in-features in multiples of 32; {name} has {self.in_features}")
            self.register_buffer("tiles", torch.ops.aten._convert_weight_to_int4pack(self.packed, self.inner_k_tiles))
            self.register_buffer("weight", None)
        else:
            self.register_buffer("weight", dequantize_groups(codes, scales, zeros, group_size))  # [out, in] bf16

    def codes(self) -> torch.Tensor:
        """The 4-bit codes [out, in] (0..15)."""
        return unpack_codes(self.packed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [..., in] -> [..., out] in ``x``'s dtype."""
        if self.cuda_kernel:  # one tinygemm call over [tokens, in] in bf16
            flat = x.reshape(-1, self.in_features).to(torch.bfloat16)  # [n, in]
            out = torch.ops.aten._weight_int4pack_mm(flat, self.tiles, self.group_size, self.scales_and_zeros)  # [n, out]
            out = out.reshape(*x.shape[:-1], self.out_features).to(x.dtype)
        else:  # bf16 products of the GPU-rounded weight, fp32 accumulation as on the GPU
            assert self.weight is not None  # registered on every CPU twin
            out = nn.functional.linear(x.to(torch.bfloat16), self.weight).to(x.dtype)
        return out if self.bias is None else out + self.bias


def _fitting_words(widths: "list[int] | set[int]") -> str:
    """The advice for group sizes that do not fit: the accepted sizes dividing every width, or that none does."""
    fitting = [g for g in GROUP_SIZES if all(w % g == 0 for w in widths)]
    if not fitting:
        return f"no int4 group size ({', '.join(map(str, GROUP_SIZES))}) divides them: use a plan without int4"
    return f"choose a group size that does ({' or '.join(map(str, fitting))})"


def check_model_group_size(model: nn.Module, group_size: int) -> None:
    """One error line where ``group_size`` does not divide the in-features of every Linear of
    ``model`` (the widths :func:`model_group_size` reads), naming the first such Linear and only
    the group sizes that divide them all (SmolLM2-135M's 576 takes 32 and 64, not 128 or 256)."""
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    for name, linear in linears:
        if linear.in_features % group_size:
            raise LayersearchError(f"int4 group_size {group_size} does not divide the {linear.in_features} in-features "
                                   f"of {name}: {_fitting_words({m.in_features for _, m in linears})}")


def model_group_size(model: nn.Module, wanted: int = DEFAULT_GROUP_SIZE) -> int:
    """The group size a searched or self-drafted int4 plan runs on ``model`` with: ``wanted``
    (128) where it divides every Linear's in-features, else the largest accepted size below it
    that does (SmolLM2-135M's width 576 takes 64), else ``wanted`` (its twins then name the
    Linear it does not fit). A group size a user gives is never changed: it fits or is refused."""
    widths = {m.in_features for m in model.modules() if isinstance(m, nn.Linear)}
    fitting = [g for g in GROUP_SIZES if g <= wanted and all(w % g == 0 for w in widths)]
    return max(fitting, default=wanted)


def fit_group_size(plan: "SkipMask", model: nn.Module) -> "SkipMask":
    """``plan`` with the group size :func:`model_group_size` gives ``model`` (unchanged without int4 parts)."""
    if not plan.has_int4:
        return plan
    group = model_group_size(model, plan.int4_group_size)
    return plan if group == plan.int4_group_size else replace(plan, int4_group_size=group)


def int4_twins(model: nn.Module, group_size: int = DEFAULT_GROUP_SIZE) -> Int4Twins:
    """The int4 twins of ``model``'s sub-layers and head in groups of ``group_size``, built on
    first use and kept (one set per group size)."""
    check_group_size(group_size)
    per_model = _TWINS.setdefault(model, {})
    twins = per_model.get(group_size)
    check_int4_device(model)  # on every use: a model moved to float16 after its twins were built is refused too
    if twins is None:
        check_model_group_size(model, group_size)
        start = time.perf_counter()
        attention, mlp, head = build_twins(
            model, lambda linear, name: Int4Linear(linear, group_size, name), "int4")
        twins = per_model[group_size] = Int4Twins(attention, mlp, head, group_size, time.perf_counter() - start)
    return twins
