"""Shared fixtures: tiny random models built from configs (fast, real transformers code), and
the ``slow`` marker of the developers' inner loop (``pytest -m "not slow"``).

A test is ``slow`` (set here at collection, so a new test is marked without anyone remembering
to) when it

* loads the embedded model: it is marked ``embedded`` or ``realmodels``, or uses the
  ``embedded_dir`` fixture, which every fixture built on the embedded model's files goes through;
* needs the private PostgreSQL server (the ``postgres`` fixture);
* starts processes, checks a sampling law statistically (a chi-square test over thousands of
  draws), is a hypothesis property test (many examples each), runs a command end to end through
  the CLI's ``main`` or runs an Optuna search (``study.optimize``): its own code, a fixture of
  this suite it uses, or a helper function of either's module that they call (through other
  helpers too) matches :data:`SLOW_CODE`; or
* is a case of the bad-input table (:data:`SLOW_MODULES`: some 1,200 end-to-end runs, each in
  a fresh copy of a working folder).

A test the rule leaves fast fails if it starts a subprocess anyway (:func:`_slow_rule_holds`),
so a gap in the rule shows in the fast run.

After a test that loads real weights, and after the last test of its module (when the module's
fixtures are gone), the memory they freed goes back to the system (:func:`pytest_runtest_teardown`),
so that it does not add to the next model's load or to the engines a vLLM test starts.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import inspect
import re
import subprocess
from pathlib import Path

import pytest
import torch

from layersearch.models.tiny import build_tiny_model
from tests.capture import PATHS, cheap_capture

# Tiny models run fastest on one thread; several threads only contend on a shared 2-core box.
torch.set_num_threads(1)

SLOW_MARKS = ("embedded", "realmodels")
SLOW_FIXTURES = ("embedded_dir", "postgres")
#: Modules with a test that loads real weights (marked or through ``embedded_dir``), so far.
_REAL_WEIGHT_MODULES: set[Path] = set()
TESTS = str(Path(__file__).parent)
#: Code that makes a test slow: starting processes, a chi-square law test, a hypothesis property
#: test, a command run end to end, an Optuna search.
SLOW_CODE = re.compile(r"\bsubprocess\b|\bPopen\b|\bmultiprocessing\b|\bos\.fork\b|chisquare\(|@given\(|\bmain\(|\.optimize\(")
SLOW_MODULES = ("test_bad_inputs.py",)


def pytest_collection_modifyitems(config, items):
    """Mark the slow tests (see the module docstring for the rule)."""
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)


def _is_slow(item) -> bool:
    if any(item.get_closest_marker(name) for name in SLOW_MARKS):
        return True
    if set(SLOW_FIXTURES) & set(getattr(item, "fixturenames", ())):
        return True
    if item.path.name in SLOW_MODULES and item.path.parent == Path(TESTS):
        return True
    functions = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for name, definitions in (info.name2fixturedefs.items() if info is not None else ()):
        if name != "_slow_rule_holds":  # the guard below names subprocess without starting one
            functions += [definition.func for definition in definitions if _is_ours(definition.func)]
    return any(_slow_code(function) for function in functions if function is not None)


def _is_ours(function) -> bool:
    """A fixture of this test suite (pytest's own, such as ``tmp_path``, start nothing)."""
    return str(getattr(inspect.getmodule(function), "__file__", "")).startswith(TESTS)


def _slow_code(function) -> bool:
    """Whether ``function``'s source, or a helper of its module that it calls, matches :data:`SLOW_CODE`."""
    source = _source(function)
    helpers = _slow_helpers(inspect.getmodule(function))
    return bool(SLOW_CODE.search(source)) or any(re.search(rf"\b{name}\(", source) for name in helpers)


@functools.lru_cache(maxsize=None)
def _slow_helpers(module) -> frozenset[str]:
    """The module's functions whose code matches :data:`SLOW_CODE`, directly or through each other."""
    if module is None:
        return frozenset()
    sources = {name: _source(value) for name, value in vars(module).items()
               if inspect.isfunction(value) and getattr(value, "__module__", None) == module.__name__}
    found = {name for name, source in sources.items() if SLOW_CODE.search(source)}
    while True:  # helpers calling helpers
        more = {name for name, source in sources.items() if name not in found
                and any(re.search(rf"\b{helper}\(", source) for helper in found)}
        if not more:
            return frozenset(found)
        found |= more


def _source(function) -> str:
    try:
        return inspect.getsource(inspect.unwrap(function))
    except (OSError, TypeError):
        return ""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After a test marked as loading real weights, and after the last test of a module with one
    (or using ``embedded_dir``), collect and hand the freed memory back: models in reference
    cycles wait for the collector, and glibc keeps freed small blocks (a model's many weights
    below 32 MB each) unless trimmed. A collection takes about half a second, hence not after
    every test."""
    result = yield  # the test's fixtures, and at a module's end the module's, are gone now
    marked = any(item.get_closest_marker(name) for name in SLOW_MARKS)
    if marked or "embedded_dir" in getattr(item, "fixturenames", ()):
        _REAL_WEIGHT_MODULES.add(item.path)
    if marked or (item.path in _REAL_WEIGHT_MODULES and (nextitem is None or nextitem.path != item.path)):
        _release_memory()
    return result


def _release_memory() -> None:
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _glibc():
    """glibc, for malloc_trim; None elsewhere (macOS, musl), where nothing is trimmed."""
    try:
        libc = ctypes.CDLL(None)  # the process's own symbols: libc's among them
    except (OSError, TypeError):
        return None
    return libc if hasattr(libc, "malloc_trim") else None


_LIBC = _glibc()


@pytest.fixture(autouse=True)
def _slow_rule_holds(request, monkeypatch):
    """A test the rule leaves fast may not start a subprocess (the rule reads code; this catches
    a process started somewhere the rule does not look)."""
    if request.node.get_closest_marker("slow") is not None:
        yield
        return

    def refuse(what: str):
        # pytest.fail raises a BaseException: the CLI's catch-all for Exception cannot swallow it.
        pytest.fail(f"{request.node.nodeid} {what}: mark it slow (the rule is in tests/conftest.py)")

    monkeypatch.setattr(subprocess.Popen, "__init__", lambda self, *args, **kwargs: refuse("starts a subprocess"))
    yield


@pytest.fixture(scope="session")
def tiny_llama() -> torch.nn.Module:
    """A 4-layer random Llama (vocab 128) with no EOS, so generation runs to max_new_tokens;
    its captured forwards compile cheaply (tests/capture.py), once per shape per session."""
    return cheap_capture(_without_eos(build_tiny_model("llama", num_layers=4, seed=0)))


@pytest.fixture(scope="session")
def tiny_qwen2() -> torch.nn.Module:
    """A 4-layer random Qwen2 (vocab 128) with no EOS; captured forwards as :func:`tiny_llama`'s."""
    return cheap_capture(_without_eos(build_tiny_model("qwen2", num_layers=4, seed=1)))


@pytest.fixture(params=PATHS)
def decode_path(request) -> str:
    """The decode path a lossless suite runs on: eagerly, then captured (tests/capture.py)."""
    return request.param


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
        device = next(model.parameters()).device
        probs = lambda rows: torch.softmax(model(torch.tensor(rows, device=device)).logits[:, -1].float(), -1).cpu()  # noqa: E731
        with torch.no_grad():
            p1 = probs([prompt])[0]
            for a in range(6):
                p2 = probs([prompt + [a]])[0]
                p3 = probs([prompt + [a, b] for b in range(6)])  # [6, 6]
                law[a] = (p1[a] * p2[:, None] * p3).numpy()
        return law.reshape(-1)

    return law_of


@pytest.fixture(scope="session")
def three_token_chi_square(exact_three_token_law):
    """Function (target, prompt, make_decoder, runs) -> (p-value, tokens drafted): ``runs`` sampled
    generations of 3 tokens, ``make_decoder(seed)`` a decoder sampling with that seed, tested by
    chi-square against the exact law (cells expected below 5 pooled)."""
    import numpy as np
    from scipy.stats import chisquare

    def test(target, prompt, make_decoder, runs):
        exact = exact_three_token_law(target, prompt)
        observed, drafted = np.zeros(216), 0
        for seed in range(runs):
            result = make_decoder(seed).generate(prompt, 3)
            a, b, c = result.token_ids
            observed[a * 36 + b * 6 + c] += 1
            drafted += result.stats.drafted
        keep = exact * runs >= 5
        expected = np.append(exact[keep], exact[~keep].sum()) * runs
        counts = np.append(observed[keep], observed[~keep].sum())
        return chisquare(counts, expected * counts.sum() / expected.sum()).pvalue, drafted

    return test


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
