"""SWIFT at inference time: the on-the-fly layer-set optimizer (:mod:`.controller`) and the
domain-switching stream experiment (:mod:`.stream`)."""

from layersearch.swift.controller import InputSummary, SwiftConfig, SwiftController, optimization_seconds, phase_counts

__all__ = ["InputSummary", "SwiftConfig", "SwiftController", "optimization_seconds", "phase_counts"]
