"""Mix-ratio input streams (KNN-SSD Eq. 8): the next input comes from another domain with probability r.

    P(s_{i+1} in D_j | s_i in D_k) = r / (N - 1) if j != k, else 1 - r

r = 0 is a task-by-task stream, r = 1 changes domain at every input. The first input's domain
is uniform. Within a domain the stream walks that domain's prompts in order and starts over
when they run out, so a short test split still makes a long stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from layersearch.common.checks import check_fraction
from layersearch.common.errors import LayersearchError


@dataclass(frozen=True)
class StreamItem:
    """One input of a stream: its domain and the index of the prompt within that domain's set."""

    domain: str
    index: int


def domain_sequence(domains: Sequence[str], length: int, ratio: float, *, seed: int = 0) -> tuple[str, ...]:
    """``length`` domains following the Markov chain of Eq. 8."""
    check_fraction(ratio, "mix ratio")
    if length < 1:
        raise LayersearchError(f"a stream needs at least one input, got {length}")
    if not domains or len(set(domains)) != len(domains):
        raise LayersearchError("a stream needs distinct domains")
    if len(domains) == 1 and ratio > 0:
        raise LayersearchError(f"mix ratio {ratio} needs at least two domains (there is nowhere else to go)")
    rng = np.random.default_rng(seed)
    current = int(rng.integers(len(domains)))
    sequence = [current]
    for _ in range(length - 1):
        if rng.random() < ratio:  # switch: uniform over the other N - 1 domains
            current = (current + 1 + int(rng.integers(len(domains) - 1))) % len(domains)
        sequence.append(current)
    return tuple(domains[i] for i in sequence)


def mix_stream(domains: Sequence[str], length: int, ratio: float, prompts_per_domain: int, *, seed: int = 0) -> tuple[StreamItem, ...]:
    """A stream of ``length`` inputs: domains by Eq. 8, prompts of each domain in turn (cycling)."""
    if prompts_per_domain < 1:
        raise LayersearchError(f"each domain needs at least one prompt, got {prompts_per_domain}")
    used = {d: 0 for d in domains}
    items = []
    for domain in domain_sequence(domains, length, ratio, seed=seed):
        items.append(StreamItem(domain, used[domain] % prompts_per_domain))
        used[domain] += 1
    return tuple(items)


def switch_rate(items: Sequence[StreamItem | str]) -> float:
    """Share of consecutive pairs whose domains differ (estimates r)."""
    names = [i.domain if isinstance(i, StreamItem) else i for i in items]
    if len(names) < 2:
        return 0.0
    return sum(a != b for a, b in zip(names, names[1:])) / (len(names) - 1)
