"""A linear-layer kernel for CPU verification: each weight row read once for all k tokens.

Verifying k drafted tokens pays when a forward over k tokens costs about as much as over one.
On CPU, stock BLAS (MKL's small-M sgemm) reads a weight matrix about once per 3 tokens, so a
forward over 8 tokens costs 2-3 one-token forwards. :func:`rowwise_linear` is a numba kernel
that streams each weight row from memory once for up to :data:`TOKEN_BLOCK` tokens (a block of
:data:`ROW_BLOCK` rows times a block of :data:`TOKEN_BLOCK` tokens, accumulated in
registers; wider calls pass over the same rows again while they sit in cache), parallel over
row blocks.

Exactness. The sum for one (row, token) pair is always computed by the same compiled loop in
the same order, whatever the number of tokens in the call: a call over k tokens is rounded up
to whole token blocks by repeating its last token (the repeats' outputs are dropped), and the
last row block repeats its last row. So a token's result is bitwise independent of how many
tokens share the call (``tests/kernels/test_kernels.py`` checks it), and greedy speculative
output equals our plain loop run with the same kernels token by token
(:mod:`layersearch.kernels.select` routes a model's layers through it).

The same holds in bfloat16 and float16 (:mod:`layersearch.kernels.dtypes`): the kernel reads
the half-precision weight's own bits and widens each exactly to float32 as it reads it (no
float32 copy of the weights), the activations are widened exactly before the call, the sum
runs in float32 through the same loop in the same order, the bias is added in float32 and the
result is rounded to the weight's dtype once, per element. So a token's half-precision output
is a function of its own input row alone, as in float32; torch's half-precision linear, whose
blocking follows the number of rows, rounds a k-token call differently from one-token calls.

Captured forwards. numba's functions are opaque to ``torch.compile``, so the kernel is also the
custom op ``torch.ops.layersearch.rowwise_linear`` (:func:`rowwise_linear_op`, with a fake
implementation giving the output's shape): a compiled forward calls it as one node, the same
kernel the eager forward calls, so captured and eager verification give the same bits.
"""

from __future__ import annotations

import os

import numba
import numpy as np
import torch
from numba import njit, prange

from layersearch.kernels.dtypes import kernel_array, widen

#: Calls over more tokens than this keep torch's kernels: a long prefill, the same in plain and
#: speculative decoding, where the stock GEMM and attention are faster. Verification stays below.
MAX_TOKENS = 64

if "NUMBA_THREADING_LAYER" not in os.environ:
    # numba's default OpenMP pool keeps spinning between launches; in the same process it made
    # torch's own (OpenMP) ops 3-5x slower on this 2-core machine. Its workqueue pool sleeps.
    numba.config.THREADING_LAYER = "workqueue"  # type: ignore[attr-defined]  # numba.config defines its settings at import, unseen by mypy

#: Tokens per pass over a row block (the kernel's register block; fixed, see the module doc).
TOKEN_BLOCK = 4
#: Weight rows per parallel task.
ROW_BLOCK = 8

# reassoc lets LLVM vectorize each dot product across the input dimension (16 lanes, two
# interleaved accumulators). The resulting summation order is fixed by the compiled loop and
# the input width only, so it is the same for every (row, token) pair of a given weight.
_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}


@njit(inline="always")
def _rows_times_tokens(x, k, w, out):  # pragma: no cover - compiled by numba (inlined below)
    # x [k', n] float32 with k' >= k; w [m, n] row-major, float32 or half-precision bits (widened
    # exactly as read); out [kp, m] float32, kp = k rounded up to TOKEN_BLOCK.
    # Tokens past k repeat token k - 1 (x is not padded, so no copy); rows past m repeat
    # row m - 1. Every (row, token) pair therefore runs through the same loop below, and its
    # 32 accumulators (8 rows x 4 tokens) stay in vector registers.
    kp = out.shape[0]
    n = w.shape[1]
    m = w.shape[0]
    for block in prange((m + 7) // 8):
        r0 = 8 * block
        r1 = min(r0 + 1, m - 1)
        r2 = min(r0 + 2, m - 1)
        r3 = min(r0 + 3, m - 1)
        r4 = min(r0 + 4, m - 1)
        r5 = min(r0 + 5, m - 1)
        r6 = min(r0 + 6, m - 1)
        r7 = min(r0 + 7, m - 1)
        w0, w1, w2, w3, w4, w5, w6, w7 = w[r0], w[r1], w[r2], w[r3], w[r4], w[r5], w[r6], w[r7]
        for t0 in range(0, kp, 4):
            x0, x1, x2, x3 = x[min(t0, k - 1)], x[min(t0 + 1, k - 1)], x[min(t0 + 2, k - 1)], x[min(t0 + 3, k - 1)]
            a00 = a01 = a02 = a03 = np.float32(0.0)
            a10 = a11 = a12 = a13 = np.float32(0.0)
            a20 = a21 = a22 = a23 = np.float32(0.0)
            a30 = a31 = a32 = a33 = np.float32(0.0)
            a40 = a41 = a42 = a43 = np.float32(0.0)
            a50 = a51 = a52 = a53 = np.float32(0.0)
            a60 = a61 = a62 = a63 = np.float32(0.0)
            a70 = a71 = a72 = a73 = np.float32(0.0)
            for i in range(n):
                y0, y1, y2, y3 = x0[i], x1[i], x2[i], x3[i]
                u = widen(w0[i])
                a00 += u * y0
                a01 += u * y1
                a02 += u * y2
                a03 += u * y3
                u = widen(w1[i])
                a10 += u * y0
                a11 += u * y1
                a12 += u * y2
                a13 += u * y3
                u = widen(w2[i])
                a20 += u * y0
                a21 += u * y1
                a22 += u * y2
                a23 += u * y3
                u = widen(w3[i])
                a30 += u * y0
                a31 += u * y1
                a32 += u * y2
                a33 += u * y3
                u = widen(w4[i])
                a40 += u * y0
                a41 += u * y1
                a42 += u * y2
                a43 += u * y3
                u = widen(w5[i])
                a50 += u * y0
                a51 += u * y1
                a52 += u * y2
                a53 += u * y3
                u = widen(w6[i])
                a60 += u * y0
                a61 += u * y1
                a62 += u * y2
                a63 += u * y3
                u = widen(w7[i])
                a70 += u * y0
                a71 += u * y1
                a72 += u * y2
                a73 += u * y3
            out[t0, r0] = a00
            out[t0 + 1, r0] = a01
            out[t0 + 2, r0] = a02
            out[t0 + 3, r0] = a03
            out[t0, r1] = a10
            out[t0 + 1, r1] = a11
            out[t0 + 2, r1] = a12
            out[t0 + 3, r1] = a13
            out[t0, r2] = a20
            out[t0 + 1, r2] = a21
            out[t0 + 2, r2] = a22
            out[t0 + 3, r2] = a23
            out[t0, r3] = a30
            out[t0 + 1, r3] = a31
            out[t0 + 2, r3] = a32
            out[t0 + 3, r3] = a33
            out[t0, r4] = a40
            out[t0 + 1, r4] = a41
            out[t0 + 2, r4] = a42
            out[t0 + 3, r4] = a43
            out[t0, r5] = a50
            out[t0 + 1, r5] = a51
            out[t0 + 2, r5] = a52
            out[t0 + 3, r5] = a53
            out[t0, r6] = a60
            out[t0 + 1, r6] = a61
            out[t0 + 2, r6] = a62
            out[t0 + 3, r6] = a63
            out[t0, r7] = a70
            out[t0 + 1, r7] = a71
            out[t0 + 2, r7] = a72
            out[t0 + 3, r7] = a73


@njit(parallel=True, fastmath=_FASTMATH, cache=True, boundscheck=False)
def rows_times_tokens(x, k, w, out):  # pragma: no cover - compiled by numba
    """out[t, r] = sum_i w[r, i] x[t, i], row blocks spread over numba's threads."""
    _rows_times_tokens(x, k, w, out)


@njit(fastmath=_FASTMATH, cache=True, boundscheck=False)
def rows_times_tokens_serial(x, k, w, out):  # pragma: no cover - compiled by numba
    """The same on the calling thread: no thread-pool launch (~50 us a call on this machine)."""
    _rows_times_tokens(x, k, w, out)


#: Weights with fewer elements run serially even with several threads: launching the pool
#: costs more than it saves there. A per-weight rule, so each weight always runs one variant.
PARALLEL_MIN_WEIGHTS = 1 << 20


def rowwise_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` by the numba kernel: x [..., n] on CPU, weight [m, n] -> [..., m],
    x, weight and bias of one dtype in :data:`~layersearch.kernels.dtypes.DTYPES`.

    A token's output row is bitwise the same whatever other tokens share the call.
    """
    return prepared_linear(weight, bias, threads=numba.get_num_threads())(x)


def prepared_linear(weight: torch.Tensor, bias: torch.Tensor | None = None, *, threads: int = 1):
    """:func:`rowwise_linear` for one fixed weight, with the per-call work done once: a function
    of x [..., n] -> [..., m]. ``threads`` > 1 runs large weights on numba's thread pool.

    Half precision: the kernel reads the weight's own bits (no float32 copy), x is widened to
    float32 (exact), the bias is added in float32 and the sum rounded to the weight's dtype once.
    """
    w = kernel_array(weight)  # [m, n], shares the parameter's memory
    m = w.shape[0]
    dtype = weight.dtype
    parallel = threads > 1 and weight.numel() >= PARALLEL_MIN_WEIGHTS
    kernel = rows_times_tokens if parallel else rows_times_tokens_serial
    b = None if bias is None else bias.detach().to(torch.float32)

    def apply(x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1]
        rows = x.detach().reshape(-1, n).to(torch.float32).contiguous().numpy()  # [k, n]
        k = rows.shape[0]
        out = np.empty((-(-k // TOKEN_BLOCK) * TOKEN_BLOCK, m), np.float32)  # [kp, m]
        kernel(rows, k, w, out)
        y = torch.from_numpy(out[:k])
        if b is not None:
            y += b  # elementwise: per token, independent of k
        return y.to(dtype).view(*x.shape[:-1], m)  # the one rounding (none in float32)

    return apply


@torch.library.custom_op("layersearch::rowwise_linear", mutates_args=())
def rowwise_linear_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """:func:`rowwise_linear` as a torch custom op (what compiled forwards call): x [..., n] -> [..., m]."""
    return prepared_linear(weight, bias, threads=numba.get_num_threads())(x)


@rowwise_linear_op.register_fake
def _rowwise_linear_shape(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))  # [..., m]
