"""Models: loading (the embedded SmolLM2 or any HF causal LM of a supported family) and tiny test models."""

from layersearch.models.families import SUPPORTED_FAMILIES, LayerLayout, layout_for
from layersearch.models.loading import (
    DTYPES,
    EMBEDDED_MODEL,
    EMBEDDED_PACKAGE,
    LoadedModel,
    cache_root,
    default_dtype,
    describe_model,
    embedded_model_dir,
    load_model,
    model_fingerprint,
    resolve_device,
    resolve_dtype,
    set_greedy_generation,
)
from layersearch.models.tiny import SLIDING_FAMILIES, TINY_FAMILIES, build_tiny_model, tiny_config

__all__ = [
    "DTYPES",
    "EMBEDDED_MODEL",
    "EMBEDDED_PACKAGE",
    "LayerLayout",
    "LoadedModel",
    "SLIDING_FAMILIES",
    "SUPPORTED_FAMILIES",
    "TINY_FAMILIES",
    "build_tiny_model",
    "cache_root",
    "default_dtype",
    "describe_model",
    "embedded_model_dir",
    "layout_for",
    "load_model",
    "model_fingerprint",
    "resolve_device",
    "resolve_dtype",
    "set_greedy_generation",
    "tiny_config",
]
