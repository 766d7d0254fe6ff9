"""An input's representation for KNN-SSD: the mean over the prompt of the last decoder layer's output.

At generation time the decode loop hands the controller the prefill's last hidden states
(``DecodeView.prompt_hidden``), so routing costs no extra forward. Building a router runs the
same prefill (:func:`prompt_representation`) so anchors and queries are computed alike.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import torch
from transformers import PreTrainedModel

from layersearch.models.skipping import decoder_layers
from layersearch.runtime.cache import new_cache
from layersearch.runtime.forward import forward_tokens


def mean_representation(hidden: torch.Tensor) -> np.ndarray:
    """``[prompt_len, hidden]`` last-layer states -> their mean ``[hidden]`` (float64)."""
    return hidden.detach().to(torch.float64).mean(dim=0).cpu().numpy()


@torch.inference_mode()
def prompt_representation(model: PreTrainedModel, input_ids: torch.Tensor | Iterable[int]) -> np.ndarray:
    """The representation of one prompt, from the same prefill forward the decoder runs."""
    ids = torch.as_tensor(input_ids if isinstance(input_ids, torch.Tensor) else list(input_ids)).reshape(-1)
    last = len(decoder_layers(model)) - 1
    _, hidden = forward_tokens(model, ids, 0, new_cache(model), keep=1, hidden_layers=(last,))  # [n, 1, d]
    return mean_representation(hidden[:, -1])
