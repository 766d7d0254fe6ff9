"""DISCO's classifier inputs: the draft's top-k probabilities, its entropy and the position.

disco.txt Sec. 3: C_i = FFN(Concat(Top_k(y_i^D), Ent(y_i^D)), i), k = 10. The position is the
index of the predicted token in the generation (0 = the prefill's token), as in the paper's
Appendix D.1, fed as log(1 + position) so long generations stay in range. The same function
makes training rows and the lookahead's input, so the two can never drift apart.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

TOP_K = 10
FEATURE_SPEC: Mapping[str, Any] = {"top_k": TOP_K, "entropy": True, "position": "log1p"}
NUM_FEATURES = TOP_K + 2


def features(probs: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Feature rows ``[n, top_k + 2]`` (float32) for draft distributions ``probs`` [n, vocab]
    predicting tokens at generation ``positions`` [n]."""
    probs = probs.float()
    top = probs.topk(min(TOP_K, probs.shape[-1]), dim=-1).values  # [n, <=k], descending
    if top.shape[-1] < TOP_K:  # a vocabulary smaller than k (tiny test models)
        top = torch.nn.functional.pad(top, (0, TOP_K - top.shape[-1]))
    entropy = -(probs * probs.clamp_min(1e-12).log()).sum(-1, keepdim=True)  # [n, 1]
    position = torch.log1p(positions.float().view(-1, 1))  # [n, 1]
    return torch.cat([top, entropy, position], dim=-1)


def check_spec(spec: Any) -> None:
    """Raise ValueError unless ``spec`` is the feature spec this version computes."""
    if not isinstance(spec, Mapping) or dict(spec) != dict(FEATURE_SPEC):
        raise ValueError(f"feature spec {spec!r} is not this version's {dict(FEATURE_SPEC)!r}")
