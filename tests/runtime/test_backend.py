"""The forward backend: eager and captured generations give the plain output, the compile key is
the one the loop compiles under, and two captured generations of one model never share its
static cache at the same time (threads)."""

from __future__ import annotations

import threading

import pytest
import torch

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.backend import EagerBackend, capacity, compile_key
from layersearch.runtime.backend import CapturedBackend, compile_with
from layersearch.runtime.backend import _forward
from layersearch.runtime.lookahead import StaticLookahead
from layersearch.runtime.loop import SpeculativeDecoder
from tests.runtime.test_plugins import plain_generate, repetitive_prompt


def _uncompiled(device):  # the eager forward stands in for a compiled one: the backend is under test
    return _forward


def _model(seed: int):
    model = build_tiny_model("llama", num_layers=4, seed=seed)
    model.generation_config.eos_token_id = None
    compile_with(model, _uncompiled)
    return model


def test_the_loop_compiles_under_the_backends_key():
    """A benchmark keying by compile_key replays what a generation compiled (no copy of the layout)."""
    model = _model(20)
    decoder = SpeculativeDecoder(model, SkipMask.uniform(4, 0.5), lookahead=StaticLookahead(3), compile=True)
    prompt = repetitive_prompt(2)
    result = decoder.generate(prompt, 12)
    assert result.stats.path == "captured"
    cache = decoder.static_cache(capacity(prompt.shape[-1], 12, 3))
    plan = result.stats.steps[0].mask
    assert compile_key(model, plan, 1, 1, None, cache) in decoder.compiled  # a draft token under the plan
    assert compile_key(model, None, 4, 4, None, cache) in decoder.compiled  # verification of [last, d1..d3]
    assert compile_key(model, None, 4, 1, None, cache) not in decoder.compiled


def test_the_eager_backend_cuts_and_the_captured_one_moves_nothing():
    model = _model(21)
    eager = SpeculativeDecoder(model, SkipMask.uniform(4, 0.5), lookahead=StaticLookahead(3))
    captured = SpeculativeDecoder(model, SkipMask.uniform(4, 0.5), lookahead=StaticLookahead(3), compile=True)
    prompt = repetitive_prompt(3)
    expected = plain_generate(model, prompt, 10)
    for decoder, kind in ((eager, EagerBackend), (captured, CapturedBackend)):
        result = decoder.generate(prompt, 10)
        assert list(result.token_ids) == expected
        assert result.stats.path == kind.path
    backend = EagerBackend(model, captured.compiled, torch.no_grad)
    with torch.inference_mode():
        backend.forward(prompt[0], 0)
        backend.rollback(2)
    assert backend.cache.get_seq_length() == 2


def test_two_captured_generations_of_one_model_at_once_get_a_clear_error():
    """Decoders of one model share its static cache: a second thread's generation is refused while
    the first runs, and the first finishes with the plain output."""
    model = _model(22)
    prompt = repetitive_prompt(4)
    expected = plain_generate(model, prompt, 10)
    first = SpeculativeDecoder(model, SkipMask.uniform(4, 0.5), lookahead=StaticLookahead(2), compile=True)
    second = SpeculativeDecoder(model, SkipMask.uniform(4, 0.25), lookahead=StaticLookahead(2), compile=True)
    inside, tried = threading.Event(), threading.Event()
    results: dict[str, object] = {}

    def streaming(tokens) -> None:  # the first generation waits, mid-way, for the second to try
        inside.set()
        tried.wait(timeout=60)

    def run_first() -> None:
        results["first"] = first.generate(prompt, 10, on_tokens=streaming)

    def run_second() -> None:
        inside.wait(timeout=60)
        try:
            second.generate(prompt, 10)
        except LayersearchError as error:
            results["second"] = error
        finally:
            tried.set()

    threads = [threading.Thread(target=run_first), threading.Thread(target=run_second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert isinstance(results["second"], LayersearchError) and "one static cache" in str(results["second"])
    assert list(results["first"].token_ids) == expected  # type: ignore[attr-defined]
    assert list(second.generate(prompt, 10).token_ids) == expected  # free again once the first ended


def test_eager_generations_of_one_model_run_at_once_in_threads():
    """Eager decoders each own a dynamic cache: two threads generating at once both get the plain output."""
    model = _model(23)
    prompt = repetitive_prompt(5)
    expected = plain_generate(model, prompt, 10)
    barrier = threading.Barrier(2, timeout=60)
    results: dict[int, list[int]] = {}

    def run(index: int, fraction: float) -> None:
        decoder = SpeculativeDecoder(model, SkipMask.uniform(4, fraction), lookahead=StaticLookahead(2))
        tokens: list[int] = []

        def step(new) -> None:  # both generations are inside generate() at once
            if not tokens:
                barrier.wait()
            tokens.extend(new)

        decoder.generate(prompt, 10, on_tokens=step)
        results[index] = tokens

    threads = [threading.Thread(target=run, args=(i, f)) for i, f in enumerate((0.5, 0.25))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert results == {0: expected, 1: expected}
