"""The controller plug-in point: where the draft mask (and the draft-length cap) come from.

Before every decoding step the loop shows the controller a read-only
:class:`~layersearch.runtime.step.DecodeView`
(step 0 comes right after the prefill, so a router can look at the prompt once); the
controller may answer with a ``Selection`` that holds until its next answer. After each
verification it gets the step's ``StepOutcome``. The base class and these values are the step's
(:mod:`layersearch.runtime.step`). Controllers
only *read* the cache, so whatever mask they choose, the output stays lossless. A controller may
keep state across generations (SWIFT's optimizer learns over a stream of inputs).

Implementations: :class:`FixedMask` here; KnapSpec's re-selection in
:mod:`layersearch.knapspec.controller`.
"""

from __future__ import annotations

from layersearch.masks.mask import SkipMask
from layersearch.runtime.step import Controller, DecodeView, Selection


class FixedMask(Controller):
    """One mask for the whole generation."""

    def __init__(self, mask: SkipMask) -> None:
        self.mask = mask

    def select(self, view: DecodeView) -> Selection | None:
        """The fixed mask at step 0, nothing afterwards."""
        return Selection(self.mask) if view.step == 0 and view.mask != self.mask else None
