"""DISCO as a lookahead rule: keep drafting while C_i >= tau (and fewer than SL_max drafted).

C_i is the classifier's score of the draft's distribution at the next position, read before a
token is drawn from it, so the rule never changes what is sampled or accepted: the output stays
the target's own. The rule counts generated tokens through :meth:`update` (each step's
``emitted``), which gives the position feature; a new generation starts from the rule the
decoder was built with (position 1 after the prefill's token).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from layersearch.disco.classifier import Classifier
from layersearch.disco.features import features
from layersearch.common.errors import LayersearchError
from layersearch.runtime import MAX_DRAFT
from layersearch.runtime.step import DraftPosition, Lookahead, StepOutcome


@dataclass(frozen=True)
class DiscoLookahead(Lookahead):
    """Draft while the classifier's acceptance score stays at or above ``tau``."""

    reads_confidence = True  # its classifier reads the draft distribution

    classifier: Classifier
    tau: float
    max_draft: int = MAX_DRAFT
    generated: int = 1  # tokens emitted so far in this generation (the prefill's included)

    def __post_init__(self) -> None:
        if isinstance(self.max_draft, bool) or not isinstance(self.max_draft, int) or self.max_draft < 1:
            raise LayersearchError(f"SL_max must be an integer >= 1, got {self.max_draft!r}")
        if not 0 <= self.tau <= 1:
            raise LayersearchError(f"tau must be in [0, 1], got {self.tau}")

    def score(self, position: DraftPosition) -> float:
        """C_i for this draft position."""
        at = torch.tensor([self.generated + position.index])  # the predicted token's place in the generation
        return float(self.classifier.scores(features(position.probs.view(1, -1), at))[0])

    def keep_drafting(self, position: DraftPosition) -> bool:
        """C_i >= tau."""
        return self.score(position) >= self.tau

    def update(self, outcome: StepOutcome) -> Lookahead:
        """The same rule, ``outcome.emitted`` tokens further into the generation."""
        return replace(self, generated=self.generated + outcome.emitted)
