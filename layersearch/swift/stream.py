"""The stream experiment's old module name: it is :mod:`layersearch.swift.bench` now (every method
package keeps its bench in ``bench.py``); the names stay importable from here."""

from layersearch.swift.bench import (  # noqa: F401
    METHODS, InputResult, StreamInput, StreamReport, build_stream, fixed_mask_on_train, method_decoder, run_stream,
    search_fixed_mask,
)
