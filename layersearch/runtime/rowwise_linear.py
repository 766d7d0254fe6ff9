"""A linear-layer kernel for CPU verification: each weight row read once for all k tokens.

Verifying k drafted tokens pays when a forward over k tokens costs about as much as over one.
On CPU, stock BLAS (MKL's small-M sgemm) reads a weight matrix about once per 3 tokens, so a
forward over 8 tokens costs 2-3 one-token forwards. :func:`rowwise_linear` is a numba kernel
that streams each weight row from memory once for up to :data:`TOKEN_BLOCK` tokens (a block of
:data:`ROW_BLOCK` rows times a block of tokens, accumulated in registers; wider calls pass over
the same rows again while they sit in cache), parallel over row blocks.

Exactness. The sum for one (row, token) pair is always computed by the same compiled loop in
the same order, whatever the number of tokens in the call: a call over k tokens is rounded up
to whole token blocks by repeating its last token (the repeats' outputs are dropped), and the
last row block repeats its last row. So a token's result is bitwise independent of how many
tokens share the call (``tests/runtime/test_kernels.py`` checks it), and greedy speculative
output equals our plain loop run with the same kernels token by token
(:mod:`layersearch.runtime.kernels` routes a model's layers through it).
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

#: Tokens per pass over a row block (the kernel's register block; fixed, see the module doc).
TOKEN_BLOCK = 4
#: Weight rows per parallel task.
ROW_BLOCK = 4

# reassoc lets LLVM vectorize each dot product across the input dimension (16 lanes, two
# interleaved accumulators). The resulting summation order is fixed by the compiled loop and
# the input width only, so it is the same for every (row, token) pair of a given weight.
_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}


@njit(parallel=True, fastmath=_FASTMATH, cache=True, boundscheck=False)
def rows_times_tokens(x, k, w, out):  # pragma: no cover - compiled by numba
    # x [k', n] with k' >= k; w [m, n] row-major; out [kp, m], kp = k rounded up to 4.
    # Tokens past k repeat token k - 1 (x is not padded, so no copy); rows past m repeat
    # row m - 1. Every (row, token) pair therefore runs through the same loop below.
    kp = out.shape[0]
    n = w.shape[1]
    m = w.shape[0]
    for block in prange((m + 3) // 4):
        r0 = 4 * block
        r1 = min(r0 + 1, m - 1)
        r2 = min(r0 + 2, m - 1)
        r3 = min(r0 + 3, m - 1)
        w0 = w[r0]
        w1 = w[r1]
        w2 = w[r2]
        w3 = w[r3]
        for t0 in range(0, kp, 4):
            x0 = x[min(t0, k - 1)]
            x1 = x[min(t0 + 1, k - 1)]
            x2 = x[min(t0 + 2, k - 1)]
            x3 = x[min(t0 + 3, k - 1)]
            a00 = a01 = a02 = a03 = np.float32(0.0)
            a10 = a11 = a12 = a13 = np.float32(0.0)
            a20 = a21 = a22 = a23 = np.float32(0.0)
            a30 = a31 = a32 = a33 = np.float32(0.0)
            for i in range(n):
                u = w0[i]
                v = w1[i]
                s = w2[i]
                q = w3[i]
                y0 = x0[i]
                y1 = x1[i]
                y2 = x2[i]
                y3 = x3[i]
                a00 += u * y0
                a01 += u * y1
                a02 += u * y2
                a03 += u * y3
                a10 += v * y0
                a11 += v * y1
                a12 += v * y2
                a13 += v * y3
                a20 += s * y0
                a21 += s * y1
                a22 += s * y2
                a23 += s * y3
                a30 += q * y0
                a31 += q * y1
                a32 += q * y2
                a33 += q * y3
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



def rowwise_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` by the numba kernel: x [..., n] fp32 on CPU, weight [m, n] -> [..., m].

    A token's output row is bitwise the same whatever other tokens share the call.
    """
    n = x.shape[-1]
    rows = x.reshape(-1, n)  # [k, n]
    if not rows.is_contiguous():
        rows = rows.contiguous()
    k = rows.shape[0]
    m = weight.shape[0]
    padded = -(-k // TOKEN_BLOCK) * TOKEN_BLOCK
    out = torch.empty(padded, m, dtype=torch.float32)  # [kp, m]
    rows_times_tokens(rows.detach().numpy(), k, weight.detach().numpy(), out.numpy())
    y = out[:k]
    if bias is not None:
        y = y + bias  # elementwise: per token, independent of k
    return y.view(*x.shape[:-1], m)
