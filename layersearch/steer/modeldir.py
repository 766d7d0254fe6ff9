"""Writing a model directory (``save_pretrained`` + tokenizer) all or nothing.

The directory is written under a temporary name beside the target and renamed into place, so
a failure never leaves a partial model. An existing target must be an empty directory (a
non-empty one is refused: a model folder is never merged into or overwritten).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from layersearch.errors import LayersearchError


def check_model_dir(path: str | Path, what: str = "--out") -> Path:
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


def save_model_dir(path: str | Path, model, tokenizer, what: str = "--out") -> Path:
    """Save ``model`` and ``tokenizer`` as a HF model directory at ``path``, atomically."""
    target = check_model_dir(path, what)
    temp = Path(tempfile.mkdtemp(prefix=f".{target.name[:64]}.", suffix=".tmp", dir=target.absolute().parent))
    try:
        model.save_pretrained(temp)
        if tokenizer is not None:
            tokenizer.save_pretrained(temp)
        os.chmod(temp, 0o777 & ~_umask())
        os.replace(temp, target)  # onto a missing or empty directory
    except OSError as exc:
        shutil.rmtree(temp, ignore_errors=True)
        raise LayersearchError(f"{what} {path}: cannot write ({exc.strerror or exc})") from None
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return target


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
