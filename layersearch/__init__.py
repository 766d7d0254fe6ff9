"""layersearch: lossless self-speculative decoding of Hugging Face causal LMs, and the search for
the sub-layers its draft skips.

``layersearch.load_decoder(spec_or_path, model=None)`` is the Python API (:mod:`layersearch.decoder.api`);
``layersearch.decoding(spec_or_path)`` makes transformers' ``model.generate(..., custom_generate=...)``
run a spec (:mod:`layersearch.integrations.hf_generate`). They and
:class:`~layersearch.decoder.spec.DecoderSpec` load on first use, so ``import layersearch`` stays light.
Bad arguments raise :class:`LayersearchError` (one line naming the problem); ``__version__`` is the
installed version.
"""

from __future__ import annotations

from typing import Any

from layersearch.common.errors import LayersearchError


def _version() -> str:
    """The installed distribution's version, else (a source tree on PYTHONPATH) pyproject.toml's."""
    from importlib.metadata import PackageNotFoundError, version
    from pathlib import Path

    try:
        return version("layersearch")
    except PackageNotFoundError:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        try:
            text = pyproject.read_text(encoding="utf-8")
        except OSError:
            return "0+unknown"
        import re

        found = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
        return found.group(1) if found else "0+unknown"


__version__ = _version()

_LAZY = {"load_decoder": "layersearch.decoder.api", "Decoder": "layersearch.decoder.api", "Generation": "layersearch.decoder.api",
         "DecoderSpec": "layersearch.decoder.spec", "decoding": "layersearch.integrations.hf_generate"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)


__all__ = sorted([*_LAZY, "LayersearchError", "__version__"])
