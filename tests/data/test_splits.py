"""Tests for layersearch.data.splits: deterministic train / validation / test splits by id hash."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from layersearch.data import DOMAINS, load_prompts
from layersearch.data._common import pick
from layersearch.data.splits import FRACTIONS, SPLITS, split_of
from layersearch.common.errors import LayersearchError

from tests.data.test_prompts import sources  # noqa: F401  (fixture: every domain loadable)


def test_split_of_depends_on_the_id_only_and_matches_the_fractions():
    ids = [f"summarization/{i}" for i in range(6000)]
    first = [split_of(i) for i in ids]
    assert [split_of(i) for i in reversed(ids)] == first[::-1]  # order plays no part
    for name in SPLITS:
        share = first.count(name) / len(ids)
        assert abs(share - FRACTIONS[name]) < 0.03, (name, share)


def test_split_of_is_the_same_in_a_fresh_interpreter():
    # Python's str hash is salted per process; the split must not be.
    ids = ["code/0", "math/0-3", "spec-bench:qa/301", "translation/17"]
    code = f"from layersearch.data.splits import split_of; print([split_of(i) for i in {ids!r}])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str([split_of(i) for i in ids])


@pytest.mark.parametrize("domain", DOMAINS)
def test_each_split_draws_its_queries_from_that_split_only(domain, sources):
    seen = {}
    for name in SPLITS:
        prompts = load_prompts(domain, 3, seed=0, split=name)
        assert [split_of(p.id) for p in prompts] == [name] * 3
        assert load_prompts(domain, 3, seed=0, split=name) == prompts  # deterministic
        seen[name] = {p.id for p in prompts}
    assert not seen["train"] & seen["test"]


def test_test_items_never_appear_in_train_prompts_even_as_examples():
    # Summarization examples quote the article's lead sentence: no test article's may show up.
    from layersearch.data import news

    pairs = news._pairs(str(news.corpus_path()))
    test_leads = [lead for number, _, lead in pairs if split_of(f"summarization/{number}") == "test"]
    train_text = "\n".join(p.text for p in load_prompts("summarization", 40, seed=0, split="train"))
    assert test_leads and not any(lead in train_text for lead in test_leads)


def test_pick_without_a_split_keeps_the_old_draws():
    # No split: the same rng draws as before splits existed (existing studies stay reproducible).
    chosen = pick(30, 4, 2, random.Random(7), "x")
    rng = random.Random(7)
    order = list(range(30))
    rng.shuffle(order)
    assert [q for q, _ in chosen] == order[:4]


def test_a_split_too_small_names_its_maximum(sources):
    with pytest.raises(LayersearchError, match=r"in the test split with 3-shot examples, asked for 99"):
        load_prompts("sql", 99, split="test")


def test_unknown_split_is_one_clear_error():
    with pytest.raises(LayersearchError, match="unknown prompt split 'dev'"):
        load_prompts("code", 2, split="dev")
