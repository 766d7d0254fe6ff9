"""The decoder families layer skipping supports, and how their layers are built.

Skipping a sub-layer must leave the residual stream unchanged, and it may do so only if the
sub-layer is a pure residual branch: ``h + branch(h)`` where the branch's modules serve that
sub-layer alone. A :class:`LayerLayout` names, per family, the norms that belong to each
branch, read off the transformers modeling code:

* pre-norm (Llama, Mistral, Qwen2, Qwen3, Phi-3)::

      h = h + self_attn(input_layernorm(h))
      h = h + mlp(post_attention_layernorm(h))         # Phi-3: + dropout, identity in eval

* sandwich norms (Gemma 2, Gemma 3)::

      h = h + post_attention_layernorm(self_attn(input_layernorm(h)))
      h = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)))

A skipped branch's sub-layer returns zeros and its norms are bypassed too (the pre-norm's
output only fed the skipped sub-layer; the post-norm would only see those zeros), so
``h + 0 == h`` exactly. Note the names: ``post_attention_layernorm`` is the MLP's *input* norm
in pre-norm families but the attention's *output* norm in Gemma; treating Gemma as pre-norm
would normalise the wrong branch.

Every other family is refused, because at least one of these can break there: layers that
are not two residual branches (parallel blocks, extra per-layer streams as in Gemma 3n),
layers that reuse another layer's KV cache (a skipped producer leaves its consumers without
keys), recurrent or linear-attention states that a rollback cannot crop, or a multimodal
wrapper whose decoder sits elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from layersearch.common.errors import LayersearchError


@dataclass(frozen=True)
class LayerLayout:
    """The norms (attribute names) before and after a decoder layer's attention and MLP branches."""

    name: str
    attention_pre: str
    mlp_pre: str
    attention_post: str | None = None
    mlp_post: str | None = None

    @property
    def attention_norms(self) -> tuple[str, ...]:
        """Every norm of the attention branch."""
        return tuple(n for n in (self.attention_pre, self.attention_post) if n)

    @property
    def mlp_norms(self) -> tuple[str, ...]:
        """Every norm of the MLP branch (the pre-norm first)."""
        return tuple(n for n in (self.mlp_pre, self.mlp_post) if n)


PRE_NORM = LayerLayout("pre-norm", attention_pre="input_layernorm", mlp_pre="post_attention_layernorm")
SANDWICH = LayerLayout(
    "sandwich norms",
    attention_pre="input_layernorm",
    mlp_pre="pre_feedforward_layernorm",
    attention_post="post_attention_layernorm",
    mlp_post="post_feedforward_layernorm",
)

# model_type -> layout; each is tested on a tiny model (tests/models/test_families.py).
SUPPORTED_FAMILIES: dict[str, LayerLayout] = {
    "llama": PRE_NORM,
    "mistral": PRE_NORM,
    "qwen2": PRE_NORM,
    "qwen3": PRE_NORM,
    "phi3": PRE_NORM,
    "gemma2": SANDWICH,
    "gemma3_text": SANDWICH,
}


def layout_for(config: Any) -> LayerLayout:
    """The :class:`LayerLayout` of a model config; an unsupported family is a LayersearchError."""
    model_type = getattr(config, "model_type", None)
    layout = SUPPORTED_FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if layout is None:
        hint = " (load its text-only causal LM, model_type gemma3_text)" if model_type == "gemma3" else ""
        raise LayersearchError(
            f"model family {model_type!r} is not supported for layer skipping{hint}: it needs a decoder-only "
            f"causal language model of a supported family ({', '.join(sorted(SUPPORTED_FAMILIES))})"
        )
    return layout
