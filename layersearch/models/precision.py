"""int8 twins of a model's sub-layers: what a draft plan's ``int8`` sub-layers and head run.

The int4 twins (:mod:`layersearch.models.int4`) are built by the same helpers
(:func:`build_twins`); :func:`twins_for`, :func:`plan_twins` and :func:`plan_head` give any
precision's twins to the plan view, the drafters and the teacher.

A twin is the sub-layer (an attention or MLP module, or the LM head) with every Linear replaced
by an :class:`Int8Linear`: weights int8 per output channel, activations int8 with one scale per
token. A one-token call (every draft step) runs torch's dynamic int8 Linear (fbgemm), whose one
scale per call is then one per token; a call over several tokens (a teacher-forced score of a
plan, e.g. matchness) quantizes each token's activations with its own scale and multiplies by
the dequantized weights, because fbgemm's one scale for the whole sequence would measure a draft
that decoding never runs (agreement 0.78 instead of 0.97 on the 1.5B). It shares
everything else with the original (norms, rotary settings, ``layer_idx``, the config): an int8
attention twin reads and writes the target's KV cache exactly as the full sub-layer does, so a
plan draft still shares the target's cache (the loop overwrites draft entries on verification).

Why the whole model is twinned once, not per plan: quantizing a Linear takes a pass over its
weights (about 5 s for the 1.5B's every Linear on this CPU), while a search tries hundreds of
plans. :func:`int8_twins` builds them on first use and keeps them for the model's lifetime
(``nbytes`` reports their memory); the target's own weights are never touched.

On CUDA the twin is the GPU's int8 path, weight-only: the same int8 weights per output channel,
activations kept in the model's dtype (bf16 / fp16 / fp32), as gpt-fast's and torchao's
weight-only int8 Linears compute it, in eager PyTorch. It is lossless like every plan, but not
cheap: on an H200 one-token bf16 Linears are launch-bound (25-50 us against a 1-28 us
bandwidth floor), and the twin's dequantize-then-multiply takes about twice as long; a
``torch.compile``-d twin measured slower still (benchmarks/gpu_plans.py, docs/results.md). An int8
plan pays on a GPU only with a fused low-bit GEMV inside a CUDA-graph-captured step.

Captured forwards (CPU). fbgemm's packed weights are opaque to ``torch.compile``, so inside a
compiled forward a CPU twin calls the custom op ``torch.ops.layersearch.int8_linear`` with its
Linear's number (:data:`_LIVE` maps it back, weakly): one opaque node running the same kernel.
"""

from __future__ import annotations

import itertools
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from layersearch.common.errors import LayersearchError
from layersearch.models.int4 import Int4Twins, int4_twins as _int4_twins
from layersearch.models.quantize import is_quantized_linear, quantized_like
from layersearch.models.twins import TwinHead, build_twins

if TYPE_CHECKING:
    from layersearch.models.quantize import QuantizedLinear

#: The low-bit LM head (int8 or int4): :class:`~layersearch.models.twins.TwinHead`.
Int8Head = TwinHead

_TWINS: "weakref.WeakKeyDictionary[nn.Module, Int8Twins]" = weakref.WeakKeyDictionary()
# CPU int8 Linears by number, for the custom op (a compiled graph holds the number, not the module).
_LIVE: "weakref.WeakValueDictionary[int, Int8Linear]" = weakref.WeakValueDictionary()
_NUMBERS = itertools.count()


@dataclass(frozen=True)
class Int8Twins:
    """The int8 twins of one model: per decoder layer an attention and an MLP twin, and the head."""

    attention: tuple[nn.Module, ...]
    mlp: tuple[nn.Module, ...]
    head: "Int8Head"
    seconds: float = 0.0  # how long building them took

    def describe(self) -> str:
        """One line for the user: their memory and build time."""
        return f"int8 twins: {self.nbytes / 2**20:.0f} MiB, built in {self.seconds:.1f} s"

    @property
    def nbytes(self) -> int:
        """Bytes the twins hold (int8 weights, scales and biases)."""
        modules = (*self.attention, *self.mlp, self.head.linear)
        return sum(_quantized_bytes(m) for m in modules)


class Int8Linear(nn.Module):
    """A Linear in int8. CPU: fbgemm's dynamic int8 kernel for one token, per-token activation
    quantization over the dequantized int8 weights for several (see the module docstring).
    CUDA: int8 weights per output channel, activations in the model's dtype (weight-only)."""

    kernel: "QuantizedLinear | None"  # CPU: fbgemm's dynamic int8 Linear; None on the weight-only path
    # Weight-only buffers registered in __init__ (torch types registered buffers as ``Tensor | Module``).
    qweight: torch.Tensor  # [out, in] int8
    scale: torch.Tensor  # [out]
    bias: torch.Tensor | None  # [out]

    def __init__(self, linear: nn.Linear, *, weight_only: bool | None = None) -> None:
        """``weight_only`` None: the device's int8 path (weight-only on CUDA, fbgemm on CPU)."""
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.kernel = None
        if weight_only is None:
            weight_only = linear.weight.device.type != "cpu"
        if not weight_only:
            self.kernel = quantized_like(linear)
            self.number = next(_NUMBERS)
            _LIVE[self.number] = self
            return
        weight = linear.weight.detach().float()  # [out, in]
        scale = weight.abs().amax(dim=1).clamp_min(1e-12) / 127.0  # [out]: one scale per output channel
        self.register_buffer("qweight", torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale.to(linear.weight.dtype))
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [..., in] -> [..., out]."""
        if self.kernel is None:  # CUDA: weight-only int8
            return weight_only_int8(x, self.qweight, self.scale, self.bias)
        if torch.compiler.is_compiling():  # a captured forward: fbgemm as one traceable op
            return torch.ops.layersearch.int8_linear(x, self.number, self.out_features)
        return self.quantized(x)

    def quantized(self, x: torch.Tensor) -> torch.Tensor:
        """The CPU int8 product (fbgemm for one token, per-token scales for several)."""
        assert self.kernel is not None
        if x.numel() == x.shape[-1]:  # one token: the decode path
            return self.kernel(x)
        scale = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / 127.0  # [..., 1]: one scale per token
        quantized = torch.round(x / scale).clamp(-127, 127) * scale
        weight = self.kernel.weight().dequantize()  # [out, in]
        bias = self.kernel.bias()
        return torch.nn.functional.linear(quantized, weight, bias)


def weight_only_int8(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x`` [..., in] times int8 ``qweight`` [out, in] scaled per row by ``scale`` [out] (+ ``bias``)."""
    out = torch.nn.functional.linear(x, qweight.to(x.dtype)) * scale
    return out if bias is None else out + bias


@torch.library.custom_op("layersearch::int8_linear", mutates_args=())
def int8_linear(x: torch.Tensor, number: int, out_features: int) -> torch.Tensor:
    """CPU int8 Linear ``number`` (:class:`Int8Linear`) on ``x`` [..., in] -> [..., out_features]."""
    return _LIVE[number].quantized(x)


@int8_linear.register_fake
def _int8_linear_shape(x: torch.Tensor, number: int, out_features: int) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], out_features))


def int8_twins(model: nn.Module) -> Int8Twins:
    """The int8 twins of ``model``'s sub-layers and head, built on first use and kept."""
    twins = _TWINS.get(model)
    if twins is None:
        twins = _build(model)
        _TWINS[model] = twins
    return twins


def int4_twins(model: nn.Module, group_size: int = 128) -> Int4Twins:
    """The int4 twins of ``model``'s sub-layers and head in groups of ``group_size`` input
    columns (:mod:`layersearch.models.int4`), built on first use and kept."""
    return _int4_twins(model, group_size)


def twins_for(model: nn.Module, quant: str, group_size: int = 128) -> Int8Twins | Int4Twins:
    """The twins a plan's ``quant`` (int8 / int4) parts run: one entry point for every precision."""
    if quant == "int8":
        return int8_twins(model)
    if quant == "int4":
        return int4_twins(model, group_size)
    raise LayersearchError(f"unknown low-bit precision {quant!r} (int8 or int4)")


def plan_twins(model: nn.Module, plan: Any) -> dict[str, Int8Twins | Int4Twins]:
    """The twins each low-bit precision of ``plan`` (a SkipMask) needs, by precision name."""
    return {quant: twins_for(model, quant, plan.int4_group_size)
            for quant in ("int8", "int4") if getattr(plan, f"has_{quant}")}


def plan_head(model: nn.Module, plan: Any) -> TwinHead | None:
    """The low-bit LM head ``plan`` drafts with (None: the model's own)."""
    quant = plan.head_precision
    return None if quant == "full" else twins_for(model, quant, plan.int4_group_size).head


def check_int8_device(model: nn.Module) -> None:
    """One error line where ``model``'s weights cannot take the int8 twins: CPU needs float32
    (torch's dynamic int8 kernels), CUDA runs weight-only int8 in any float dtype, nothing else."""
    weight = next(model.parameters())
    if weight.device.type == "cuda":
        if not weight.dtype.is_floating_point:
            raise LayersearchError(f"int8 sub-layers need float weights, not {weight.dtype}")
        return
    if weight.device.type != "cpu":
        raise LayersearchError(
            f"int8 sub-layers run on CPU (torch's dynamic int8 kernels) or CUDA (weight-only int8); "
            f"the model is on {weight.device} — use a skip-only plan there"
        )
    if weight.dtype != torch.float32:  # fbgemm's dynamic int8 kernels quantize float32 weights
        raise LayersearchError(f"int8 sub-layers on CPU are made from float32 weights, not "
                               f"{str(weight.dtype).removeprefix('torch.')} (load the model in float32)")


def _build(model: nn.Module) -> Int8Twins:
    check_int8_device(model)
    start = time.perf_counter()
    attention, mlp, head = build_twins(model, lambda linear, name: Int8Linear(_plain_linear(linear)), "int8")
    return Int8Twins(attention, mlp, head, time.perf_counter() - start)


def _plain_linear(linear: nn.Module) -> nn.Linear:
    """``linear`` as a fresh nn.Linear over the same tensors: no kernel override is carried into
    the quantized copy, and a tied head (the embedding matrix) is not touched."""
    if not isinstance(linear, nn.Linear):
        raise LayersearchError(f"an int8 twin needs Linear layers, not {type(linear).__name__}")
    plain = nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
    plain.weight = nn.Parameter(linear.weight.detach(), requires_grad=False)
    if linear.bias is not None:
        plain.bias = nn.Parameter(linear.bias.detach(), requires_grad=False)
    return plain


def _quantized_bytes(module: nn.Module) -> int:
    """Bytes of the int8 Linears inside ``module``: int8 weights, per-channel scales, biases."""
    total = 0
    for child in module.modules():
        if is_quantized_linear(child):  # torch.ao's dynamic quantized Linear (CPU)
            weight, bias = child.weight(), child.bias()
            total += weight.numel() + 8 * weight.shape[0]  # int8 values; a scale and a zero point a row
            total += 0 if bias is None else bias.numel() * bias.element_size()
        elif isinstance(child, Int8Linear) and child.kernel is None:  # weight-only (CUDA)
            total += sum(t.numel() * t.element_size() for t in child.buffers(recurse=False))
    return total
