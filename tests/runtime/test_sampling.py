"""Speculative sampling keeps the target's distribution (Leviathan et al.), tested statistically."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from layersearch.masks.mask import SkipMask
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.draft_policy import DraftPolicy
from layersearch.runtime.sampling import SamplingConfig, next_token_probs
from layersearch.runtime.verification import verify_sampling
from tests.capture import assert_path, captured, cheap_capture

P_MIN = 1e-3  # fixed seeds make these tests deterministic; the bound only says "consistent"


def pooled_chisquare(observed: np.ndarray, expected_probs: np.ndarray) -> float:
    """Chi-square p-value, pooling cells expected to hold fewer than 5 samples into one."""
    expected = expected_probs * observed.sum()
    small = expected < 5
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return chisquare(obs, exp * obs.sum() / exp.sum()).pvalue


def test_verify_sampling_emits_the_target_distribution():
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.5, 0.2, 0.2, 0.1, 0.0], [0.1, 0.1, 0.1, 0.1, 0.6]])  # [k+1, vocab], k = 1
    q = torch.tensor([[0.1, 0.1, 0.3, 0.2, 0.3]])  # the draft favours other tokens
    first = np.zeros(5)
    for _ in range(20000):
        d = int(torch.multinomial(q[0], 1, generator=gen))
        verdict = verify_sampling([d], q, p, gen)
        first[d if verdict.num_accepted else verdict.next_token] += 1
    assert first[4] == 0  # a token the target gives no mass is never emitted
    assert pooled_chisquare(first, p[0].numpy()) > P_MIN
    assert pooled_chisquare(first, q[0].numpy()) < P_MIN  # the test can tell the draft's law apart


def peaked_tiny_model():
    # A random model's logits are nearly flat; scaling the head makes draft and target disagree.
    model = build_tiny_model("llama", num_layers=2, hidden_size=32, vocab_size=6, seed=5)
    with torch.no_grad():
        model.lm_head.weight.mul_(12.0)
    model.generation_config.eos_token_id = None
    return model


def exact_sequence_probs(model, prompt, config, length=3):
    """Exact probability of every continuation of ``length`` tokens under the warped target."""
    vocab = model.config.vocab_size
    sequences = list(itertools.product(range(vocab), repeat=length))
    probs = np.ones(len(sequences))
    with torch.no_grad():
        for step in range(length):
            prefixes = sorted({s[:step] for s in sequences})
            ids = torch.tensor([prompt + list(pre) for pre in prefixes])
            dist = next_token_probs(model(ids).logits[:, -1], config).numpy()
            lookup = dict(zip(prefixes, dist))
            probs *= np.array([lookup[s[:step]][s[step]] for s in sequences])
    return sequences, probs


@pytest.mark.parametrize("top_p", [0.8])
def test_generated_sequences_follow_the_target_distribution(top_p, decode_path):
    model = cheap_capture(peaked_tiny_model())
    prompt = [1, 4, 2]
    base = SamplingConfig(temperature=1.0, top_p=top_p)
    sequences, exact = exact_sequence_probs(model, prompt, base)
    # Marginal over (token 2, token 3): both come from draft + verify, never from the prefill alone.
    pairs = {pair: i for i, pair in enumerate(itertools.product(range(6), repeat=2))}
    exact_pairs = np.zeros(len(pairs))
    for seq, prob in zip(sequences, exact):
        exact_pairs[pairs[seq[1:]]] += prob
    observed = np.zeros(len(pairs))
    mask = SkipMask(2, (1,), (0,))
    drafted = 0
    for seed in range(1500):
        config = SamplingConfig(temperature=1.0, top_p=top_p, seed=seed)
        decoder = SpeculativeDecoder(model, mask, policy=DraftPolicy(2, 0.0), sampling=config, compile=captured(decode_path))
        result = decoder.generate(prompt, 3)
        observed[pairs[result.token_ids[1:]]] += 1
        drafted += result.stats.drafted
    assert_path(result, decode_path)
    assert drafted == 1500  # every run drafted its one token
    assert pooled_chisquare(observed, exact_pairs) > P_MIN


def test_sampling_is_reproducible_for_a_seed(tiny_llama):
    config = SamplingConfig(temperature=0.9, top_p=0.95, seed=123)
    runs = [
        SpeculativeDecoder(tiny_llama, SkipMask.uniform(4, 0.5), policy=DraftPolicy(4, 0.0), sampling=config)
        .generate([5, 6, 7], 20)
        .token_ids
        for _ in range(2)
    ]
    assert runs[0] == runs[1]


def test_seeded_sampling_is_the_same_captured_or_not(tiny_llama):
    """The captured loop draws from the same device-side generator at the same points."""
    config = SamplingConfig(temperature=0.8, top_p=0.9, seed=1)
    prompt = [5, 6, 7, 5, 6, 7]
    eager, compiled = (SpeculativeDecoder(tiny_llama, SkipMask.uniform(4, 0.5), policy=DraftPolicy(4, 0.0), sampling=config,
                                          compile=c).generate(prompt, 24) for c in (False, True))
    assert_path(eager, "eager")
    assert_path(compiled, "captured")
    assert compiled.token_ids == eager.token_ids
    assert compiled.stats.drafted == eager.stats.drafted and compiled.stats.accepted == eager.stats.accepted


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 5, 1.0), (0.7, 8, 0.9), (1.3, 0, 0.8), (0.9, 1, 1.0), (1.0, 60, 0.95)])
def test_the_warp_is_transformers_own(temperature, top_k, top_p):
    """Temperature, then top-k (ties at the k-th kept), then top-p: the law transformers' generate
    samples from with the same settings, so custom_generate's sampling is the plain one's."""
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(3)) * 3  # [rows, vocab]
    logits[0, 10:14] = logits[0].max()  # a tie at the top
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)]
                                  + ([TopKLogitsWarper(top_k)] if top_k else []) + [TopPLogitsWarper(top_p)])
    expected = torch.softmax(warpers(None, logits.clone()), -1)
    ours = next_token_probs(logits, SamplingConfig(temperature, top_p, None, top_k))
    assert torch.equal(ours > 0, expected > 0)
    # both are a float32 softmax over <= 50 terms, renormalized: a few ulps of relative error each
    assert torch.allclose(ours, expected, rtol=1e-5, atol=1e-7)


def test_top_k_is_checked():
    for bad in (-1, 1.5, True):
        with pytest.raises(Exception, match="top-k must be an integer >= 0"):
            SamplingConfig(1.0, 1.0, None, bad)
