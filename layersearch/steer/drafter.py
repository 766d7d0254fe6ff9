"""``SteeredDrafter``: any model-based drafter, steered by the verifier's hidden states (SD²).

The decode loop hands a drafter with ``hidden_layers`` the verifier's outputs of those layers
after the prefill and after every verification (same forward, no extra pass). This wrapper
keeps the newest ones, turns them into the MLP bias W_s g once per drafting stage and lets the
inner drafter draft inside :func:`~layersearch.steer.hooks.steered`. Losslessness needs
nothing more: the draft distributions the inner drafter reports are the steered ones, which is
the q speculative sampling corrects with; greedy verification never trusts a draft anyway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch

from layersearch.runtime.drafters.model import ModelDrafter
from layersearch.runtime.step import Drafter, Proposal, StepOutcome, StepRequest
from layersearch.steer.hooks import intermediate_size, steered
from layersearch.steer.params import SteeringParams

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class SteeredDrafter(Drafter):
    """Wraps a :class:`LayerSkipDrafter` (steers the executed MLPs of the masked verifier) or a
    :class:`ModelDrafter` (steers every MLP of the draft model)."""

    def __init__(self, inner: Drafter, steering: SteeringParams) -> None:
        self.inner = inner
        self.steering = steering.eval().requires_grad_(False)
        self.hidden_layers = steering.layers
        self.name = f"steered-{inner.name}"
        self._states: torch.Tensor | None = None  # [len(hidden_layers), d_verifier]
        # The model whose MLPs are steered: a draft model's own (None: the target, a self-draft).
        self.own_model: torch.nn.Module | None = inner.model if isinstance(inner, ModelDrafter) else None
        if self.own_model is not None:
            self._check_width(self.own_model)

    def _check_width(self, model: torch.nn.Module) -> None:
        from layersearch.common.errors import LayersearchError

        if intermediate_size(model) != self.steering.s.out_features:
            raise LayersearchError(
                f"steering bias has width {self.steering.s.out_features} but the drafter's MLPs are "
                f"{intermediate_size(model)} wide"
            )

    def check_target(self, target: torch.nn.Module) -> None:
        """The inner drafter's checks, plus: the self-drafter's MLPs fit the bias."""
        self.inner.check_target(target)
        if self.own_model is None:
            self._check_width(target)

    def begin(self, prompt: torch.Tensor) -> None:
        """New generation: forget the last states (the prefill brings new ones)."""
        self._states = None
        self.inner.begin(prompt)

    def observe_hidden(self, states: torch.Tensor) -> None:
        """Keep the verifier's states ``[len(hidden_layers), d]`` at the newest token's input."""
        self._states = states

    def propose(self, request: StepRequest) -> Proposal:
        """The inner drafter's proposal, drafted with the bias W_s g (computed once per stage)."""
        if self._states is None or request.limit <= 0:
            return self.inner.propose(request)
        # A transformers model either way: the runtime's values type it as a Module.
        model = cast("PreTrainedModel", self.own_model or request.model)
        with torch.inference_mode():
            bias = self.steering.bias(self._states.to(self.steering.hml.weight.device))  # [intermediate]
        with steered(model, bias.to(model.device)):
            return self.inner.propose(request)

    def observe(self, outcome: StepOutcome) -> None:
        """Pass the step's feedback on."""
        self.inner.observe(outcome)
