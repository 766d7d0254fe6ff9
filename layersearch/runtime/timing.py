"""Wall-clock timer that waits for the accelerator before reading the clock."""

from __future__ import annotations

import time

import torch


class Clock:
    """``now()`` in seconds, synchronizing CUDA first so kernel time lands in the right bucket."""

    def __init__(self, device: torch.device | str) -> None:
        self._sync = torch.device(device).type == "cuda"

    def now(self) -> float:
        """Seconds from an arbitrary origin, after the device is idle."""
        if self._sync:
            torch.cuda.synchronize()
        return time.perf_counter()
