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


@pytest.fixture(scope="session")
def exact_three_token_law():
    """Function (model, prompt) -> P(t1, t2, t3) over a 6-token vocabulary, flattened to [216]:
    the exact law that sampled speculative decoding of 3 tokens must follow."""
    import numpy as np

    def law_of(model, prompt) -> "np.ndarray":
        law = np.zeros((6, 6, 6))
        with torch.no_grad():
            p1 = torch.softmax(model(torch.tensor([prompt])).logits[0, -1], -1)
            for a in range(6):
                p2 = torch.softmax(model(torch.tensor([prompt + [a]])).logits[0, -1], -1)
                p3 = torch.softmax(model(torch.tensor([prompt + [a, b] for b in range(6)])).logits[:, -1], -1)  # [6, 6]
                law[a] = (p1[a] * p2[:, None] * p3).numpy()
        return law.reshape(-1)

    return law_of


@pytest.fixture(scope="session")
def tiny_word_models(tmp_path_factory):
    """Two model folders sharing a small word tokenizer ("w0".."w127", bos w1, eos w2): a 4-layer
    random Llama (the verifier) and a 1-layer one (an independent drafter)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(128)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="w0", eos_token="w2", bos_token="w1")
    folders = []
    for name, layers, seed in (("verifier", 4, 0), ("drafter", 1, 7)):
        folder = tmp_path_factory.mktemp(name)
        build_tiny_model("llama", num_layers=layers, vocab_size=128, seed=seed).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders.append(folder)
    return tuple(folders)
