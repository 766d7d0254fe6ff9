"""SwiftController's phases and stop rules on a fake runtime (no model): fake views, a fake matchness."""

from __future__ import annotations

import pytest
import torch

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.runtime.step import DecodeView, StepOutcome
from layersearch.strategies.swift import initial_mask, skip_count
from layersearch.swift import SwiftConfig, SwiftController, optimization_seconds, phase_counts

L = 10  # layers: 16 sub-layers SWIFT may skip (layers 1..8)
PROMPT = 5


class FakeMatchness:
    """Matchness = share of the skipped sub-layers inside ``good`` (the even mask scores low);
    records every call (mask, window start, window tokens)."""

    def __init__(self, good=frozenset(range(2, 10)), perfect: SkipMask | None = None):
        self.good, self.perfect, self.calls = good, perfect, []

    def __call__(self, mask, view, start, tokens):
        self.calls.append((mask, start, tuple(tokens)))
        if self.perfect is not None and mask == self.perfect:
            return 1.0
        skipped = [i for i, bit in enumerate(mask.to_flat()) if bit]
        return sum(i in self.good for i in skipped) / max(1, len(skipped))


def view(step: int, generated: int, mask: SkipMask, prompt: int = PROMPT) -> DecodeView:
    """What the loop shows before a step when ``generated`` tokens were emitted (the newest uncached)."""
    position = prompt + generated - 1
    sequence = torch.arange(position + 1).unsqueeze(0)  # [1, position + 1]: token i at position i
    return DecodeView(None, None, sequence, position, step, prompt, mask, 8)


def run_input(controller, steps: int, *, tokens_per_step: int = 1, drafted: int = 2, accepted: int = 2):
    """Drive one input: select before every step, observe after it; returns the selections."""
    selections, mask, generated = [], SkipMask.none(L), 1  # the prefill emitted one token
    for step in range(steps):
        chosen = controller.select(view(step, generated, mask))
        mask = chosen.mask
        selections.append(chosen.record)
        controller.observe(StepOutcome(step, PROMPT + generated - 1, drafted, accepted, tokens_per_step, "layer-skip", mask))
        generated += tokens_per_step
    return selections


def test_context_phase_until_the_window_is_full_then_one_candidate_per_step():
    fake = FakeMatchness()
    window = 4
    controller = SwiftController(L, SwiftConfig(window=window, seed=1), matchness=fake)
    records = run_input(controller, 12)
    # generated = step + 1 before each step; optimization needs more than window + 1 tokens.
    first_opt = window + 1
    assert [r["phase"] for r in records[:first_opt]] == ["context"] * first_opt
    assert all(r["phase"] == "optimize" for r in records[first_opt:])
    # One re-measurement of the incumbent, then exactly one candidate per optimization step.
    assert len(fake.calls) == 1 + (12 - first_opt)
    assert fake.calls[0][0] == initial_mask(L, 0.45)
    # The window is the input's first window + 1 generated tokens, starting after the prompt.
    assert {c[1:] for c in fake.calls} == {(PROMPT, tuple(range(PROMPT, PROMPT + window + 1)))}
    assert [r["opt_step"] for r in records[first_opt:]] == list(range(1, 12 - first_opt + 1))


def test_candidates_have_swifts_count_and_keep_the_first_and_last_layers():
    fake = FakeMatchness()
    controller = SwiftController(L, SwiftConfig(window=2, seed=3), matchness=fake)
    run_input(controller, 30)
    count = skip_count(L, 0.45)
    for mask, _, _ in fake.calls:
        assert mask.num_skipped == count
        assert not {0, L - 1} & (set(mask.attention) | set(mask.mlp))


def test_best_changes_only_on_a_strictly_better_candidate():
    fake = FakeMatchness()
    controller = SwiftController(L, SwiftConfig(window=2, seed=5, patience=1000), matchness=fake)
    records = [r for r in run_input(controller, 60) if r["phase"] == "optimize"]
    best = records[0].get("incumbent_matchness")
    for r in records:
        if r["kept"]:
            assert r["matchness"] > best
            best = r["matchness"]
        else:
            assert r["matchness"] <= best
        assert r["best_matchness"] == best
        # The mask the step drafts with is the best one.
        assert (r["mask"] == r["candidate"]) or not r["kept"]
    assert any(r["kept"] for r in records)
    assert controller.best_score == best > records[0]["incumbent_matchness"]


def test_every_beta_th_step_is_a_gp_step():
    controller = SwiftController(L, SwiftConfig(window=2, seed=0, bo_interval=4), matchness=FakeMatchness())
    records = [r for r in run_input(controller, 13) if r["phase"] == "optimize"]
    origins = [r["origin"] for r in records]
    assert origins == ["bo" if (i + 1) % 4 == 0 else "random" for i in range(len(origins))]


def test_target_stops_optimization_and_the_best_mask_accelerates():
    fake = FakeMatchness(good=frozenset())

    def scripted(mask, view_, start, tokens):  # the 4th candidate (5th call) is perfect, whatever it is
        value = fake(mask, view_, start, tokens)
        return 1.0 if len(fake.calls) == 5 else value

    controller = SwiftController(L, SwiftConfig(window=2, seed=0), matchness=scripted)
    records = run_input(controller, 20)
    optimize = [r for r in records if r["phase"] == "optimize"]
    assert len(optimize) == 4 and optimize[-1]["kept"] and "target" in optimize[-1]["stopped"]
    after = records[records.index(optimize[-1]) + 1 :]
    assert after and all(r["phase"] == "accelerate" for r in after)
    assert {r["mask"] for r in after} == {optimize[-1]["candidate"]}
    assert len(fake.calls) == 5  # no scoring once accelerating (same input)


def test_patience_and_max_steps_stop():
    flat = FakeMatchness(good=frozenset())  # every mask scores 0: nothing ever improves
    controller = SwiftController(L, SwiftConfig(window=2, patience=5, seed=0), matchness=flat)
    records = run_input(controller, 20)
    optimize = [r for r in records if r["phase"] == "optimize"]
    assert len(optimize) == 5 and "no improvement in 5" in optimize[-1]["stopped"]
    assert controller.phase == "accelerate"

    controller = SwiftController(L, SwiftConfig(window=2, max_steps=3, seed=0), matchness=FakeMatchness())
    records = run_input(controller, 20)
    optimize = [r for r in records if r["phase"] == "optimize"]
    assert len(optimize) == 3 and "reached 3 optimization steps" in optimize[-1]["stopped"]


def test_state_carries_across_inputs_and_the_incumbent_is_remeasured_per_input():
    fake = FakeMatchness()
    controller = SwiftController(L, SwiftConfig(window=2, seed=2, tolerance=0.0), matchness=fake)
    run_input(controller, 15)
    best_after_first = controller.best
    steps_after_first = controller.steps
    calls_before = len(fake.calls)
    second = run_input(controller, 6)
    assert second[0]["mask"] == best_after_first.short_string()  # starts where the first input ended
    # The first scoring of the new input re-measures the incumbent on its window.
    assert fake.calls[calls_before][0] == best_after_first
    assert controller.steps > steps_after_first  # the step counter is the stream's, not the input's
    controller.finish()
    assert [s.index for s in controller.inputs] == [0, 1]
    assert controller.inputs[1].matchness == FakeMatchness()(best_after_first, None, 0, ())
    assert controller.inputs[0].optimization_steps == steps_after_first


def test_low_acceptance_lowers_the_skip_ratio_once():
    controller = SwiftController(L, SwiftConfig(window=2, seed=0, skip_ratio=0.5), matchness=FakeMatchness())
    run_input(controller, 8, drafted=4, accepted=1)  # acceptance 0.25 < 0.7 over 32 drafted tokens
    controller.finish()
    assert controller.ratio == pytest.approx(0.4)
    assert controller.best == initial_mask(L, 0.4) and controller.steps == 0 and controller.optimizing
    run_input(controller, 8, drafted=4, accepted=1)
    controller.finish()
    assert controller.ratio == pytest.approx(0.4)  # the floor: one step below the start, as the paper
    # Enough acceptance keeps the ratio.
    kept = SwiftController(L, SwiftConfig(window=2, seed=0, skip_ratio=0.5), matchness=FakeMatchness())
    run_input(kept, 8, drafted=4, accepted=3)
    kept.finish()
    assert kept.ratio == 0.5


def test_phase_counts_and_optimization_seconds_read_the_selections():
    selections = [
        {"phase": "context", "seconds": 0.5},
        {"phase": "optimize", "seconds": 0.25},
        {"phase": "optimize", "seconds": 0.25},
        {"phase": "accelerate", "seconds": 1.0, "incumbent_matchness": 0.5},
    ]
    assert phase_counts(selections) == {"context": 1, "optimize": 2, "accelerate": 1}
    assert optimization_seconds(selections) == 0.5


@pytest.mark.parametrize(
    "options, message",
    [
        ({"skip_ratio": 1.5}, "skip ratio must be in [0, 1]"),
        ({"window": 0}, "window must be an integer >= 1"),
        ({"bo_interval": 0}, "bo interval"),
        ({"kappa": -1.0}, "kappa must be a number >= 0"),
        ({"target": 2}, "target must be in [0, 1]"),
        ({"patience": 0}, "patience"),
        ({"min_skip_ratio": 0.6}, "above the skip ratio"),
    ],
)
def test_bad_settings_are_refused(options, message):
    with pytest.raises(LayersearchError, match=message.replace("[", r"\[").replace("]", r"\]")):
        SwiftConfig(**options)
