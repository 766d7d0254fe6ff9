"""The user's own prompt file (``--prompts FILE`` / the domain ``file:FILE``): rows of text or
chat messages, split by a hash of each row's content, validated in one line per problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layersearch.data import check_domain, load_prompts, split_of
from layersearch.data import user
from layersearch.common.errors import LayersearchError


def write_rows(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture
def prompt_file(tmp_path: Path) -> Path:
    rows = [{"prompt": f"def task_{i}(x):"} for i in range(40)]
    rows += [{"messages": [{"role": "user", "content": f"Write a function number {i}."}]} for i in range(20)]
    return write_rows(tmp_path / "mine.jsonl", rows)


class ChatTokenizer:
    """The part of a tokenizer the prompt file uses: a chat template."""

    chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert tokenize is False and add_generation_prompt is True
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"


def test_splits_are_disjoint_and_follow_row_content(prompt_file: Path) -> None:
    domain = user.domain_for(str(prompt_file))
    by_split = {s: {p.id for p in load_prompts(domain, 4, split=s, tokenizer=ChatTokenizer())} for s in ("train", "test")}
    assert not by_split["train"] & by_split["test"]
    for split, ids in by_split.items():
        assert all(split_of(f"user/{i}") == split for i in ids)
    # Reordering the file moves no row between splits, and the same seed picks the same rows.
    rows = prompt_file.read_text().splitlines()
    shuffled = write_rows(prompt_file.with_name("shuffled.jsonl"), [json.loads(r) for r in reversed(rows)])
    test_rows = {r.id for r in user.read_rows(str(shuffled)) if split_of(f"user/{r.id}") == "test"}
    assert by_split["test"] <= test_rows
    first = [p.text for p in load_prompts(domain, 3, seed=7, split="train", tokenizer=ChatTokenizer())]
    assert first == [p.text for p in load_prompts(domain, 3, seed=7, split="train", tokenizer=ChatTokenizer())]


def test_chat_rows_use_the_chat_template(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "chat.jsonl", [{"messages": [{"role": "system", "content": "Be brief."},
                                                              {"role": "user", "content": f"Q{i}"}]} for i in range(12)])
    texts = [p.text for p in load_prompts(user.domain_for(str(path)), 3, split=None, tokenizer=ChatTokenizer())]
    assert all(t.startswith("<system>Be brief.<user>Q") and t.endswith("<assistant>") for t in texts)


def test_chat_rows_with_a_real_tokenizer(tmp_path: Path, embedded_dir) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(embedded_dir)
    messages = [{"role": "user", "content": "Say hello."}]
    path = write_rows(tmp_path / "chat.jsonl", [{"messages": messages}])
    [prompt] = load_prompts(user.domain_for(str(path)), 1, split=None, tokenizer=tokenizer)
    assert prompt.text == tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert "Say hello." in prompt.text and prompt.text != "Say hello."


def test_duplicate_rows_count_once(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "dup.jsonl", [{"prompt": "same"}] * 5 + [{"prompt": "other"}])
    assert len(user.read_rows(str(path))) == 2


@pytest.mark.parametrize("content, fragment", [
    ("", "no prompts"),
    ('{"prompt": "a"}\n{"prompt": ', ":2:"),
    ('{"prompt": ""}', "non-empty string"),
    ('{"prompt": 3}', "non-empty string"),
    ('{"prompt": "a", "messages": []}', 'either a "prompt" string or a "messages" list'),
    ('{"text": "a"}', 'either a "prompt" string or a "messages" list'),
    ('[1, 2]', 'either a "prompt"'),
    ('{"messages": []}', "non-empty list"),
    ('{"messages": [{"role": "user"}]}', 'message 0 must be an object with "role" and "content" strings'),
    ('{"messages": [{"role": "wizard", "content": "hi"}]}', "role 'wizard'"),
])
def test_malformed_files_are_one_line(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(LayersearchError) as excinfo:
        check_domain(f"file:{path}")
    assert "\n" not in str(excinfo.value) and fragment in str(excinfo.value), str(excinfo.value)


def test_too_few_rows_names_the_minimum(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "small.jsonl", [{"prompt": f"p{i}"} for i in range(5)])
    with pytest.raises(LayersearchError) as excinfo:
        load_prompts(user.domain_for(str(path)), 4, split="test")
    message = str(excinfo.value)
    assert "at least about 20 rows" in message and "of the file's 5 distinct rows" in message


def test_chat_rows_need_a_tokenizer_with_a_template(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "chat.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}])
    with pytest.raises(LayersearchError, match="need the model's tokenizer"):
        load_prompts(user.domain_for(str(path)), 1)

    class NoTemplate:
        chat_template = None

    with pytest.raises(LayersearchError, match="has none"):
        load_prompts(user.domain_for(str(path)), 1, tokenizer=NoTemplate())


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(LayersearchError, match="not found"):
        check_domain(f"file:{tmp_path / 'absent.jsonl'}")
