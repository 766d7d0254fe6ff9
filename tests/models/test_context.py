"""A prompt that certainly overflows the context is refused before it is tokenized."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from layersearch.common.errors import LayersearchError
from layersearch.models.context import check_text_fits, fewest_tokens


@pytest.fixture(scope="module")
def embedded_tokenizer(embedded_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(embedded_dir)


def test_the_bound_never_exceeds_the_real_count(embedded_tokenizer):
    texts = ["", "hello", "def fib(n):\n    return n", "ümlaut ß 漢字 🙂" * 20, "<|im_start|>user\nhi<|im_end|>" * 5,
             " " * 500, "a" * 3000]
    for text in texts:
        assert fewest_tokens(embedded_tokenizer, text) <= len(embedded_tokenizer(text).input_ids)


def test_a_huge_prompt_is_refused_without_tokenizing(embedded_tokenizer):
    loaded = SimpleNamespace(tokenizer=embedded_tokenizer, model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=8192)),
                             info=SimpleNamespace(name="smollm2-135m"))
    text = "word " * 2_000_000  # 10 MB
    start = time.perf_counter()
    with pytest.raises(LayersearchError, match=r"the prompt \(at least \d+ tokens\) \+ max_new_tokens 8 needs"):
        check_text_fits(loaded, text, 8, "the prompt")
    assert time.perf_counter() - start < 2.0  # tokenizing it takes tens of seconds
    check_text_fits(loaded, "word " * 100, 8, "the prompt")  # a prompt that may fit passes on to the real count


def test_no_bound_where_a_normalizer_may_delete_characters():
    normalizing = SimpleNamespace(backend_tokenizer=SimpleNamespace(normalizer=object(), pre_tokenizer="ByteLevel()"))
    assert fewest_tokens(normalizing, "x" * 10_000) == 0
