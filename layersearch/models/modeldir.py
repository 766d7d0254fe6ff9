"""Model directories: checking a folder's config before its weights are loaded, and writing a
model directory (``save_pretrained`` + tokenizer) all or nothing.

The directory is written under a temporary name beside the target and renamed into place, so
a failure never leaves a partial model. An existing target must be an empty directory (a
non-empty one is refused: a model folder is never merged into or overwritten).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from layersearch.common.errors import LayersearchError


#: Bounds of the sizes a local model's config.json may state, checked before anything is
#: allocated from them (beyond today's largest open models; a zero or a typo is refused).
CONFIG_BOUNDS = {
    "num_hidden_layers": (1, 4096), "hidden_size": (1, 65536), "intermediate_size": (1, 2**20),
    "num_attention_heads": (1, 4096), "num_key_value_heads": (1, 4096), "vocab_size": (1, 2**22),
    "max_position_embeddings": (1, 2**24),
}


def check_model_config(name: str, what: str) -> None:
    """Refuse a local model folder whose config.json states sizes no model has (zero layers, a
    hidden size of 10**12, a string for a count) before transformers allocates anything from
    it; hub ids and the embedded name are left to the loader."""
    from layersearch.common.checks import check_int
    from layersearch.common.jsonfile import read_json_file

    from layersearch.common.inputs import check_regular_file

    folder = Path(name).expanduser()
    if folder.is_dir():  # a FIFO or device among its files (config, tokenizer, weights) would block the loader
        for entry in folder.iterdir():
            if not entry.is_dir():
                check_regular_file(entry, f"{what} {name}:")
    config = folder / "config.json"
    if not config.is_file():
        return
    data = read_json_file(config, f"{what} config")
    if not isinstance(data, dict):
        raise LayersearchError(f"{what} {name}: config.json is not an object")
    nested = data.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else data  # multimodal configs nest it
    for key, (low, high) in CONFIG_BOUNDS.items():
        if text.get(key) is not None:
            check_int(text[key], f"{what} {name}: config.json {key}", minimum=low, maximum=high)


def check_model_dir(path: str | Path, what: str = "out") -> Path:
    """``path`` as a new model directory; raises LayersearchError unless it can be created there."""
    given = str(path)
    if not given.strip():
        raise LayersearchError(f"{what} needs a directory name")
    target = Path(path).expanduser()
    if len(target.name.encode()) > 255:
        raise LayersearchError(f"{what} {given}: name too long")
    try:
        if target.exists() or target.is_symlink():
            if not target.is_dir() or target.is_symlink():
                raise LayersearchError(f"{what} {given}: exists and is not a directory")
            if any(target.iterdir()):
                raise LayersearchError(f"{what} {given}: directory exists and is not empty")
        parent = target.absolute().parent
        if not parent.is_dir():
            raise LayersearchError(f"{what} {given}: folder {parent} does not exist")
    except OSError as exc:
        raise LayersearchError(f"{what} {given}: cannot use it ({exc.strerror or exc})") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise LayersearchError(f"{what} {given}: folder {parent} is not writable")
    return target


def save_model_dir(path: str | Path, model, tokenizer, what: str = "out") -> Path:
    """Save ``model`` and ``tokenizer`` as a HF model directory at ``path``, atomically."""
    target = check_model_dir(path, what)
    temp = Path(tempfile.mkdtemp(prefix=f".{target.name[:64]}.", suffix=".tmp", dir=target.absolute().parent))
    try:
        model.save_pretrained(temp)
        if tokenizer is not None:
            tokenizer.save_pretrained(temp)
        from layersearch.common.outputs import umask_modes

        # The user's umask for every file and folder (safetensors saves 0600, mkdtemp makes 0700);
        # an existing empty ``path`` folder keeps its own mode.
        existing = target.stat().st_mode & 0o7777 if target.is_dir() else None
        umask_modes(temp, existing)
        os.replace(temp, target)  # onto a missing or empty directory
    except OSError as exc:
        shutil.rmtree(temp, ignore_errors=True)
        raise LayersearchError(f"{what} {path}: cannot write ({exc.strerror or exc})") from None
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return target

