"""layersearch inside other libraries' own entry points.

* :mod:`.arguments` what transformers' ``generate`` hands a decoding method, read into one
  frozen :class:`~.arguments.GenerateRequest` (every argument honoured, or refused by name)
* :mod:`.hf_generate` :func:`decoding`: ``model.generate(..., custom_generate=layersearch.decoding(spec))``
* :mod:`.export`    the ``custom_generate/`` folder that runs a spec (``layersearch export-hf``)

Only the names below load on import; each module loads torch and transformers when used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["decoding"]


def decoding(spec_or_path: Any, **options: Any) -> Any:
    """A decoding method for transformers' ``generate`` (see :func:`.hf_generate.decoding`)."""
    from layersearch.integrations.hf_generate import decoding as make

    return make(spec_or_path, **options)
