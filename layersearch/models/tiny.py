"""Tiny randomly initialised causal LMs for tests and fast demos.

They have the real decoder structure of each supported family (so layer skipping, caches
and generation exercise the same code paths as a full model) but only a few layers of
width 64, so a forward pass takes milliseconds and nothing is downloaded.
"""

from __future__ import annotations

from typing import Callable

import torch
from transformers import (
    AutoModelForCausalLM,
    Gemma2Config,
    Gemma3TextConfig,
    LlamaConfig,
    MistralConfig,
    Phi3Config,
    PretrainedConfig,
    PreTrainedModel,
    Qwen2Config,
    Qwen3Config,
)

from layersearch.common.errors import LayersearchError

TINY_FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "phi3", "gemma2", "gemma3")
# Families whose layers can use sliding-window attention (``sliding_window=`` below).
SLIDING_FAMILIES = ("qwen2", "mistral", "phi3", "gemma2", "gemma3")

# Each family's config class, called with the fields every family shares (the base class
# declares none of them).
_CONFIG_CLASSES: dict[str, Callable[..., PretrainedConfig]] = {
    "llama": LlamaConfig,
    "qwen2": Qwen2Config,
    "qwen3": Qwen3Config,
    "mistral": MistralConfig,
    "phi3": Phi3Config,
    "gemma2": Gemma2Config,
    "gemma3": Gemma3TextConfig,
}
# Gemma 2 caps attention logits (softcapping), which sdpa cannot do: transformers runs it eager.
_ATTENTION = {"gemma2": "eager"}

_NUM_HEADS = 4
_NUM_KV_HEADS = 2  # fewer KV heads than query heads, so grouped-query attention is exercised


def tiny_config(
    family: str = "llama",
    *,
    num_layers: int = 4,
    hidden_size: int = 64,
    vocab_size: int = 128,
    sliding_window: int | None = None,
) -> PretrainedConfig:
    """The config of a tiny model of ``family`` (one of :data:`TINY_FAMILIES`).

    ``sliding_window`` (families in :data:`SLIDING_FAMILIES`) gives attention windows of that
    many tokens in the family's own pattern: every layer (Mistral, Phi-3), all but layer 0
    (Qwen2's ``max_window_layers``), every other layer (Gemma 2), all but every third (Gemma 3).
    Without it no layer slides.
    """
    if family not in _CONFIG_CLASSES:
        raise LayersearchError(f"unknown tiny model family {family!r}; choose one of {', '.join(TINY_FAMILIES)}")
    if hidden_size % _NUM_HEADS:
        raise LayersearchError(f"hidden_size must be a multiple of {_NUM_HEADS}, got {hidden_size}")
    if sliding_window is not None and family not in SLIDING_FAMILIES:
        raise LayersearchError(f"tiny {family} models have no sliding-window attention")
    extra = _window_fields(family, num_layers, sliding_window)
    if family == "phi3":
        extra["pad_token_id"] = 0  # Phi-3's default pad id (32000) lies outside a tiny vocabulary
    return _CONFIG_CLASSES[family](
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=_NUM_HEADS,
        num_key_value_heads=_NUM_KV_HEADS,
        # Qwen3 and Mistral default to head_dim 128 whatever the width; pin it to width / heads.
        head_dim=hidden_size // _NUM_HEADS,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        # Qwen configs leave these unset; generation needs an end-of-sequence id.
        bos_token_id=1,
        eos_token_id=2,
        **extra,
    )


def _window_fields(family: str, num_layers: int, window: int | None) -> dict:
    """Config fields that switch sliding-window attention on (``window``) or off (``None``)."""
    if family in ("mistral", "phi3"):
        return {"sliding_window": window}
    if family == "qwen2":
        return {"use_sliding_window": True, "sliding_window": window, "max_window_layers": 1} if window else {}
    if family in ("gemma2", "gemma3"):
        if window is None:
            return {"layer_types": ["full_attention"] * num_layers}
        sliding = (lambda i: i % 2 == 0) if family == "gemma2" else (lambda i: i % 3 != 2)
        types = ["sliding_attention" if sliding(i) else "full_attention" for i in range(num_layers)]
        return {"sliding_window": window, "layer_types": types}
    return {}


def build_tiny_model(
    family: str = "llama",
    *,
    num_layers: int = 4,
    hidden_size: int = 64,
    vocab_size: int = 128,
    seed: int = 0,
    sliding_window: int | None = None,
    attn_implementation: str | None = None,
) -> PreTrainedModel:
    """A randomly initialised tiny causal LM of ``family``: eval mode, float32, on the CPU.

    The same arguments and seed give the same weights; the global RNG is left untouched.
    Attention runs on sdpa (eager for Gemma 2) unless ``attn_implementation`` says otherwise.
    """
    config = tiny_config(
        family, num_layers=num_layers, hidden_size=hidden_size, vocab_size=vocab_size, sliding_window=sliding_window
    )
    attention = attn_implementation or _ATTENTION.get(family, "sdpa")
    # fork_rng restores the global generator afterwards, so building a model does not
    # perturb the random stream of the caller (a search, a test).
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, attn_implementation=attention, dtype=torch.float32)
    # Imported here: loading.py is the heavier module and does not need this one.
    from layersearch.models.loading import set_greedy_generation

    set_greedy_generation(model)
    model.eval().requires_grad_(False)
    return model


#: The characters of :func:`char_tokenizer`, one token each (ids 3.. ; 0-2: unk, bos, eos).
CHARS = ["\n", "\t"] + [chr(code) for code in range(32, 127)]


def char_tokenizer():
    """A tokenizer with one id per printable ASCII character (0-2: unk, bos, eos); fits the
    tiny models' 128-token vocabulary, so they can read real prompts."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{c: i + 3 for i, c in enumerate(CHARS)}}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
