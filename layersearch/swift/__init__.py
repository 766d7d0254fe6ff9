"""SWIFT at inference time, one shape with the other method packages: its search without Optuna
(:mod:`.search`), its plug-in, the on-the-fly layer-set optimiser (:mod:`.controller`, a
controller of the decode loop), and its bench, the domain-switching stream experiment
(:mod:`.bench`, ``layersearch swift stream``).

The controller's names load on first use (PEP 562), so :mod:`.search` can be imported by the
Optuna strategies without pulling the runtime in.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["InputSummary", "SwiftConfig", "SwiftController", "optimization_seconds", "phase_counts"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("layersearch.swift.controller"), name)
    raise AttributeError(f"module 'layersearch.swift' has no attribute {name!r}")
