"""A smaller drafter cut from the verifier: keep N evenly spread decoder layers.

No model smaller than the embedded SmolLM2-135M ships with its tokenizer, so SD²'s setting (an
independent small drafter sharing the verifier's tokenizer) starts from a layer-pruned copy:
the same embeddings, final norm, LM head and tokenizer, and ``N`` of the decoder layers
(the first and the last included), renumbered ``0 .. N-1`` in a config with
``num_hidden_layers = N``. It is an ordinary causal LM with its own KV cache; untrained it
drafts poorly, which fine-tuning (``TrainSettings.drafter_lr``) is for.
"""

from __future__ import annotations

import copy

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from layersearch.common.errors import LayersearchError
from layersearch.models.skipping import decoder_layers


def kept_layers(num_layers: int, keep: int) -> tuple[int, ...]:
    """``keep`` layer indices spread evenly over ``num_layers``, the first and the last included."""
    if isinstance(keep, bool) or not isinstance(keep, int) or not 2 <= keep < num_layers:
        raise LayersearchError(f"keep_layers must be between 2 and {num_layers - 1} (the model has {num_layers} layers), got {keep}", fields="keep_layers")
    return tuple(round(i * (num_layers - 1) / (keep - 1)) for i in range(keep))


def prune_layers(model: PreTrainedModel, layers: tuple[int, ...]) -> PreTrainedModel:
    """A new model holding only decoder ``layers`` of ``model`` (in order), everything else copied."""
    old = decoder_layers(model)
    if not layers or list(layers) != sorted(set(layers)) or layers[0] < 0 or layers[-1] >= len(old):
        raise LayersearchError(f"layers to keep must be increasing indices below {len(old)}, got {list(layers)}")
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = len(layers)
    if getattr(config, "layer_types", None) is not None:  # per-layer attention kinds follow their layers
        config.layer_types = [config.layer_types[i] for i in layers]
    small = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    renamed = {f"layers.{new}.": f"layers.{old_index}." for new, old_index in enumerate(layers)}
    source = model.state_dict()
    state = {}
    for name in small.state_dict():
        state[name] = source[_source_name(name, renamed)]
    small.load_state_dict(state)
    small.generation_config = copy.deepcopy(model.generation_config)
    return small.to(model.device).eval().requires_grad_(False)


def _source_name(name: str, renamed: dict[str, str]) -> str:
    for new, old in renamed.items():
        marker = f".{new}"
        if marker in name:
            return name.replace(marker, f".{old}", 1)
    return name


@torch.no_grad()
def shrink(model: PreTrainedModel, keep: int) -> tuple[PreTrainedModel, tuple[int, ...]]:
    """``model`` with ``keep`` evenly spread decoder layers, and the indices kept."""
    layers = kept_layers(len(decoder_layers(model)), keep)
    return prune_layers(model, layers), layers
