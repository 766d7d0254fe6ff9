"""What the GPU scripts share: random-weight models of real shapes, prompts, timing, the JSON report.

``gpu_report.py`` and ``gpu_plans.py`` import this module (``benchmarks/`` is on ``sys.path`` when
either runs as a script).
"""

from __future__ import annotations

import json
import time

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

# Llama-3.2-1B and Llama-3.1-8B shapes (vocabulary as published); "tiny" is for smoke tests.
SHAPES = {
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=512, tie_word_embeddings=False),
}


def build(shape: str, device: str, dtype: torch.dtype, *, vocab: int | None = None, head_scale: float = 1.0, seed: int = 0,
          layers: int | None = None):
    """A randomly initialised Llama of ``shape`` on ``device`` (``layers``: fewer of them); ``head_scale`` sharpens its logits."""
    options = dict(SHAPES[shape], rope_theta=500000.0, max_position_embeddings=8192)
    if layers is not None:
        options.update(num_hidden_layers=layers)
    if vocab is not None:
        options.update(vocab_size=vocab, tie_word_embeddings=False)
    config = LlamaConfig(**options)
    model = random_model(config, device, dtype, seed)
    with torch.no_grad():
        model.lm_head.weight.mul_(head_scale)
    model.eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def random_model(config, device: str, dtype: torch.dtype, seed: int = 0):
    """A model of ``config`` with random weights (norms 1, the rest N(0, 0.02)), built on the meta
    device and initialised in place on ``device``: transformers' own initialisation of 8B
    parameters would take minutes."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.fill_(1.0) if name.endswith("norm.weight") else param.normal_(0.0, 0.02, generator=gen)
    # to_empty() leaves buffers uninitialised: rebuild the rotary frequencies.
    with torch.device(device):
        model.model.rotary_emb = type(model.model.rotary_emb)(config=config)
    return model


def prompts(vocab: int, count: int, length: int, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (1, length), generator=gen) for _ in range(count)]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(device: str, fn):
    sync(device)
    start = time.perf_counter()
    result = fn()
    sync(device)
    return time.perf_counter() - start, result


def write(report: dict, path: str | None) -> None:
    """Write what is measured so far (a run stopped at a time limit keeps its finished sections)."""
    if path:
        with open(path, "w") as f:
            json.dump(report, f, indent=1, default=str)
