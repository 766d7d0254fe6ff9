"""TPT choice on a hand-made profile, alpha estimates, and the study entry point knapsack_masks."""

from __future__ import annotations

import pytest
import torch

from layersearch.common.errors import LayersearchError
from layersearch.knapspec import (
    Candidate,
    KnapSpecConfig,
    KnapSpecSelector,
    SubLayerRunner,
    alphas_from_states,
    choose_tpt,
    knapsack_masks,
    spread_indices,
    window_from_prompt,
)
from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.profiling.profile import LatencyProfile

INFO = ModelInfo("tiny-llama", 4, 64, "fp")


def profile(slope=0.0, verify=(1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35, 1.4)) -> LatencyProfile:
    # t_attn = 1 ms + slope*n, t_mlp = 1 ms, base 0.5 ms
    return LatencyProfile(INFO, "cpu", "float32", "x", slope, 1e-3, 1e-3, 5e-4, verify)


def tpt(p, alpha, gamma, mask, n):
    """TPT by hand (the formula of the paper), independent of LatencyProfile.tpt."""
    tokens = gamma + 1 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    t_draft = p.base_seconds + (4 - len(mask.attention)) * p.attention_seconds(n) + (4 - len(mask.mlp)) * p.mlp_seconds
    t_target = p.base_seconds + 4 * (p.attention_seconds(n) + p.mlp_seconds)
    return tokens / (gamma * t_draft + t_target * p.verify_ratio(gamma + 1))


def test_choose_tpt_is_the_argmax_over_masks_and_gammas():
    p = profile(slope=2e-6)
    cands = [
        Candidate(SkipMask.none(4), 0, 1.0, 1.0),
        Candidate(SkipMask(4, (0,), ()), 3, 0.99, 0.95),
        Candidate(SkipMask(4, (0, 1), (1,)), 7, 0.9, 0.8),
        Candidate(SkipMask(4, (0, 1, 2), (0, 1, 2)), 12, 0.7, 0.3),
    ]
    for n in (10, 1000, 5000):
        choice, rows = choose_tpt(p, cands, n, max_draft=12)
        brute = max(
            ((tpt(p, c.alpha, g, c.mask, n), g, i) for i, c in enumerate(cands[1:], 1) for g in range(1, 13)),
            key=lambda t: t[0],
        )
        assert choice.tpt == pytest.approx(brute[0])
        assert choice.gamma == brute[1] and choice.mask == cands[brute[2]].mask
        assert choice.alpha == cands[brute[2]].alpha and choice.context == n
        assert len(rows) == 4  # plain decoding + the three non-empty candidates
        assert choice.tpt >= max(row["tpt"] for row in rows) - 1e-12
    record = choice.record()
    assert {"mask", "gamma", "tpt", "alpha", "context", "budget"} <= set(record)


def test_plain_decoding_wins_when_no_draft_pays():
    p = profile()
    bad = [Candidate(SkipMask(4, (0,), ()), 3, 0.5, 0.0), Candidate(SkipMask(4, (0, 1), (0, 1)), 6, 0.5, 0.1)]
    choice, _ = choose_tpt(p, bad, 100)
    assert choice.mask.is_empty and choice.gamma == 0
    assert choice.tpt == pytest.approx(1 / p.target_seconds(100))
    forced, rows = choose_tpt(p, bad, 100, allow_plain=False)  # experiments: the best draft even if it loses
    assert forced.mask == bad[1].mask and forced.gamma >= 1
    assert forced.tpt == pytest.approx(max(row["tpt"] for row in rows[1:]))
    assert choose_tpt(p, [], 100, allow_plain=False)[0].mask.is_empty  # nothing to draft with
    with pytest.raises(LayersearchError, match="alpha"):
        choose_tpt(p, [Candidate(SkipMask(4, (0,), ()), 3, 0.5)], 100)


def test_long_context_prefers_dropping_attention():
    """Same alphas, growing context: the attention-skipping candidate overtakes the MLP-skipping one."""
    p = profile(slope=1e-5)
    attention = Candidate(SkipMask(4, (0, 1, 2), ()), 9, 0.9, 0.7)
    mlp = Candidate(SkipMask(4, (), (0, 1, 2)), 3, 0.9, 0.8)
    short, _ = choose_tpt(p, [attention, mlp], 0)
    long, _ = choose_tpt(p, [attention, mlp], 4000)
    assert short.mask == mlp.mask and long.mask == attention.mask


def test_spread_indices():
    assert spread_indices(5, None) == [0, 1, 2, 3, 4]
    assert spread_indices(5, 10) == [0, 1, 2, 3, 4]
    assert spread_indices(11, 3) == [0, 5, 10]
    picks = spread_indices(40, 16)
    assert len(picks) == 16 and picks[0] == 0 and picks[-1] == 39
    with pytest.raises(LayersearchError):
        spread_indices(3, 0)


def test_alpha_is_top1_agreement(tiny_llama):
    window = window_from_prompt(tiny_llama, torch.arange(3, 23), 6)
    runner = SubLayerRunner(tiny_llama)
    masks = [SkipMask.none(4), SkipMask.none(4), SkipMask.everything(4)]
    states = runner.run_masks(masks, [window])
    alphas = alphas_from_states(runner, states[1:], states[0])
    assert alphas[0] == 1.0
    expected = (runner.top1(states[2]) == runner.top1(states[0])).float().mean().item()
    assert alphas[1] == pytest.approx(expected)


@pytest.mark.parametrize("method", ["hidden", "items"])
def test_selector_and_knapsack_masks(tiny_llama, method):
    p = profile(slope=1e-6)
    config = KnapSpecConfig(method=method, max_alpha_candidates=None, tau=0.0)
    prompts = [torch.arange(5, 25), [7, 8, 9, 10, 11, 12, 13, 14]]
    rows = knapsack_masks(tiny_llama, p, prompts, context=512, max_candidates=4, window=6, config=config)
    assert 1 <= len(rows) <= 4
    tpts = [row[1] for row in rows]
    assert tpts == sorted(tpts, reverse=True)
    for mask, value, gamma, alpha in rows:
        assert not mask.is_empty and mask.model == INFO
        assert mask.provenance["strategy"] == "knapsack"
        assert 1 <= gamma <= config.max_draft and 0 <= alpha <= 1
        assert value == pytest.approx(p.best_tpt(alpha, mask, 512, max_draft=config.max_draft)[0])
    selector = KnapSpecSelector(tiny_llama, p, config)
    choice = selector.select([window_from_prompt(tiny_llama, prompts[0], 6)], 512)
    assert choice.tpt >= 1 / p.target_seconds(512)
    assert set(selector.last_timing) == {"dp_seconds", "alpha_seconds", "tpt_seconds"}
    # Alpha on a longer window than the DP's: the picked masks run over it.
    short, long = [window_from_prompt(tiny_llama, prompts[0], 3)], [window_from_prompt(tiny_llama, prompts[0], 12)]
    scored, _ = selector.candidates(short, 512, alpha_windows=long)
    runner = selector.runner
    for cand in scored:
        states = runner.run_masks([SkipMask.none(4), cand.mask], long)
        assert cand.alpha == pytest.approx(alphas_from_states(runner, states[1:], states[0])[0])


def test_selector_rejects_a_profile_for_another_model(tiny_llama):
    other = LatencyProfile(ModelInfo("x", 6, 64, "fp"), "cpu", "float32", "x", 0.0, 1e-3, 1e-3, 5e-4, (1.0,))
    with pytest.raises(LayersearchError, match="layers"):
        KnapSpecSelector(tiny_llama, other)
