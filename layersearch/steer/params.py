"""SD²'s steering parameters: g = W_hml [h; m; l] and the MLP bias W_s g (paper Eq. 1-2).

``h, m, l`` are the verifier's outputs of three decoder layers at the input whose output
gave the newest token. W_hml maps ``3 * d_verifier -> d_drafter`` and starts as three stacked
(rectangular) identities, so g = h + m + l (each state RMS-normalised) before training; W_s maps ``d_drafter ->
intermediate`` (the drafter's MLP width) and starts at 0, so an untrained steering changes
nothing.
"""

from __future__ import annotations

import torch
from torch import nn


def default_layers(num_layers: int) -> tuple[int, ...]:
    """The paper's low / middle / high verifier layers (3, L/2, L-2), each read once: shallow
    models use 0 for low, and where two coincide (L <= 4) the high one moves up or is dropped."""
    low, middle = 3 if num_layers >= 8 else 0, num_layers // 2
    high = min(max(num_layers - 2, middle + 1), num_layers - 1)
    return tuple(sorted({low, middle, high}))


class SteeringParams(nn.Module):
    """W_hml ``[d_drafter, len(layers) * d_verifier]`` and W_s ``[intermediate, d_drafter]``."""

    def __init__(self, layers: tuple[int, ...], verifier_hidden: int, drafter_hidden: int, intermediate: int) -> None:
        super().__init__()
        self.layers = tuple(int(i) for i in layers)
        self.hml = nn.Linear(len(self.layers) * verifier_hidden, drafter_hidden, bias=False)
        self.s = nn.Linear(drafter_hidden, intermediate, bias=False)
        with torch.no_grad():
            eye = torch.eye(drafter_hidden, verifier_hidden)  # [d_drafter, d_verifier]
            self.hml.weight.copy_(torch.cat([eye] * len(self.layers), dim=1))  # g = h + m + l
            self.s.weight.zero_()  # no bias until trained

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        """The two matrices' shapes by their file names."""
        return {"hml.weight": tuple(self.hml.weight.shape), "s.weight": tuple(self.s.weight.shape)}

    def vector(self, states: torch.Tensor) -> torch.Tensor:
        """g from the verifier's states ``[..., len(layers), d_verifier]`` -> ``[..., d_drafter]``.

        Each layer's state is first scaled to unit RMS (no parameters): residual streams grow
        with depth (SmolLM2's reach a norm of ~740 at layer 28), and unnormalised, one AdamW
        step on W_s would move the bias by whole units."""
        states = states.to(self.hml.weight.dtype)
        states = states * torch.rsqrt(states.pow(2).mean(-1, keepdim=True) + 1e-6)
        flat = states.reshape(*states.shape[:-2], -1)  # [..., layers * d_verifier]
        return self.hml(flat)

    def bias(self, states: torch.Tensor) -> torch.Tensor:
        """W_s g: the bias added to every executed MLP's up projection, ``[..., intermediate]``."""
        return self.s(self.vector(states))
