"""DISCO's training data: one row per generated position of a domain's prompts.

The target generates greedily; the draft (the target with a skip mask) predicts every next
token given the target's own prefix, in one teacher-forced forward per prompt
(:mod:`layersearch.runtime.teacher`). Row j of a prompt: features of the draft's distribution
for token t_j (:mod:`layersearch.disco.features`), label = the draft's argmax equals t_j, and
the total variation distance between draft and target distributions there (the paper's loss
weighting; 1 - TV is the chance that speculative sampling accepts a sampled draft token).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from transformers import PreTrainedModel

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.disco.features import NUM_FEATURES, features
from layersearch.runtime.teacher import draft_logits, target_continuation


@dataclass(frozen=True)
class Rows:
    """Teacher-forced rows of several prompts (numpy arrays, one entry per position)."""

    x: np.ndarray  # [N, NUM_FEATURES] float32
    label: np.ndarray  # [N] bool: draft argmax == target token
    tv: np.ndarray  # [N] float32: total variation distance between draft and target
    prompt: np.ndarray  # [N] int: which prompt the row comes from
    position: np.ndarray  # [N] int: index of the predicted token in the generation (>= 1)

    def __len__(self) -> int:
        return len(self.label)

    def prompts(self) -> list["Rows"]:
        """The rows of each prompt, in generation order."""
        return [self.take(self.prompt == p) for p in np.unique(self.prompt)]

    def take(self, keep: np.ndarray) -> "Rows":
        """The rows selected by a boolean or index array."""
        return Rows(self.x[keep], self.label[keep], self.tv[keep], self.prompt[keep], self.position[keep])

    def save(self, path: str | Path) -> Path:
        """Write an ``.npz`` file whole (:mod:`layersearch.common.outputs`: never a partial file, nothing
        left behind on a failure); returns the path given."""
        import io

        from layersearch.common.outputs import write_output

        buffer = io.BytesIO()
        np.savez(buffer, x=self.x, label=self.label, tv=self.tv, prompt=self.prompt, position=self.position)
        return Path(write_output(path, buffer.getvalue()).given)

    @classmethod
    def load(cls, path: str | Path) -> "Rows":
        """Read rows written by :meth:`save`, validated completely (the archive's members, each
        array's declared dtype and size before it is read, shapes, finite values); one
        LayersearchError line naming ``path`` if it is not such a file."""
        from layersearch.disco.rowsfile import read_rows

        x, label, tv, prompt, position = read_rows(path)
        return cls(x, label, tv, prompt, position)

    @staticmethod
    def concat(parts: Sequence["Rows"]) -> "Rows":
        """All rows of ``parts``, prompt ids made distinct."""
        offset, shifted = 0, []
        for part in parts:
            shifted.append(part.prompt + offset)
            offset += int(part.prompt.max()) + 1 if len(part) else 0
        return Rows(
            np.concatenate([p.x for p in parts]), np.concatenate([p.label for p in parts]),
            np.concatenate([p.tv for p in parts]), np.concatenate(shifted),
            np.concatenate([p.position for p in parts]),
        )


def prompt_rows(model: PreTrainedModel, mask: SkipMask, prompt: Sequence[int], new_tokens: int, stop=frozenset()) -> Rows:
    """Rows of one prompt: the target's ``new_tokens`` greedy tokens, draft predictions of t_1.."""
    run = target_continuation(model, prompt, new_tokens, stop, keep_logits=True)
    draft = draft_logits(model, mask, run).float()  # [n, vocab]: row j-1 predicts t_j
    n = draft.shape[0]
    if n == 0:
        return _empty()
    if run.logits is None:  # asked for above (keep_logits=True)
        raise LayersearchError("the target's run kept no logits")
    target = torch.tensor(run.tokens[1:])  # [n]
    draft_probs = torch.softmax(draft, -1)  # [n, vocab]
    target_probs = torch.softmax(run.logits[1:], -1)  # [n, vocab]
    tv = 0.5 * (draft_probs - target_probs).abs().sum(-1)  # [n]
    positions = torch.arange(1, n + 1)
    return Rows(
        features(draft_probs, positions).numpy(), (draft.argmax(-1) == target).numpy(), tv.numpy().astype(np.float32),
        np.zeros(n, dtype=np.int64), positions.numpy(),
    )


def collect(
    model: PreTrainedModel, mask: SkipMask, prompts: Sequence[Sequence[int]], new_tokens: int,
    progress: Callable[[str], None] | None = None, stop=frozenset(),
) -> Rows:
    """Rows of every prompt (prompt ids 0..len-1), saying progress per prompt."""
    parts = []
    for index, prompt in enumerate(prompts):
        parts.append(prompt_rows(model, mask, prompt, new_tokens, stop))
        if progress:
            progress(f"collected {index + 1}/{len(prompts)} prompts ({sum(map(len, parts))} rows)")
    return Rows.concat(parts) if parts else _empty()


def _empty() -> Rows:
    return Rows(np.zeros((0, NUM_FEATURES), np.float32), np.zeros(0, bool), np.zeros(0, np.float32),
                np.zeros(0, np.int64), np.zeros(0, np.int64))
