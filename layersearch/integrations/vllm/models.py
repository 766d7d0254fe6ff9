"""Draft models for vLLM that run a layersearch plan with vLLM's own layers and kernels.

A plan skips some attention and MLP sub-layers of the model. vLLM has no architecture that
drops a layer's attention but keeps its MLP, so these extend vLLM's Llama and Qwen2 models
with a decoder layer that builds only the sub-layers the plan keeps (a skipped attention
registers no KV cache, a skipped sub-layer holds no weights) and passes the residual stream
through the rest. Quantized sub-layers need nothing here: the draft directory's
compressed-tensors config names them, and vLLM's own int8 kernels run them.

Runs inside vLLM's environment (see the package docstring); imports vLLM and torch only.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from vllm.config import VllmConfig, get_current_vllm_config
from vllm.model_executor.models.llama import LlamaDecoderLayer, LlamaForCausalLM
from vllm.model_executor.models.qwen2 import Qwen2DecoderLayer, Qwen2ForCausalLM, Qwen2Model
from vllm.model_executor.models.utils import extract_layer_index, maybe_prefix

from layersearch.integrations.vllm import PLAN_KEY


def _skips(config: Any, index: int) -> tuple[bool, bool]:
    """(attention skipped, MLP skipped) for layer ``index`` under the config's plan."""
    plan = getattr(config, PLAN_KEY, None) or {}
    return index in plan.get("skip_attention", ()), index in plan.get("skip_mlp", ())


def _drop_attention(layer: "_PlanLayer") -> None:
    """Remove a layer's attention and its KV-cache registration (vLLM sizes the cache from it)."""
    context = get_current_vllm_config().compilation_config.static_forward_context
    for module in layer.self_attn.modules():
        name = getattr(module, "layer_name", None)
        if isinstance(name, str):
            context.pop(name, None)
    del layer.self_attn


class _PlanLayer(nn.Module):
    """Mixin over a vLLM decoder layer: build, then drop what the plan skips; forward the rest."""

    skip_attention: bool
    skip_mlp: bool
    # what vLLM's Llama and Qwen2 decoder layers build (the plan deletes the skipped ones)
    input_layernorm: Any
    self_attn: Any
    post_attention_layernorm: Any
    mlp: Any

    def _apply_plan(self, config: Any, prefix: str) -> None:
        self.skip_attention, self.skip_mlp = _skips(config, extract_layer_index(prefix))
        if self.skip_attention:
            _drop_attention(self)
            del self.input_layernorm
        if self.skip_mlp:
            del self.mlp
            del self.post_attention_layernorm

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor,
                residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        # vLLM's layers return (sub-layer output, residual before it is added): the stream is
        # their sum, and each norm adds them as it normalizes. A skipped sub-layer adds nothing.
        if not self.skip_attention:
            if residual is None:
                residual = hidden_states
                hidden_states = self.input_layernorm(hidden_states)
            else:
                hidden_states, residual = self.input_layernorm(hidden_states, residual)
            hidden_states = self.self_attn(positions=positions, hidden_states=hidden_states)
        if not self.skip_mlp:
            if residual is None:
                residual = hidden_states
                hidden_states = self.post_attention_layernorm(hidden_states)
            else:
                hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
            hidden_states = self.mlp(hidden_states)
        if residual is None:  # the first layers skipped entirely: nothing pending yet
            return torch.zeros_like(hidden_states), hidden_states
        return hidden_states, residual


class PlanLlamaDecoderLayer(_PlanLayer, LlamaDecoderLayer):
    def __init__(self, vllm_config: VllmConfig, prefix: str = "", **kwargs: Any) -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix, **kwargs)
        self._apply_plan(kwargs.get("config") or vllm_config.model_config.hf_config, prefix)


class PlanQwen2DecoderLayer(_PlanLayer, Qwen2DecoderLayer):
    def __init__(self, config: Any, cache_config: Any = None, quant_config: Any = None, prefix: str = "") -> None:
        super().__init__(config=config, cache_config=cache_config, quant_config=quant_config, prefix=prefix)
        self._apply_plan(config, prefix)


class LayersearchLlamaDraftForCausalLM(LlamaForCausalLM):
    """vLLM's Llama with the plan's sub-layers skipped."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix, layer_type=PlanLlamaDecoderLayer)


class LayersearchQwen2DraftForCausalLM(Qwen2ForCausalLM):
    """vLLM's Qwen2 with the plan's sub-layers skipped."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        nn.Module.__init__(self)  # Qwen2ForCausalLM builds its body itself: build ours instead
        config = vllm_config.model_config.hf_config.get_text_config()
        self.config = config
        self.quant_config = vllm_config.quant_config
        self.model = Qwen2Model(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"),
                                decoder_layer_type=PlanQwen2DecoderLayer)
        self._init_head(vllm_config, prefix)

    def _init_head(self, vllm_config: VllmConfig, prefix: str) -> None:
        from vllm.distributed import get_pp_group
        from vllm.model_executor.layers.logits_processor import LogitsProcessor
        from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
        from vllm.model_executor.models.utils import PPMissingLayer

        config = self.config
        if get_pp_group().is_last_rank:
            self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size, quant_config=self.quant_config,
                                          prefix=maybe_prefix(prefix, "lm_head"))
            if config.tie_word_embeddings:
                self.lm_head = self.lm_head.tie_weights(self.model.embed_tokens)
        else:
            self.lm_head = PPMissingLayer()
        self.logits_processor = LogitsProcessor(config.vocab_size)
        self.make_empty_intermediate_tensors = self.model.make_empty_intermediate_tensors
