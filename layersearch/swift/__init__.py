"""SWIFT at inference time, one shape with the other method packages: its search without Optuna
(:mod:`.search`) on the GP proposals it shares with the Optuna strategies (:mod:`.proposals`),
and its plug-in, the on-the-fly layer-set optimiser (:mod:`.controller`, a controller of the
decode loop). Its bench, the domain-switching stream experiment (``layersearch swift stream``),
is :mod:`layersearch.experiments.swift`.

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
