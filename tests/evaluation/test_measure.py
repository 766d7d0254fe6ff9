"""The one measurement harness: its definitions on hand-made statistics, and compare() on a tiny model."""

from __future__ import annotations

import statistics

import pytest
import torch

from layersearch.masks.mask import SkipMask
from layersearch.evaluation.measure import (
    Configuration, Measurement, acceptance_per_position, compare, decode_speedup, decode_tokens_per_second,
    figures, median_speedup, speedup, stats_speedup,
)
from layersearch.runtime.baseline import hf_generate
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.draft_policy import DraftPolicy
from layersearch.runtime.step import StepOutcome
from layersearch.runtime.stats import DecodeStats


def _stats(tokens: int, total: float, prefill: float, generations: int = 1, steps=()) -> DecodeStats:
    return DecodeStats(tokens, max(tokens - generations, 0), 0, 0, prefill, 0.0, total - prefill, total,
                       generations=generations, steps=tuple(steps))


def _step(drafted: int, accepted: int) -> StepOutcome:
    return StepOutcome(0, 0, drafted, accepted, accepted + 1, "layer-skip", None)


def test_speedup_is_seconds_per_token_and_exactly_the_time_ratio_for_equal_outputs():
    assert speedup(2.0, 10, 1.0, 10) == 2.0
    assert speedup(3.0, 7, 7.0, 7) == 3.0 / 7.0
    assert speedup(2.0, 10, 2.0, 20) == 2.0  # twice the tokens in the same time
    assert speedup(2.0, 10, 0.0, 10) is None and speedup(2.0, 0, 1.0, 10) is None


def test_decode_speedup_leaves_the_prefill_and_its_token_out():
    base, run = _stats(11, 3.0, 1.0), _stats(11, 1.5, 1.0)
    assert decode_speedup(base, run) == pytest.approx(2.0 / 0.5)
    assert stats_speedup(base, run) == 2.0
    assert decode_speedup(base, _stats(11, 1.5, 0.0)) is None  # prefill not timed
    assert decode_tokens_per_second(base) == pytest.approx(10 / 2.0)
    assert decode_tokens_per_second(base, exclude_seconds=1.0) == pytest.approx(10 / 1.0)


def test_acceptance_per_position_counts_prefixes_over_drafting_steps():
    steps = [_step(3, 3), _step(3, 1), _step(2, 0), _step(0, 0)]  # the plain step does not count
    got = acceptance_per_position(steps)
    assert got["drafts"] == 3
    assert got["accepted_per_position"] == [2, 1, 1]
    assert got["drafted_per_position"] == [3, 3, 2]
    assert got["acceptance_per_position"] == [2 / 3, 1 / 3, 1 / 3]
    assert acceptance_per_position([_step(0, 0)]) == {"drafts": 0, "accepted_per_position": [],
                                                      "drafted_per_position": [], "acceptance_per_position": []}
    assert figures([_stats(5, 1.0, 0.1, steps=steps)])["accepted_per_position"] == [2, 1, 1]


def test_median_speedup_is_the_median_of_the_per_repeat_ratios():
    base, run = Measurement(), Measurement()
    base.stats = [_stats(10, t, 0.5) for t in (2.0, 3.0, 4.0)]
    run.stats = [_stats(10, t, 0.5) for t in (1.0, 1.0, 4.0)]
    assert median_speedup(base, run) == statistics.median([2.0, 3.0, 1.0])
    assert median_speedup(base, run, decode=True) == pytest.approx(statistics.median([1.5 / 0.5, 2.5 / 0.5, 1.0]))
    run.stats = run.stats[:2]
    assert median_speedup(base, run) is None  # not measured in the same repeats


def test_compare_rotates_the_order_and_takes_ratios_against_the_baseline(tiny_llama):
    calls: list[str] = []

    def recording(name, generate):
        def run(ids, n):
            calls.append(name)
            return generate(ids, n)

        return run

    mask = SkipMask.uniform(4, 0.5)
    loop = SpeculativeDecoder(tiny_llama, mask, policy=DraftPolicy(4, 0.0))
    configurations = [
        Configuration("base", recording("base", lambda ids, n: hf_generate(tiny_llama, ids, n))),
        Configuration("ours", recording("ours", loop.generate), mask, tiny_llama),
        Configuration("broken", recording("broken", lambda ids, n: 1 / 0)),
    ]
    prompts = [torch.tensor([[5, 9, 11]]), torch.tensor([[7, 1, 2, 4]])]
    measured = compare(configurations, prompts, 2, new_tokens=8, baseline="base")
    # prompt 1 starts with the first configuration, prompt 2 one further on; "broken" is tried once
    assert calls[:5] == ["base", "ours", "broken", "ours", "base"]
    assert calls.count("broken") == 1 and measured["broken"].error.startswith("ZeroDivisionError")
    assert measured["base"].speedups == [1.0, 1.0]
    ours = measured["ours"]
    assert ours.identical and len(ours.stats) == 2
    assert ours.speedups == [b.total_seconds / o.total_seconds for b, o in zip(measured["base"].stats, ours.stats)]
    assert ours.stats[0].drafted > 0 and (ours.peak_ratio is None or ours.peak_ratio > 0)
    assert figures(ours.stats)["drafts"] > 0


def test_phases_are_defined_the_same_for_transformers_peers_and_our_loop(tiny_llama):
    """transformers' prompt lookup and assisted generation deliver a whole verification step in
    one ``put``: those first tokens leave the decode phase with their time; an assistant's (and
    our draft model's) prompt forward is its own column, in neither phase."""
    import torch

    from layersearch.models.tiny import build_tiny_model
    from layersearch.runtime.baseline import hf_generate
    from layersearch.runtime.loop import SpeculativeDecoder
    from layersearch.runtime.drafters import ModelDrafter
    from layersearch.runtime.lookahead import StaticLookahead

    prompt = torch.tensor([[5, 6, 7, 8, 9] * 6])
    plain = hf_generate(tiny_llama, prompt, 12).stats
    assert plain.first_tokens == 1 and plain.draft_prefill_seconds == 0.0
    assert plain.decode_tokens == plain.new_tokens - 1
    lookup = hf_generate(tiny_llama, prompt, 12, prompt_lookup_num_tokens=4).stats
    assert 1 <= lookup.first_tokens <= 5 and lookup.decode_tokens == lookup.new_tokens - lookup.first_tokens
    assistant = build_tiny_model("llama", num_layers=2, seed=11)
    assisted = hf_generate(tiny_llama, prompt, 12, assistant_model=assistant).stats
    assert assisted.draft_prefill_seconds > 0
    assert abs(assisted.decode_seconds - (assisted.total_seconds - assisted.prefill_seconds - assisted.draft_prefill_seconds)) < 1e-9
    ours = SpeculativeDecoder(tiny_llama, drafter=ModelDrafter(assistant), lookahead=StaticLookahead(3)).generate(prompt, 12).stats
    assert ours.first_tokens == 1 and ours.draft_prefill_seconds > 0
    assert ours.tpot == ours.decode_seconds / (ours.new_tokens - 1)
    assert ours.decode_seconds < ours.total_seconds - ours.prefill_seconds  # the draft prefill is out of the decode phase
