"""The loop's clocks: a synchronizing read only at step boundaries, forwards summed without one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from layersearch.masks.mask import SkipMask
from layersearch.runtime import timing
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.draft_policy import DraftPolicy
from layersearch.runtime.timing import RegionTimer


def test_region_timer_sums_its_regions_on_cpu(monkeypatch):
    # A clock the test advances: what is summed is checked exactly, with no dependence on how
    # busy the machine is (speed belongs to benchmarks).
    now = [100.0]
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    timer = RegionTimer("cpu")
    for _ in range(3):
        with timer.region():
            now[0] += 0.01
    now[0] += 0.02  # outside any region: not counted
    assert timer.total() == pytest.approx(0.03)


def test_the_loop_reads_the_synchronizing_clock_a_few_times_per_step(tiny_llama, monkeypatch):
    reads = []
    real_now = timing.Clock.now
    monkeypatch.setattr(timing.Clock, "now", lambda self: reads.append(1) or real_now(self))
    prompt = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    result = SpeculativeDecoder(tiny_llama, SkipMask(4, (), (3,)), policy=DraftPolicy(8, 0.0)).generate(prompt, 32)
    steps = len(result.stats.steps)
    forwards = result.stats.draft_forwards + steps + 1  # drafts, verifications, the prefill
    # Step start, draft -> verify, step end, and the controller's read; 2 more per forward before.
    assert len(reads) <= 4 * steps + 4 < 2 * forwards
    assert 0 < result.stats.forward_seconds <= result.stats.total_seconds
