"""Run the sub-layers of a decoder one at a time, on many candidate hidden states at once.

The hidden-state DP needs what a transformers forward hides: the residual stream after every
*sub-layer*, for a batch of states that differ in which sub-layers they skipped. For the
families we support (:mod:`layersearch.models.families`) one sub-layer is

    attention  h + post(self_attn(pre(h)))        pre-norm families: no post norm
    MLP        h + post(mlp(pre(h)))              Gemma 2/3: sandwich norms

which is exactly what the decoder layer's forward does, and a skipped sub-layer is ``h``
(what :func:`~layersearch.models.skipping.skipping` does). Sliding-window layers see only the
context inside their window: their context keys start at ``start - (window - 1)`` and the mask
hides window tokens more than ``window - 1`` positions back.

Reference tokens and their context (design)
-------------------------------------------
The DP is evaluated on a :class:`ReferenceWindow`: ``r`` consecutive tokens at positions
``start..start+r-1`` (KnapSpec's last ``m`` tokens). Their attention also sees the ``start``
positions before them. Those come, read-only, from the target's KV cache: the keys and values
of positions ``< start`` are exactly what a draft sees while drafting (the draft always attends
to the target's committed cache), so each state's attention over the window is what the
masked draft would compute teacher-forced on these tokens. The window's own keys and values are
computed per state (they depend on the skipped sub-layers before). Nothing is written to the
cache: a small stand-in object with an ``update`` method hands the attention module the cached
context followed by the state's own window keys.

The ``B`` states of one segment are folded into a single sequence of ``B * r`` queries (state
``b``'s token ``t`` at row ``b*r + t``) so that the context keys are used once, not copied per
state, and the attention module's own forward (projections, q/k norms, rotary, GQA, sdpa) runs
unchanged; an additive mask lets row ``b*r + t`` see the whole context and only its own state's
window tokens ``<= t``. Several windows (e.g. one per prompt) are segments of one batch: the MLP
runs on all of them at once, attention segment by segment.

Draft plans: an int8 sub-layer runs its int8 twin (:func:`~layersearch.models.precision.int8_twins`,
the weights the plan drafter runs) in the same place, and an int8 head gives the top-1 of a plan
with ``int8_head``; :meth:`SubLayerRunner.run_masks` takes plans as well as skip masks. One
difference is deliberate: torch's dynamic int8 Linear quantizes its input with one scale per
*call*, which in a one-token decode step is one scale per token, but here a call holds every
state's every reference token. The runner's twins therefore quantize activations per token
(:class:`PerTokenInt8Linear`: the same int8 weights, the same 7-bit activation range), so a
sub-layer's int8 error is the one the drafter sees, not that of a whole batch squeezed into one
scale (0.78 agreement instead of 0.97 from exactly that).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import torch
from torch import nn
from transformers import Cache, PreTrainedModel
from transformers.cache_utils import CacheLayerMixin

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.families import layout_for
from layersearch.models.parts import submodule
from layersearch.models.skipping import decoder_layers
from layersearch.runtime.cache import new_cache, sliding_windows
from layersearch.runtime.forward import forward_tokens

if TYPE_CHECKING:
    from layersearch.models.quantize import AnyQuantizedLinear


@dataclass(frozen=True)
class ReferenceWindow:
    """``r`` reference tokens at positions ``start..start+r-1`` and the KV context before them.

    ``context[i]`` holds layer ``i``'s cached keys and values of positions
    ``context_starts[i]..start-1`` (``[1, kv_heads, start - context_starts[i], head_dim]``,
    already rotated, as a transformers cache stores them): from 0 for full attention, from
    ``start - (window - 1)`` for a sliding-window layer. Empty when ``start == 0``.
    """

    token_ids: torch.Tensor  # [r] long
    start: int
    context: tuple[tuple[torch.Tensor, torch.Tensor], ...] = ()
    context_starts: tuple[int, ...] = ()  # [L] first cached position in each layer's context; () = all 0

    @property
    def size(self) -> int:
        return int(self.token_ids.shape[0])


def window_from_cache(cache: Cache, sequence: torch.Tensor | Sequence[int], size: int) -> ReferenceWindow:
    """The last ``size`` tokens of ``sequence`` as a window over ``cache`` (read, never modified).

    ``sequence`` is every token so far (prompt and generated); the cache must hold at least the
    positions before the window (in the decoder it holds all but the newest token).
    """
    ids = torch.as_tensor(sequence).reshape(-1)
    if size < 1:
        raise LayersearchError(f"reference window must hold at least one token, got {size}")
    size = min(size, int(ids.shape[0]))
    start = int(ids.shape[0]) - size
    layers = _attention_layers(cache)
    held = min((layer.get_seq_length() for layer in layers), default=0)
    if held < start:
        raise LayersearchError(f"the cache holds {held} positions but the reference window starts at {start}")
    if not start:
        return ReferenceWindow(ids[start:].clone(), start)
    pieces = [_layer_context(layer, start) for layer in layers]
    context = tuple((keys, values) for keys, values, _ in pieces)
    return ReferenceWindow(ids[start:].clone(), start, context, tuple(first for _, _, first in pieces))


def _attention_layers(cache: Cache) -> list[CacheLayerMixin]:
    """``cache``'s layers, each holding keys and values (a linear-attention layer holds neither)."""
    layers = []
    for layer in cache.layers:
        if not isinstance(layer, CacheLayerMixin):
            raise LayersearchError(f"a reference window reads keys and values, which a {type(layer).__name__} cache layer does not hold")
        layers.append(layer)
    return layers


def _layer_context(layer: Any, start: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """One cache layer's keys and values that positions ``start..`` attend to, and the first position."""
    window = getattr(layer, "sliding_window", None) if getattr(layer, "is_sliding", False) else None
    first_held = layer.get_seq_length() - layer.keys.shape[-2]  # sliding layers drop old entries
    first_needed = 0 if window is None else max(0, start - (window - 1))
    if first_held > first_needed:
        raise LayersearchError(
            f"a sliding-window cache layer no longer holds position {first_needed} that a reference window "
            f"starting at {start} attends to; use a reference window of at most 1 token on this model"
        )
    lo, hi = first_needed - first_held, start - first_held
    return layer.keys[:, :, lo:hi], layer.values[:, :, lo:hi], first_needed


def window_from_prompt(model: PreTrainedModel, ids: torch.Tensor | Sequence[int], size: int) -> ReferenceWindow:
    """A window over the last ``size`` tokens of a prompt; the rest is prefilled into a fresh cache."""
    ids = torch.as_tensor(ids if isinstance(ids, torch.Tensor) else list(ids)).reshape(-1)
    if ids.numel() == 0:
        raise LayersearchError("a reference prompt is empty")
    size = min(size, int(ids.shape[0]))
    cache = new_cache(model)
    if ids.shape[0] > size:
        with torch.inference_mode():
            forward_tokens(model, ids[:-size], 0, cache, keep=1)
    return window_from_cache(cache, ids, size)


class _ContextCache:
    """Stand-in for a KV cache: prepends one layer's cached context keys, stores nothing."""

    def __init__(self, keys: torch.Tensor | None, values: torch.Tensor | None) -> None:
        self.keys, self.values = keys, values

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if self.keys is None or self.values is None or self.keys.shape[-2] == 0:  # both None, or both held
            return key_states, value_states
        return torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2)


class SubLayerRunner:
    """Embedding, single sub-layers, final norm and LM head of a causal LM of a supported family."""

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.layers = decoder_layers(model)
        self.num_layers = len(self.layers)
        self.layout = layout_for(model.config)
        self.windows = sliding_windows(model)  # [L] window or None
        # Gemma 3 rotates local and global layers with different bases: one rotary call per layer type.
        self.layer_types = getattr(model.config, "layer_types", None)
        base = getattr(model, "model", model)
        missing = [name for name in (*self.layout.attention_norms, *self.layout.mlp_norms) if not hasattr(self.layers[0], name)]
        rotary = getattr(base, "rotary_emb", None)
        norm = getattr(base, "norm", None)
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if missing or rotary is None or norm is None or head is None:
            raise LayersearchError(
                f"{type(model).__name__}: per-sub-layer execution needs its layers' norms "
                f"({', '.join(missing) or 'present'}), model.rotary_emb, model.norm and an LM head"
            )
        self.rotary: nn.Module = rotary
        self.norm: nn.Module = norm
        self.head: nn.Module = head
        embedding = model.get_input_embeddings()
        if not isinstance(embedding, nn.Embedding):  # every supported family embeds with one
            raise LayersearchError(f"{type(model).__name__}: per-sub-layer execution needs an nn.Embedding input embedding, "
                                   f"not {type(embedding).__name__}")
        self.embedding = embedding
        self.softcap = getattr(model.config, "final_logit_softcapping", None)  # Gemma 2
        self._rotary_takes_type = "layer_type" in inspect.signature(rotary.forward).parameters
        if self._rotary_takes_type and self.layer_types is None:
            raise LayersearchError(f"{type(model).__name__}: its rotary embedding takes a layer type, but its config has no layer_types")
        # transformers 5.x renamed the attention's past_key_values to cache (and warns on the old
        # name, a FutureWarning the user would see): pass whichever this version takes.
        attention = submodule(self.layers[0], "self_attn").forward if len(self.layers) else None
        self._cache_keyword = "cache" if attention is not None and "cache" in inspect.signature(attention).parameters \
            else "past_key_values"
        self._masks: dict[tuple, torch.Tensor] = {}
        self._per_token: dict[int, nn.Module] = {}

    # ----- inputs ---------------------------------------------------------------------------
    def embed(self, windows: Sequence[ReferenceWindow]) -> torch.Tensor:
        """Embeddings of all windows' tokens, concatenated: ``[1, R, d]``."""
        device = self.embedding.weight.device
        ids = torch.cat([w.token_ids.to(device) for w in windows])
        return self.embedding(ids).unsqueeze(0)

    # ----- sub-layers -----------------------------------------------------------------------
    def sublayer(
        self, item: int, h: torch.Tensor, windows: Sequence[ReferenceWindow], int8: bool | str = False
    ) -> torch.Tensor:
        """Flat item ``item`` (attention at ``2i``, MLP at ``2i+1``) applied to states ``[B, R, d]``;
        with ``int8`` (True or ``"int8"``) its int8 twin runs in its place, with ``"int4"`` its int4
        twin (norms and residual as for the full one)."""
        precision = "int8" if int8 is True else "full" if int8 is False else int8
        layer = self.layers[item // 2]
        layout = self.layout
        if item % 2:
            mlp = self.low_bit_sublayer(item, precision) if precision != "full" else submodule(layer, "mlp")
            out = mlp(getattr(layer, layout.mlp_pre)(h))
            return h + (getattr(layer, layout.mlp_post)(out) if layout.mlp_post else out)
        attention = self.low_bit_sublayer(item, precision) if precision != "full" else submodule(layer, "self_attn")
        out = self._attention(item // 2, layer, h, windows, attention)
        return h + (getattr(layer, layout.attention_post)(out) if layout.attention_post else out)

    def twins(self) -> Any:
        """The model's int8 twins (built on first use, shared with the plan drafter)."""
        from layersearch.models.precision import int8_twins

        return int8_twins(self.model)

    def int4_group_size(self) -> int:
        """The group size this model's int4 twins run with here (:func:`~layersearch.models.int4.model_group_size`)."""
        from layersearch.models.int4 import model_group_size

        return model_group_size(self.model)

    def low_bit_sublayer(self, item: int, precision: str) -> nn.Module:
        """Flat item ``item``'s ``precision`` twin: int8 with per-token scales, or int4 (weight-only)."""
        if precision == "int8":
            return self.int8_sublayer(item)
        from layersearch.models.precision import int4_twins

        twins = int4_twins(self.model, self.int4_group_size())
        return (twins.mlp if item % 2 else twins.attention)[item // 2]

    def int8_sublayer(self, item: int) -> nn.Module:
        """Flat item ``item``'s int8 twin with per-token activation scales (:class:`PerTokenInt8Linear`)."""
        module = self._per_token.get(item)
        if module is None:
            twins = self.twins()
            module = _per_token_twin((twins.mlp if item % 2 else twins.attention)[item // 2])
            self._per_token[item] = module
        return module

    def _attention(
        self, index: int, layer: nn.Module, h: torch.Tensor, windows: Sequence[ReferenceWindow], attention: nn.Module
    ) -> torch.Tensor:
        x = getattr(layer, self.layout.attention_pre)(h)  # [B, R, d]
        batch = x.shape[0]
        outputs = []
        offset = 0
        for window in windows:
            r = window.size
            part = x[:, offset : offset + r].reshape(1, batch * r, -1)  # state b, token t at row b*r + t
            offset += r
            positions = torch.arange(window.start, window.start + r, device=x.device).repeat(batch).unsqueeze(0)
            if self._rotary_takes_type:
                assert self.layer_types is not None  # checked in __init__
                cos_sin = self.rotary(part, positions, self.layer_types[index])
            else:
                cos_sin = self.rotary(part, positions)
            keys, values = window.context[index] if window.context else (None, None)
            first = window.context_starts[index] if window.context_starts else 0
            out, _ = attention(
                hidden_states=part,
                position_embeddings=cos_sin,
                attention_mask=self._mask(batch, r, window.start, first, self.windows[index], x.dtype, x.device),
                **{self._cache_keyword: _ContextCache(keys, values)},
            )
            outputs.append(out.reshape(batch, r, -1))
        return torch.cat(outputs, dim=1) if len(outputs) > 1 else outputs[0]

    def _mask(
        self, batch: int, r: int, start: int, first: int, window: int | None, dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        """Additive ``[1, 1, B*r, (start - first) + B*r]`` mask over the context ``first..start-1``
        and the window: own state's tokens ``<= t``; with a sliding ``window``, only positions
        less than ``window`` back from the query."""
        key = (batch, r, start, first, window)
        mask = self._masks.get(key)
        if mask is None or mask.dtype != dtype or mask.device != device:
            rows = torch.arange(batch * r, device=device)
            state, token = rows // r, rows % r
            visible = (state[:, None] == state[None, :]) & (token[:, None] >= token[None, :])
            context = torch.ones(batch * r, start - first, dtype=torch.bool, device=device)
            if window is not None:
                query = start + token  # [B*r] positions
                visible &= token[None, :] > token[:, None] - window
                context &= torch.arange(first, start, device=device)[None, :] > query[:, None] - window
            visible = torch.cat([context, visible], dim=1)
            mask = torch.zeros(visible.shape, dtype=dtype, device=device)
            mask.masked_fill_(~visible, torch.finfo(dtype).min)
            mask = mask[None, None]
            if len(self._masks) > 64:
                self._masks.clear()
            self._masks[key] = mask
        return mask

    # ----- outputs --------------------------------------------------------------------------
    def top1(self, h: torch.Tensor, chunk: int = 256, int8_head: bool | str = False) -> torch.Tensor:
        """Greedy next token of each state and position: ``argmax(head(norm(h)))``, shape ``h.shape[:-1]``
        (with ``int8_head`` True or ``"int8"`` the int8 twin of the head, ``"int4"`` the int4 one;
        soft-capping is monotone, so it is left out)."""
        precision = "int8" if int8_head is True else "full" if int8_head is False else int8_head
        head: nn.Module
        if precision == "int8":
            head = PerTokenInt8Linear(self.twins().head.linear)
        elif precision == "int4":
            from layersearch.models.precision import int4_twins

            head = int4_twins(self.model, self.int4_group_size()).head.linear
        else:
            head = self.head
        flat = h.reshape(-1, h.shape[-1])
        out = torch.empty(flat.shape[0], dtype=torch.long, device=h.device)
        for lo in range(0, flat.shape[0], chunk):
            out[lo : lo + chunk] = head(self.norm(flat[lo : lo + chunk])).argmax(-1)
        return out.reshape(h.shape[:-1])

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """``head(norm(h))``, soft-capped as the model does (for tests and small batches)."""
        logits = self.head(self.norm(h))
        if self.softcap:  # Gemma 2: monotone, so top1 needs no cap
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits

    # ----- whole masks ----------------------------------------------------------------------
    def run_masks(self, masks: Sequence[SkipMask], windows: Sequence[ReferenceWindow]) -> torch.Tensor:
        """Final hidden states ``[len(masks), R, d]`` of the windows with each mask's sub-layers skipped
        (and, for plans, its int8 sub-layers run by their twins; the head is :meth:`top1`'s business).

        Each sub-layer runs once per precision, on the rows of the masks that execute it so.
        """
        if not masks:
            raise LayersearchError("run_masks needs at least one mask")
        for mask in masks:
            if mask.num_layers != self.num_layers:
                raise LayersearchError(f"mask is for {mask.num_layers} layers but the model has {self.num_layers}")
        precisions = [_precision_flat(mask) for mask in masks]  # [B][2L]: full, int8, int4 or skip
        h = self.embed(windows).expand(len(masks), -1, -1).clone()
        for item in range(2 * self.num_layers):
            for precision in ("full", "int8", "int4"):
                rows = torch.tensor([b for b, flat in enumerate(precisions) if flat[item] == precision], dtype=torch.long)
                if rows.numel() == len(masks):
                    h = self.sublayer(item, h, windows, precision)
                elif rows.numel():
                    rows = rows.to(h.device)
                    h[rows] = self.sublayer(item, h[rows], windows, precision)
        return h


class PerTokenInt8Linear(nn.Module):
    """A dynamic int8 Linear (torch's, fbgemm) applied with one activation scale per token.

    Same int8 per-channel weights, same asymmetric 7-bit activation range (fbgemm's
    ``reduce_range``), but the range is taken per row instead of per call: what the int8 twin
    computes for a one-token decode step, for many tokens in one batched matmul. The weights are
    dequantized per call (no float copy is kept)."""

    def __init__(self, quantized: nn.Module) -> None:
        super().__init__()
        linear = _fbgemm(quantized)
        if linear is None:
            raise LayersearchError(f"per-token int8 needs an int8 Linear, not {type(quantized).__name__}")
        self.quantized = linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [..., in] -> [..., out], each row quantized with its own activation range."""
        levels = 127.0  # fbgemm's dynamic activations use 7 bits (reduce_range)
        lo = x.amin(dim=-1, keepdim=True).clamp(max=0)
        hi = x.amax(dim=-1, keepdim=True).clamp(min=0)
        scale = ((hi - lo) / levels).clamp(min=torch.finfo(x.dtype).tiny)
        zero = torch.round(-lo / scale).clamp(0, levels)
        x_q = (torch.round(x / scale) + zero).clamp(0, levels)
        weight = self.quantized.weight().dequantize()
        bias = self.quantized.bias()
        return torch.nn.functional.linear((x_q - zero) * scale, weight, bias)


def _per_token_twin(twin: nn.Module) -> nn.Module:
    """A shallow copy of an int8 twin whose int8 Linears quantize activations per token."""
    import copy

    module = copy.copy(twin)
    module._modules = dict(twin._modules)
    for name, child in twin.named_children():
        if _fbgemm(child) is not None:
            module._modules[name] = PerTokenInt8Linear(child)
    return module


def _fbgemm(module: nn.Module) -> "AnyQuantizedLinear | None":
    """torch's dynamic int8 Linear inside an int8 twin's Linear (the module itself, or the
    ``kernel`` a wrapper runs for one token), None for anything else."""
    from layersearch.models.quantize import is_quantized_linear

    for candidate in (module, getattr(module, "kernel", None)):
        if candidate is not None and is_quantized_linear(candidate):
            return candidate
    return None


def _precision_flat(mask: SkipMask) -> list[str]:
    """Interleaved 2L precisions of the plan's sub-layers (attention at 2i, MLP at 2i+1)."""
    return [mask.precision("mlp" if item % 2 else "attention", item // 2) for item in range(2 * mask.num_layers)]


def mean_cosine(states: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Cosine of each state to the reference, per token over the hidden dimension, averaged over tokens.

    ``states`` ``[B, R, d]``, ``reference`` ``[R, d]`` -> ``[B]`` (float32).
    """
    cos = torch.nn.functional.cosine_similarity(states.float(), reference.float().unsqueeze(0), dim=-1, eps=1e-12)
    return cos.mean(dim=-1)
