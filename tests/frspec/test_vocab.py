"""Token frequency tables (counted once per tokenizer from the train prompts, cached whole) and
the draft vocabulary of the N most frequent tokens."""

from __future__ import annotations

import json

import pytest

from layersearch.frspec import vocab
from layersearch.common.errors import LayersearchError


@pytest.fixture(scope="module")
def tokenizer(embedded_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(embedded_dir)


@pytest.fixture
def table_dir(tmp_path, monkeypatch):
    folder = tmp_path / "vocab"
    monkeypatch.setattr(vocab, "table_dir", lambda: folder)
    return folder


def test_counts_only_train_prompts_and_caches_the_table(tokenizer, table_dir, monkeypatch):
    import layersearch.data as data

    splits = []
    real = data.load_prompts

    def recording(domain, n=8, **kwargs):
        splits.append(kwargs.get("split"))
        return real(domain, n, **kwargs)

    monkeypatch.setattr(data, "load_prompts", recording)
    table = vocab.frequency_table(tokenizer)
    assert splits and set(splits) == {"train"}  # never a test prompt
    assert "code" in table.domains and table.total == sum(c for _, c in table.counts) > 10_000
    counts = [c for _, c in table.counts]
    assert counts == sorted(counts, reverse=True)
    path = vocab.table_path(tokenizer)
    assert path.parent == table_dir and json.loads(path.read_text())["tokenizer"] == vocab.tokenizer_hash(tokenizer)
    assert [p.name for p in table_dir.iterdir()] == [path.name]  # no temporary left behind

    def no_recount(tok):
        raise AssertionError("the cached table should have been used")

    monkeypatch.setattr(vocab, "count_frequencies", no_recount)
    assert vocab.frequency_table(tokenizer) == table


@pytest.mark.parametrize("damage", ["truncate", "garbage", "other-tokenizer", "bad-order"])
def test_a_damaged_cache_file_is_counted_again(tokenizer, table_dir, damage):
    good = vocab.frequency_table(tokenizer)
    path = vocab.table_path(tokenizer)
    text = path.read_text()
    data = json.loads(text)
    if damage == "truncate":
        path.write_text(text[: len(text) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\xff\x00not json")
    elif damage == "other-tokenizer":
        path.write_text(json.dumps({**data, "tokenizer": "0" * 16}))
    else:
        path.write_text(json.dumps({**data, "counts": data["counts"][::-1]}))
    assert vocab.frequency_table(tokenizer) == good
    assert json.loads(path.read_text()) == good.to_dict()  # replaced by a whole table


def test_subset_holds_the_most_frequent_ids_and_the_special_tokens(tokenizer, table_dir):
    table = vocab.frequency_table(tokenizer)
    size = len(tokenizer)
    chosen = vocab.frequent_subset(tokenizer, 100, vocab_size=size, extra_ids=(size - 1,))
    top = {i for i, _ in table.counts[:100]}
    assert top <= set(chosen.token_ids)
    assert set(tokenizer.all_special_ids) | {size - 1} <= set(chosen.token_ids)
    assert chosen.n == 100 and chosen.size <= 100 + len(tokenizer.all_special_ids) + 1
    assert chosen.tokenizer == vocab.tokenizer_hash(tokenizer)
    assert list(chosen.token_ids) == sorted(chosen.token_ids)
    # Asking for more ids than the prompts hold fills up with unseen ids (by id): still n of them.
    assert len(set(table.ranked(size)[: len(table.counts) + 50])) == len(table.counts) + 50
    for bad in (0, -3, size, True):
        with pytest.raises(LayersearchError):
            vocab.frequent_subset(tokenizer, bad, vocab_size=size)


def test_tokenizer_hash_tells_vocabularies_apart(tokenizer):
    class Other:
        def get_vocab(self):
            return {**tokenizer.get_vocab(), "<extra>": len(tokenizer)}

    assert len(vocab.tokenizer_hash(tokenizer)) == 16
    assert vocab.tokenizer_hash(tokenizer) != vocab.tokenizer_hash(Other())
