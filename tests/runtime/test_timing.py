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


def test_the_recorder_times_a_draft_models_prompt_forward_as_its_own_phase(tiny_llama, monkeypatch):
    """A clock the draft model's forwards advance: 1 s over the prompt, 10 ms per draft token
    (the target's forwards take no time). The prompt forward is the draft-side prefill, in
    neither the step's draft phase nor the decode phase."""
    from layersearch.models.tiny import build_tiny_model
    from layersearch.runtime.drafters import model as model_drafter
    from layersearch.runtime.drafters import ModelDrafter
    from layersearch.runtime.lookahead import StaticLookahead

    now = [100.0]
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    forward = model_drafter.forward_tokens

    def slow(model, tokens, start, *args, **kwargs):
        now[0] += 1.0 if start == 0 else 0.01
        return forward(model, tokens, start, *args, **kwargs)

    monkeypatch.setattr(model_drafter, "forward_tokens", slow)
    draft = build_tiny_model("llama", num_layers=2, seed=11)
    prompt = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(1))
    stats = SpeculativeDecoder(tiny_llama, drafter=ModelDrafter(draft), lookahead=StaticLookahead(3)).generate(prompt, 12).stats
    assert stats.draft_prefill_seconds == pytest.approx(1.0)  # once per generation
    assert stats.draft_seconds == pytest.approx(0.01 * (stats.draft_forwards - 1))  # the first forward is the prefill
    assert stats.decode_seconds == pytest.approx(stats.total_seconds - stats.prefill_seconds - 1.0)
    assert stats.other_seconds == pytest.approx(0.0, abs=1e-9)  # nothing but the draft model's forwards took time
