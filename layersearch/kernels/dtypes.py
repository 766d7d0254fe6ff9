"""The dtypes the numba kernels read, and how they read the half-precision ones.

numba has neither bfloat16 nor float16 (it types a float16 array but cannot compile a read of
one). The kernels therefore take a half-precision tensor's bits as a 16-bit integer array,
bfloat16 as ``uint16`` and float16 as ``int16`` (the integer type is what tells :func:`widen`
which format the bits are in), widen every value exactly to float32 where they use it,
accumulate in float32, and the caller rounds the float32 result to the tensor's dtype once
(torch's ``.to``: round to nearest even on the float32 bit pattern, a function of the value
alone). Widening is exact, so a half-precision kernel sums exactly the products its float32
twin would sum for the widened inputs, in the same order.
"""

from __future__ import annotations

from typing import Any, Callable, cast

import numpy as np
import torch
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

#: The dtypes the kernels run (CPU tensors of one sequence).
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: How a kernel sees a half-precision tensor's bits (see the module doc).
_BITS = {torch.bfloat16: np.uint16, torch.float16: np.int16}


def kernel_array(tensor: torch.Tensor) -> np.ndarray:
    """``tensor`` as the kernels read it: float32 values, or a half-precision tensor's bits
    (:data:`_BITS`); shares the tensor's memory where it is contiguous."""
    array = tensor.detach().contiguous()
    if array.dtype == torch.float32:
        return array.numpy()
    return array.view(torch.int16).numpy().view(_BITS[array.dtype])


def _float_from_bits(typingctx, bits):  # pragma: no cover - compiled by numba
    if bits != types.int32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(bits), codegen


def _widen(typingctx, value):  # pragma: no cover - compiled by numba
    if value == types.float32:
        def same(context, builder, signature, args):
            return args[0]

        return types.float32(value), same
    if value == types.uint16:
        def bfloat16(context, builder, signature, args):  # the 16 bits are float32's high half
            wide = builder.zext(args[0], ir.IntType(32))
            return builder.bitcast(builder.shl(wide, ir.Constant(ir.IntType(32), 16)), ir.FloatType())

        return types.float32(value), bfloat16
    if value == types.int16:
        def float16(context, builder, signature, args):  # LLVM's half: one conversion instruction (F16C)
            return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

        return types.float32(value), float16
    return None


# numba intrinsics, called inside compiled kernels as functions of the value alone (the cast
# only tells mypy so: numba passes the typing context itself).
#: The float32 whose bit pattern is the int32 ``bits``.
float_from_bits = cast(Callable[[Any], Any], intrinsic(_float_from_bits))
#: float32 as it is; uint16 bits as bfloat16 and int16 bits as float16, widened exactly to float32.
widen = cast(Callable[[Any], Any], intrinsic(_widen))
