"""An attention kernel whose result for a query does not depend on the other queries of the call.

torch's CPU attention (SDPA's flash kernel, or eager's batched matmul) blocks the queries of a
call into GEMMs, so a token's attention output differs in its last bits between a one-token
forward and a verification over k tokens. With the row-wise linear kernel (and the activation
kernel, :mod:`layersearch.kernels.activation`) that was the only k-dependent part of a decoder
forward. :func:`rowwise_attention` computes each (head, query) pair on its own: scores over
exactly the causal prefix that query sees (the same key count it has in a one-token forward at
the same position), a softmax, and the weighted sum of values, in an order fixed by that key
count and the head width only.

Exactness in half precision. bfloat16 and float16 keys and values are read from the cache as
they are and widened exactly as read (:mod:`layersearch.kernels.dtypes`); the query is widened
before the call; scores, softmax and the weighted sum run in float32 in the same order as in a
float32 model, and each output value is rounded to the query's dtype once. So a query's
half-precision output is bitwise the same alone or among the k queries of a verification
(``tests/kernels/test_kernels_half.py``), which torch's SDPA in bfloat16 is not.

It is registered with transformers' ``AttentionInterface`` as :data:`NAME` (masks built as for
SDPA), so :mod:`layersearch.kernels.select` switches a model to it with
``set_attn_implementation`` and back. Compiled forwards call it as the custom op
``torch.ops.layersearch.rowwise_attention``: one opaque node, the same kernel.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from numba import njit, prange

from layersearch.kernels import rowwise_linear  # noqa: F401  (sets numba's threading layer first)
from layersearch.kernels.dtypes import DTYPES, kernel_array, widen
from layersearch.kernels.rowwise_linear import MAX_TOKENS

#: The name under which the kernel is registered with transformers.
NAME = "layersearch_rowwise"

_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}  # order fixed by the loop lengths only


@njit(inline="always")
def _attend(q, k, v, allowed, use_mask, scale, softcap, out):  # pragma: no cover - compiled by numba (inlined)
    # q [h, t, d] float32; k, v [hkv, n, d] float32 or half-precision bits (widened exactly as
    # read); allowed [t, n] (True = may attend; read if use_mask); out [t, h, d] float32.
    # Query i is the (n - t + i)-th position: it sees keys 0 .. n - t + i.
    heads, t, d = q.shape
    kv_heads, n, _ = k.shape
    group = heads // kv_heads
    for job in prange(heads * t):
        head = job // t
        i = job % t
        kv = head // group
        # The query's causal prefix; its own position is the last key it sees. Without a mask,
        # transformers means SDPA's is_causal: one query sees every key, several see keys 0..i
        # (the prefill, also over a static cache's longer key tensor).
        seen = n if t == 1 else i + 1
        if use_mask:  # a static cache holds keys past the queries: the prefix ends at the last visible key
            seen = allowed.shape[1]
            while seen > 1 and not allowed[i, seen - 1]:
                seen -= 1
        scores = np.empty(seen, np.float32)
        top = np.float32(-np.inf)
        for j in range(seen):
            s = np.float32(0.0)
            for c in range(d):
                s += q[head, i, c] * widen(k[kv, j, c])
            s *= scale
            if softcap > 0:
                s = np.float32(np.tanh(s / softcap) * softcap)
            if use_mask and not allowed[i, j]:
                s = np.float32(-np.inf)
            scores[j] = s
            top = max(top, s)
        total = np.float32(0.0)
        for j in range(seen):
            e = np.float32(np.exp(scores[j] - top)) if scores[j] > -np.inf else np.float32(0.0)
            scores[j] = e
            total += e
        acc = np.zeros(d, np.float32)
        for j in range(seen):
            p = scores[j]
            for c in range(d):
                acc[c] += p * widen(v[kv, j, c])
        for c in range(d):
            out[i, head, c] = acc[c] / total



@njit(parallel=True, fastmath=_FASTMATH, cache=True, boundscheck=False)
def attend(q, k, v, allowed, use_mask, scale, softcap, out):  # pragma: no cover - compiled by numba
    """Every (head, query) pair, spread over numba's threads."""
    _attend(q, k, v, allowed, use_mask, scale, softcap, out)


@njit(fastmath=_FASTMATH, cache=True, boundscheck=False)
def attend_serial(q, k, v, allowed, use_mask, scale, softcap, out):  # pragma: no cover - compiled by numba
    """The same on the calling thread (one thread: no pool launch)."""
    _attend(q, k, v, allowed, use_mask, scale, softcap, out)


def rowwise_attention(
    module: torch.nn.Module | None,  # the calling attention module (unused; None in the warm-up)
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    softcap: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers attention function: query [1, h, t, d], key/value [1, hkv, n, d] -> [1, t, h, d].

    The mask (boolean, or additive with large negative values) may hide keys inside each query's
    causal prefix (sliding windows, token trees) and the keys after it (a static cache's free
    positions); keys after the prefix are never read.
    """
    if query.shape[0] != 1:
        raise ValueError("rowwise attention runs one sequence (batch 1)")
    _, heads, t, d = query.shape
    scale = float(scaling) if scaling is not None else d ** -0.5
    allowed = _allowed(attention_mask, t, key.shape[2])  # [t, n] or None
    if torch.compiler.is_compiling():  # a captured forward: the same kernel as one traceable op
        return torch.ops.layersearch.rowwise_attention(query, key, value, allowed, scale, float(softcap or 0.0)), None
    return _attention(query, key, value, allowed, scale, float(softcap or 0.0)), None


def _attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, allowed: torch.Tensor | None,
               scale: float, softcap: float) -> torch.Tensor:
    # query [1, h, t, d], key/value [1, hkv, n, d], allowed [t, n] bool or None -> [1, t, h, d]
    _, heads, t, d = query.shape
    out = torch.empty(t, heads, d, dtype=torch.float32)  # [t, h, d]
    (attend if numba.get_num_threads() > 1 else attend_serial)(
        kernel_array(query[0].to(torch.float32)), kernel_array(key[0]), kernel_array(value[0]),  # the cache read as it is
        allowed.numpy() if allowed is not None else np.ones((1, 1), np.bool_), allowed is not None,
        np.float32(scale), np.float32(softcap), out.numpy(),
    )
    return out.unsqueeze(0).to(query.dtype)  # half precision: rounded once, per element


@torch.library.custom_op("layersearch::rowwise_attention", mutates_args=())
def rowwise_attention_op(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, allowed: torch.Tensor | None,
                         scale: float, softcap: float) -> torch.Tensor:
    """The kernel as a torch custom op (what compiled forwards call): query [1, h, t, d],
    key/value [1, hkv, n, d], allowed [t, n] (None: plain causal) -> [1, t, h, d]."""
    return _attention(query, key, value, allowed, scale, softcap)


@rowwise_attention_op.register_fake
def _rowwise_attention_shape(query, key, value, allowed, scale, softcap) -> torch.Tensor:
    _, heads, t, d = query.shape
    return query.new_empty((1, t, heads, d))


def supported(query: torch.Tensor, key: torch.Tensor) -> bool:
    """Whether the kernel runs this call (float32, bfloat16 or float16 on CPU, one sequence,
    keys in the queries' dtype)."""
    return query.dtype in DTYPES and key.dtype == query.dtype and query.device.type == "cpu" and query.shape[0] == 1


def _allowed(mask: torch.Tensor | None, t: int, n: int) -> torch.Tensor | None:
    """[t, n] boolean from transformers' mask (None: plain causal, nothing extra hidden)."""
    if mask is None:
        return None
    rows = mask[0, 0] if mask.dim() == 4 else mask  # [t, n] (or broadcastable)
    if rows.dtype != torch.bool:
        rows = rows > torch.finfo(rows.dtype).min / 2  # additive mask: 0 visible, ~min hidden
    return rows.expand(t, n).contiguous()


def register() -> None:
    """Register :data:`NAME` with transformers (attention function and SDPA-style masks); idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, _dispatch)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)


def _dispatch(module, query, key, value, attention_mask, **kwargs):
    """The kernel where it applies; transformers' own attention for a long prefill (the same in
    plain and speculative decoding, and faster there), GPU or batches."""
    if supported(query, key) and query.shape[2] <= MAX_TOKENS:
        return rowwise_attention(module, query, key, value, attention_mask, **kwargs)
    if kwargs.get("softcap"):  # Gemma 2: logit soft-capping, which only eager attention does
        import sys

        eager = sys.modules[type(module).__module__].eager_attention_forward
        if attention_mask is not None and attention_mask.dtype == torch.bool:
            hidden = torch.finfo(query.dtype).min
            attention_mask = torch.zeros_like(attention_mask, dtype=query.dtype).masked_fill(~attention_mask, hidden)
        return eager(module, query, key, value, attention_mask, **kwargs)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
