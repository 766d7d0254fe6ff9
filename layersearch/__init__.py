"""layersearch: lossless self-speculative decoding of Hugging Face causal LMs, and the search for
the sub-layers its draft skips.

``layersearch.load_decoder(spec_or_path, model=None)`` is the Python API (:mod:`layersearch.decoder.api`);
it and :class:`~layersearch.decoder.spec.DecoderSpec` load on first use, so ``import layersearch`` stays light.
"""

from __future__ import annotations

from typing import Any

_LAZY = {"load_decoder": "layersearch.decoder.api", "Decoder": "layersearch.decoder.api", "Generation": "layersearch.decoder.api",
         "DecoderSpec": "layersearch.decoder.spec"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)


__all__ = sorted(_LAZY)
