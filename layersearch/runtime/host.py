"""Reads from the device to the host, counted.

On a GPU every read of a device value (``int(t)``, ``t.tolist()``) waits for the queued work,
so a decode step that reads once per step runs its kernels back to back while one that reads
per token stalls per token. Every read the loop and its plug-ins make goes through
:func:`to_host`, which counts them: a step's :attr:`~layersearch.runtime.outcome.StepOutcome.host_reads`
is the difference of :func:`host_reads` across it.
"""

from __future__ import annotations

import torch

#: Where the step's values live, said in their types: a count or length the host holds (read
#: once, already paid for), token ids read to the host, token ids on the CPU (the prompt and
#: the emitted ids), and token ids on the model's device (no read until :func:`to_host`).
HostInt = int
HostTokens = tuple[int, ...]
HostIds = torch.Tensor  # [n] long, on the CPU
DeviceIds = torch.Tensor  # [n] long, on the model's device

_reads = 0


def to_host(values: torch.Tensor) -> list:
    """``values`` as a Python list (a scalar as a one-item list), counted as one host read."""
    global _reads
    _reads += 1
    return values.reshape(-1).tolist()


def host_reads() -> int:
    """Host reads made so far in this process (compare two readings)."""
    return _reads
