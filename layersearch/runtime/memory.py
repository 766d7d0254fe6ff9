"""Peak memory of a block of work, and the sizes it is judged against (weights, KV cache)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


class PeakMemory:
    """Context manager measuring peak memory growth (bytes) during its block.

    CUDA: ``torch.cuda.max_memory_allocated``. CPU (Linux): the process's peak resident set
    (VmHWM), reset on entry by writing 5 to /proc/self/clear_refs. ``peak_bytes`` is None
    where neither is available.
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.cuda = torch.device(device).type == "cuda"
        self.peak_bytes: int | None = None
        self._start = 0

    def __enter__(self) -> "PeakMemory":
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            self._start = torch.cuda.memory_allocated()
        elif _reset_peak_rss():
            self._start = _rss("VmRSS")
        return self

    def __exit__(self, *exc) -> None:
        if self.cuda:
            self.peak_bytes = torch.cuda.max_memory_allocated() - self._start
        elif self._start:
            self.peak_bytes = max(0, _rss("VmHWM") - self._start)


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters (tied weights counted once)."""
    seen = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    return sum(seen.values())


def kv_cache_bytes(model: torch.nn.Module, positions: int) -> int:
    """Bytes of a full KV cache holding ``positions`` positions."""
    config: Any = model.config  # a transformers config: its fields vary by architecture
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    element = next(model.parameters()).element_size()
    return 2 * config.num_hidden_layers * kv_heads * head_dim * positions * element


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _rss(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0
