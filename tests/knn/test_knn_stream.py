"""Mix-ratio streams follow Eq. 8: switch rate r, uniform over the other domains, prompts cycled."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from layersearch.common.errors import LayersearchError
from layersearch.knn.stream import domain_sequence, mix_stream, switch_rate

DOMAINS = ("a", "b", "c")


@pytest.mark.parametrize("ratio", [0.0, 0.3, 0.7, 1.0])
def test_switch_rate_matches_ratio(ratio):
    n = 4000
    sequence = domain_sequence(DOMAINS, n, ratio, seed=5)
    rate = switch_rate(sequence)
    # Binomial: 4 standard deviations (0 at r in {0, 1}, where the rate is exact).
    assert abs(rate - ratio) <= 4 * math.sqrt(ratio * (1 - ratio) / (n - 1)) + 1e-12


def test_switches_go_uniformly_to_the_other_domains():
    sequence = domain_sequence(DOMAINS, 6000, 1.0, seed=2)
    after_a = Counter(b for a, b in zip(sequence, sequence[1:]) if a == "a")
    assert set(after_a) == {"b", "c"}
    share = after_a["b"] / sum(after_a.values())
    assert abs(share - 0.5) < 4 * math.sqrt(0.25 / sum(after_a.values()))


def test_first_domain_is_uniform_over_seeds():
    firsts = Counter(domain_sequence(DOMAINS, 1, 0.5, seed=s)[0] for s in range(900))
    assert all(abs(firsts[d] - 300) < 4 * math.sqrt(900 * (1 / 3) * (2 / 3)) for d in DOMAINS)


def test_ratio_zero_stays_in_one_domain_and_cycles_prompts():
    stream = mix_stream(DOMAINS, 7, 0.0, 3, seed=0)
    assert len({item.domain for item in stream}) == 1
    assert [item.index for item in stream] == [0, 1, 2, 0, 1, 2, 0]


def test_same_seed_same_stream():
    assert mix_stream(DOMAINS, 50, 0.3, 4, seed=9) == mix_stream(DOMAINS, 50, 0.3, 4, seed=9)
    assert mix_stream(DOMAINS, 50, 0.3, 4, seed=9) != mix_stream(DOMAINS, 50, 0.3, 4, seed=10)


@pytest.mark.parametrize(
    "domains, length, ratio, match",
    [(("a",), 5, 0.3, "two domains"), (DOMAINS, 0, 0.3, "at least one"), (DOMAINS, 5, 1.5, "mix ratio"),
     (("a", "a"), 5, 0.3, "distinct")],
)
def test_bad_streams(domains, length, ratio, match):
    with pytest.raises(LayersearchError, match=match):
        domain_sequence(domains, length, ratio)
