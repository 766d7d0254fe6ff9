"""Shared fixtures: tiny random models built from configs (fast, real transformers code)."""

from __future__ import annotations

import pytest
import torch

from layersearch.models.tiny import build_tiny_model

# Tiny models run fastest on one thread; several threads only contend on a shared 2-core box.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_llama() -> torch.nn.Module:
    """A 4-layer random Llama (vocab 128) with no EOS, so generation runs to max_new_tokens."""
    return _without_eos(build_tiny_model("llama", num_layers=4, seed=0))


@pytest.fixture(scope="session")
def tiny_qwen2() -> torch.nn.Module:
    """A 4-layer random Qwen2 (vocab 128) with no EOS."""
    return _without_eos(build_tiny_model("qwen2", num_layers=4, seed=1))


@pytest.fixture(scope="session")
def embedded_dir():
    """The embedded model's safetensors folder (converted from its GGUF on first use)."""
    from layersearch.models.loading import embedded_model_dir

    return embedded_model_dir()


@pytest.fixture
def tiny_with_embedded_tokenizer(tmp_path, embedded_dir):
    """Factory: a tiny random Llama sized to the embedded tokenizer, saved as a model folder."""
    from transformers import AutoTokenizer

    def save(seed: int):
        tokenizer = AutoTokenizer.from_pretrained(embedded_dir)
        model = build_tiny_model("llama", num_layers=4, vocab_size=len(tokenizer), seed=seed)
        folder = tmp_path / "tiny"
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return model, tokenizer, folder

    return save


def _without_eos(model: torch.nn.Module) -> torch.nn.Module:
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model
