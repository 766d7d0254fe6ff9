"""The controller plug-in point: where the draft mask (and the draft-length cap) come from.

Before every decoding step the loop shows the controller a read-only :class:`DecodeView`
(step 0 comes right after the prefill, so a router can look at the prompt once); the
controller may answer with a :class:`Selection` that holds until its next answer. After each
verification it gets the step's :class:`~layersearch.runtime.outcome.StepOutcome`. Controllers
only *read* the cache, so whatever mask they choose, the output stays lossless. A controller may
keep state across generations (SWIFT's optimizer learns over a stream of inputs).

Implementations: :class:`FixedMask` here; KnapSpec's re-selection in
:mod:`layersearch.knapspec.controller`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, runtime_checkable

import torch

from layersearch.masks.mask import SkipMask
from layersearch.runtime.outcome import StepOutcome


@dataclass(frozen=True)
class DecodeView:
    """What a controller sees before a step. The cache holds ``position`` entries;
    ``sequence`` is ``[1, position + 1]``: the prompt and every emitted token (the newest not
    yet cached). ``prompt_hidden`` is the prefill's last hidden states ``[prompt_len, hidden]``
    when the controller asked for them (``wants_prompt_hidden``), else None."""

    model: torch.nn.Module
    cache: object
    sequence: torch.Tensor
    position: int
    step: int
    prompt_length: int
    mask: SkipMask
    max_draft: int
    prompt_hidden: torch.Tensor | None = None


@dataclass(frozen=True)
class Selection:
    """A controller's answer: the mask (and max draft length, None = unchanged) for the next
    steps; ``record`` is stored in ``stats.selections`` with the step, context and seconds."""

    mask: SkipMask
    max_draft: int | None = None
    record: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Controller(Protocol):
    """Chooses the mask the drafter uses. A controller that runs forwards of its own in the
    decode loop's cache (SWIFT's matchness) goes through
    :func:`~layersearch.runtime.teacher.draft_logits_in_cache` with ``valid=view.position``,
    which handles the captured loop's static cache."""

    wants_prompt_hidden: bool

    def select(self, view: DecodeView) -> Selection | None:
        """Called before every step; None keeps the current selection."""
        ...

    def observe(self, outcome: StepOutcome) -> None:
        """Feedback after every verification."""
        ...


class FixedMask:
    """One mask for the whole generation."""

    wants_prompt_hidden = False

    def __init__(self, mask: SkipMask) -> None:
        self.mask = mask

    def select(self, view: DecodeView) -> Selection | None:
        """The fixed mask at step 0, nothing afterwards."""
        return Selection(self.mask) if view.step == 0 and view.mask != self.mask else None

    def observe(self, outcome: StepOutcome) -> None:
        """A fixed mask learns nothing."""
