"""Deterministic train / validation / test splits of every prompt source.

An item belongs to a split by a hash of its stable id (``summarization/17``, ``code/42``,
``spec-bench:qa/301``), never by its position in a list: adding or reordering items moves
no other item between splits, and the split is the same on every machine and run.
Searches draw their prompts from ``train``, comparisons from ``test``; ``validation`` is
there for choosing among searched masks without touching ``test``. Few-shot examples always
come from ``train`` items (an example is context the model reads, never a scored query),
so no test item appears anywhere in a search prompt.
"""

from __future__ import annotations

import hashlib

from layersearch.common.errors import LayersearchError

SPLITS: tuple[str, ...] = ("train", "validation", "test")
#: Share of items in each split (cumulative bounds: train [0, 0.6), validation [0.6, 0.8), test [0.8, 1)).
FRACTIONS = {"train": 0.6, "validation": 0.2, "test": 0.2}
_UPPER = {"train": 0.6, "validation": 0.8, "test": 1.0}


def split_of(item_id: str) -> str:
    """The split of the item with stable id ``item_id`` (a fixed hash; no seed)."""
    digest = hashlib.sha256(f"layersearch.split/{item_id}".encode("utf-8")).digest()
    position = int.from_bytes(digest[:8], "big") / 2**64  # uniform in [0, 1)
    for name in SPLITS:
        if position < _UPPER[name]:
            return name
    return SPLITS[-1]


def check_split(split: str | None) -> str | None:
    """``split`` if it is a known split or None (all items); LayersearchError otherwise."""
    if split is not None and split not in SPLITS:
        raise LayersearchError(f"unknown prompt split {split!r}: choose one of {', '.join(SPLITS)}")
    return split


def in_split(item_id: str, split: str | None) -> bool:
    """Whether the item may be a query of ``split`` (None: every item)."""
    return split is None or split_of(item_id) == split


def shot_allowed(item_id: str, split: str | None) -> bool:
    """Whether the item may serve as a few-shot example for prompts of ``split``."""
    return split is None or split_of(item_id) == "train"
