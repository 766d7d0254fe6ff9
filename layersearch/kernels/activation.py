"""Activation kernels (SiLU, tanh GELU) whose result for a value is a function of that value alone.

torch computes an elementwise op by a vector loop, with a scalar loop for what is left over,
and for SiLU and GELU the two loops round differently (float32 SiLU: about 4 % of values differ
in the last bit on this machine's AVX-512). Which values fall to the scalar loop depends on the
whole tensor: with 3 or more threads torch splits a [k, width] call into chunks whose borders
fall inside rows, so in float32 a verification over k tokens computed some of a token's
activations by the other loop than a one-token forward did (width 8960, 4 threads: k = 8 and
10), and its logits differed in the last bits.

Exactness. These kernels compute exp by a polynomial of basic IEEE operations (no fast-math
flags, no vector math library), so their vector loop and their scalar loop give the same bits:
every value's result is a function of that value alone, whatever the tensor's size, the
thread count or the split. Half precision: each value is widened exactly, computed in float32
and rounded to its dtype once (:mod:`layersearch.kernels.dtypes`). The results differ from
torch's by about an ulp of float32 (exp's polynomial); :mod:`layersearch.kernels.select` routes
a model's SiLU and tanh-GELU modules through them. Compiled forwards call the custom op
``torch.ops.layersearch.activation``.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from numba import njit, prange

from layersearch.kernels import rowwise_linear  # noqa: F401  (sets numba's threading layer first)
from layersearch.kernels.dtypes import float_from_bits, kernel_array, widen

#: The activations the kernels compute.
ACTIVATIONS = ("silu", "gelu_tanh")
#: Values per parallel task.
BLOCK = 1 << 13
#: Calls over fewer values run on the calling thread: there (about 0.5 ns a value) launching
#: numba's pool costs more than it saves.
PARALLEL_MIN_VALUES = 1 << 17

_LOG2E = np.float32(1.4426950408889634)
_LN2_HIGH = np.float32(0.693359375)  # ln 2 in two parts (Cody-Waite): n * high is exact
_LN2_LOW = np.float32(-2.12194440e-4)
_LOWEST = np.float32(-104.0)  # exp's argument clamped: below, e**x rounds to 0; above, to inf
_HIGHEST = np.float32(89.0)
_ONE = np.float32(1.0)
_HALF = np.float32(0.5)
_TWO = np.float32(2.0)

_GELU_SCALE = np.float32(0.7978845608028654)  # sqrt(2 / pi)
_GELU_CUBE = np.float32(0.044715)


@njit(inline="always")
def _exp(x):  # pragma: no cover - compiled by numba (inlined)
    # Cephes' expf: e**x = 2**n * e**r, |r| <= ln(2) / 2, e**r by a polynomial; 2**n as two
    # factors 2**(n // 2) and 2**(n - n // 2), each a normal float32, so the tails round to
    # subnormals, 0 and inf as e**x does.
    x = min(max(x, _LOWEST), _HIGHEST)
    n = np.floor(x * _LOG2E + _HALF)
    r = x - n * _LN2_HIGH
    r = r - n * _LN2_LOW
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    y = p * (r * r) + r + _ONE
    half = np.int32(n) >> np.int32(1)
    rest = np.int32(n) - half
    y = y * float_from_bits(np.int32((half + np.int32(127)) << np.int32(23)))
    return y * float_from_bits(np.int32((rest + np.int32(127)) << np.int32(23)))


# The kernels' error_model is numpy's: a division is IEEE's, without the zero check (which kept
# LLVM from vectorizing the loops).
@njit(inline="always")
def _silu(v):  # pragma: no cover - compiled by numba (inlined)
    return v / (_ONE + _exp(-v))


@njit(inline="always")
def _gelu_tanh(v):  # pragma: no cover - compiled by numba (inlined)
    # v / 2 * (1 + tanh(u)) = v * sigmoid(2u): no cancellation where tanh(u) is near -1.
    u = _GELU_SCALE * (v + _GELU_CUBE * (v * v * v))
    return v / (_ONE + _exp(-_TWO * u))


@njit(parallel=True, cache=True, boundscheck=False, error_model="numpy")
def silu(x, out):  # pragma: no cover - compiled by numba
    """out[i] = silu(x[i]) over flat arrays, blocks spread over numba's threads."""
    for block in prange((x.shape[0] + BLOCK - 1) // BLOCK):
        for i in range(block * BLOCK, min(x.shape[0], (block + 1) * BLOCK)):
            out[i] = _silu(widen(x[i]))


@njit(cache=True, boundscheck=False, error_model="numpy")
def silu_serial(x, out):  # pragma: no cover - compiled by numba
    """The same on the calling thread."""
    for i in range(x.shape[0]):
        out[i] = _silu(widen(x[i]))


@njit(parallel=True, cache=True, boundscheck=False, error_model="numpy")
def gelu_tanh(x, out):  # pragma: no cover - compiled by numba
    """out[i] = the tanh approximation of gelu(x[i]), blocks spread over numba's threads."""
    for block in prange((x.shape[0] + BLOCK - 1) // BLOCK):
        for i in range(block * BLOCK, min(x.shape[0], (block + 1) * BLOCK)):
            out[i] = _gelu_tanh(widen(x[i]))


@njit(cache=True, boundscheck=False, error_model="numpy")
def gelu_tanh_serial(x, out):  # pragma: no cover - compiled by numba
    """The same on the calling thread."""
    for i in range(x.shape[0]):
        out[i] = _gelu_tanh(widen(x[i]))


_KERNELS = {"silu": (silu, silu_serial), "gelu_tanh": (gelu_tanh, gelu_tanh_serial)}


def activation(x: torch.Tensor, name: str) -> torch.Tensor:
    """``name`` (one of :data:`ACTIVATIONS`) of every value of ``x`` (a CPU tensor of
    float32, bfloat16 or float16), in ``x``'s dtype and shape."""
    flat = kernel_array(x.reshape(-1))
    out = np.empty(flat.shape[0], np.float32)
    parallel, serial = _KERNELS[name]
    # Any split gives the same bits (each value's result is its own): the faster one runs.
    (parallel if flat.shape[0] >= PARALLEL_MIN_VALUES and numba.get_num_threads() > 1 else serial)(flat, out)
    return torch.from_numpy(out).view(x.shape).to(x.dtype)


@torch.library.custom_op("layersearch::activation", mutates_args=())
def activation_op(x: torch.Tensor, name: str) -> torch.Tensor:
    """:func:`activation` as a torch custom op (what compiled forwards call)."""
    return activation(x, name)


@activation_op.register_fake
def _activation_shape(x: torch.Tensor, name: str) -> torch.Tensor:
    return torch.empty_like(x)
