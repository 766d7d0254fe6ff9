"""layersearch inside vLLM: the draft architectures vLLM loads through its plugin door.

vLLM loads every ``vllm.general_plugins`` entry point in each of its processes; ours is
:func:`register`, which names the plan-aware draft architectures (:mod:`.models`) in vLLM's
``ModelRegistry`` by module path, so nothing of vLLM's model code loads before vLLM asks for
it. A draft directory that ``layersearch export-vllm`` writes names one of them in its
``config.json`` when its plan skips a layer's attention but keeps its MLP (or the reverse);
drafts that skip whole layers or none are plain architectures and need no plugin at all.

This package imports nothing from layersearch, and only vLLM and torch when vLLM asks: it runs
in vLLM's own environment, beside transformers versions the rest of layersearch does not take.
"""

from __future__ import annotations

#: Our draft architectures -> the vLLM architecture each one extends.
ARCHITECTURES = {
    "LayersearchLlamaDraftForCausalLM": "LlamaForCausalLM",
    "LayersearchQwen2DraftForCausalLM": "Qwen2ForCausalLM",
}
#: The key of a draft config.json that holds the plan: {"skip_attention": [...], "skip_mlp": [...]}.
PLAN_KEY = "layersearch_plan"


def register() -> None:
    """vLLM's plugin hook: register the draft architectures (lazily, by module path)."""
    from vllm import ModelRegistry

    for name in ARCHITECTURES:
        if name not in ModelRegistry.get_supported_archs():
            ModelRegistry.register_model(name, f"layersearch.integrations.vllm.models:{name}")
