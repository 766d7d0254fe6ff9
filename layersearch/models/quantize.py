"""Cheaper draft models: int8 weights for an independent drafter on CPU.

A draft model never changes the output (verification runs the target in full precision), so it
may be approximate: only its cost and how often the target agrees with it matter. On this CPU a
fp32 forward streams every weight once per token, so int8 weights make the drafter's forward
about 2.7x cheaper (Qwen2.5-Coder-0.5B: 152 -> 56 ms a token, one thread).

``int8`` is torch's dynamic quantization (``torch.ao``, fbgemm): weights int8 per output channel,
activations quantized per tensor on the fly. Why the MLP's down projection stays fp32: its input
(``act(gate) * up``) has large outlier channels, and one per-tensor activation scale flattens the
rest; quantizing it took the 1.5B's greedy agreement with its own fp32 outputs from ~0.96 to
~0.78 on code prompts, while every other Linear costs nothing measurable in agreement
(docs/results.md, "Draft model in int8"). torch marks ``torch.ao.quantization`` deprecated in
favour of torchao, whose CPU int8 paths measured slower here (``_weight_int8pack_mm``: 3x fp32's
time for one token); where torch drops it, ``drafter.quant`` becomes one clear error.
"""

from __future__ import annotations

import copy
import warnings
from typing import TYPE_CHECKING, TypeGuard

import torch

from layersearch.common.errors import LayersearchError

from layersearch.common.checks import QUANT_SCHEMES, SELF_DRAFT_QUANTS

if TYPE_CHECKING:  # imported where used: torch may lack torch.ao (_int8_parts says so)
    from torch.ao.nn.quantized import Linear as AnyQuantizedLinear
    from torch.ao.nn.quantized.dynamic import Linear as QuantizedLinear

# Linears left in fp32: inputs with outlier channels that one activation scale cannot cover.
_KEPT_FP32 = ("down_proj",)


def check_quant(scheme: str | None, device: str = "cpu", dtype: str | None = None, *, self_draft: bool = False) -> None:
    """Raise unless ``scheme`` (None: no quantization) is known and runs on ``device`` from
    weights of ``dtype`` (None: the device's default). ``self_draft``: the model's own int8
    twins (:mod:`layersearch.models.precision`), which also run on CUDA (weight-only int8)."""
    if scheme is None:
        return
    if scheme == "int4":
        _check_int4_draft(device, dtype, self_draft)
        return
    if scheme not in QUANT_SCHEMES:
        raise LayersearchError(f"unknown draft quantization {scheme!r} (choose from {', '.join(SELF_DRAFT_QUANTS)}; "
                               f"a draft model takes {', '.join(QUANT_SCHEMES)})")
    if self_draft and str(device).startswith("cuda"):
        return
    if not str(device).startswith("cpu"):
        where = "CPU (torch's dynamic int8 kernels) or, for the model's own draft, CUDA" if self_draft else \
            "CPU only (torch's dynamic int8 kernels)"
        raise LayersearchError(f"draft_quant {scheme} runs on {where}, not {device}", fields="draft_quant")
    if dtype not in (None, "float32"):
        raise LayersearchError(f"draft_quant {scheme} quantizes float32 weights, not {dtype}", fields="draft_quant")


def _check_int4_draft(device: str, dtype: str | None, self_draft: bool) -> None:
    """int4 is the model's own draft (its int4 twins, :mod:`layersearch.models.int4`), from
    float32 or bfloat16 weights: CUDA (tinygemm) or CPU (the GPU-rounding emulation)."""
    if not self_draft:
        raise LayersearchError("draft_quant int4 runs the model's own int4 twins; a draft model takes int8 only "
                               "(or none: drop the draft model for the int4 self-draft)", fields="draft_quant")
    cuda = str(device).startswith("cuda")
    if not cuda and not str(device).startswith("cpu"):
        raise LayersearchError(f"draft_quant int4 runs on CPU or CUDA, not {device}", fields="draft_quant")
    if dtype not in (None, "float32", "bfloat16"):
        where = "on CUDA runs torch's bfloat16 tinygemm" if cuda else "on CPU emulates the GPU's bfloat16 kernel"
        raise LayersearchError(f"draft_quant int4 {where} from float32 or bfloat16 weights, not {dtype}", fields="draft_quant")


def quantize_draft(model: torch.nn.Module, scheme: str = "int8", keep: tuple[str, ...] = _KEPT_FP32) -> torch.nn.Module:
    """``model`` with its Linear layers (but those named in ``keep``: the MLP down projections)
    replaced in place by dynamically quantized int8 ones; returns ``model``. For draft models
    only: the result is approximate."""
    check_quant(scheme, str(next(model.parameters()).device))
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear and name not in keep:
                setattr(parent, name, quantized_like(child))
    return model


def quantized_copy(model: torch.nn.Module, scheme: str = "int8") -> torch.nn.Module:
    """A quantized copy of ``model`` (:func:`quantize_draft`); ``model`` stays as it is."""
    return quantize_draft(copy.deepcopy(model), scheme)


def is_quantized_linear(module: torch.nn.Module) -> "TypeGuard[AnyQuantizedLinear]":
    """True for a Linear that :func:`quantize_draft` replaced."""
    return type(module).__name__ == "Linear" and type(module).__module__.startswith("torch.ao.nn.quantized")


def is_quantized(model: torch.nn.Module) -> bool:
    """True when ``model`` holds Linears that :func:`quantize_draft` replaced."""
    return any(is_quantized_linear(m) for m in model.modules())


def quantized_like(linear: torch.nn.Linear) -> "QuantizedLinear":
    """``linear`` quantized the way :func:`quantize_draft` quantizes (for a head sliced from a
    quantized one)."""
    quantized_linear, qconfig = _int8_parts()
    linear.qconfig = qconfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's notice that quantized tensors are deprecated
        return quantized_linear.from_float(linear)


def _int8_parts():
    """torch's dynamic int8 Linear and its per-channel qconfig (one error line where torch lacks them)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its deprecation notice: see the module docstring
            from torch.ao.nn.quantized.dynamic import Linear
            from torch.ao.quantization import per_channel_dynamic_qconfig
    except ImportError as exc:  # a torch without torch.ao.quantization
        raise LayersearchError(f"draft_quant int8 needs torch's dynamic quantization, which this torch lacks ({exc})", fields="draft_quant") from None
    if "fbgemm" not in torch.backends.quantized.supported_engines and "x86" not in torch.backends.quantized.supported_engines:
        raise LayersearchError("draft_quant int8 needs torch's fbgemm/x86 quantized engine, which this build lacks", fields="draft_quant")
    return Linear, per_channel_dynamic_qconfig
