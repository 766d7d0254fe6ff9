"""The user's own prompts: a JSONL file as a prompt set, split like the built-in ones.

A prompt file has one JSON object per line, either ``{"prompt": "..."}`` (plain text) or
``{"messages": [{"role": "user", "content": "..."}, ...]}`` (a chat, formatted with the
model's chat template and a generation prompt). It is used wherever a domain is taken, as
the domain ``file:PATH`` (a ``prompts`` argument is such a PATH too).

Each row's split (train / validation / test) comes from a hash of its content, as the
built-in sets' come from their stable ids: searches use train rows, comparisons test rows,
and editing, adding or reordering other rows moves no row between splits. Identical rows
count once (a duplicate in two splits would leak a search prompt into a comparison).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from layersearch.data._common import Prompt, check_count, rng_for
from layersearch.data.splits import FRACTIONS, in_split
from layersearch.common.errors import LayersearchError

PREFIX = "file:"
_ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class PromptRow:
    """One row of a prompt file: its content hash (the stable id) and either text or messages."""

    id: str
    text: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None  # ((role, content), ...)


def is_user_domain(domain: str) -> bool:
    """True for the domain ``file:PATH`` (a prompt file)."""
    return domain.startswith(PREFIX)


def domain_for(path: str) -> str:
    """The domain name of a prompt file (what a ``prompts`` PATH stands for)."""
    if not str(path).strip():
        raise LayersearchError("prompts needs a JSONL file of prompts", fields="prompts")
    import os

    return f"{PREFIX}{os.path.abspath(os.path.expanduser(str(path)))}"  # a study reruns from any folder


def read_rows(path: str, *, distinct: bool = True) -> tuple[PromptRow, ...]:
    """Every distinct row of the prompt file ``path`` (``distinct`` False: every row, in file order, as
    ``generate`` runs them), validated; one error line per problem. The one reader of
    prompt files: every command and the API's chat messages follow its rules."""
    from layersearch.common.inputs import read_text

    text = read_text(path, "prompts")  # the one input cap (MAX_INPUT_BYTES, 32 MiB): a prompt set, not a corpus
    rows: dict[str, PromptRow] = {}
    every: list[PromptRow] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            row = _parse_row(line, f"{path}:{number}")
            rows.setdefault(row.id, row)
            every.append(row)
    if not rows:
        raise LayersearchError(f"{path}: no prompts (one JSON object per line: {{\"prompt\": ...}} or {{\"messages\": [...]}})")
    return tuple(rows.values()) if distinct else tuple(every)


def prompts(path: str, n: int, seed: int, split: str | None, tokenizer: Any = None) -> tuple[Prompt, ...]:
    """``n`` prompts of the file's ``split`` (None: all rows), chosen by ``seed``; chat rows are
    formatted with ``tokenizer``'s chat template."""
    return tuple(Prompt(f"{PREFIX}{path}", row.id, render(row, tokenizer, path)) for row in choose_rows(path, n, seed, split))


def choose_rows(path: str, n: int, seed: int, split: str | None) -> list[PromptRow]:
    """The ``n`` rows of ``split`` that ``seed`` chooses (checks the file and the count, formats nothing)."""
    check_count(n)
    rows = read_rows(path)
    pool = [row for row in rows if in_split(f"user/{row.id}", split)]
    if len(pool) < n:
        raise LayersearchError(_too_few(path, n, split, len(pool), len(rows)))
    return rng_for(f"{PREFIX}{path}", seed).sample(pool, n)


def split_sizes(path: str) -> dict[str, int]:
    """How many of the file's distinct rows fall in each split (train, validation, test)."""
    from layersearch.data.splits import SPLITS

    ids = [f"user/{row.id}" for row in read_rows(path)]
    return {split: sum(in_split(item, split) for item in ids) for split in SPLITS}


def render(row: PromptRow, tokenizer: Any, path: str) -> str:
    """A row's text: as written, or its messages through the tokenizer's chat template."""
    if row.messages is None:
        if row.text is None:  # read_rows gives every row one of the two
            raise LayersearchError(f"{path}: row {row.id} has neither text nor messages")
        return row.text
    if tokenizer is None:
        raise LayersearchError(f"{path}: chat rows need the model's tokenizer to format them, which this command does not load")
    if not getattr(tokenizer, "chat_template", None):
        raise LayersearchError(f"{path}: chat rows need a chat template, and this model's tokenizer has none (use \"prompt\" rows)")
    messages = [{"role": role, "content": content} for role, content in row.messages]
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # a template that rejects this conversation (e.g. roles out of order)
        raise LayersearchError(f"{path}: the chat template refused row {row.id[:8]}: {str(exc).splitlines()[0][:160]}") from None


def _parse_row(line: str, where: str) -> PromptRow:
    from layersearch.common.inputs import parse_json

    item = parse_json(line, where)
    if not isinstance(item, dict) or ("prompt" in item) == ("messages" in item):
        raise LayersearchError(f'{where}: expected an object with either a "prompt" string or a "messages" list')
    if "prompt" in item:
        text = item["prompt"]
        if not isinstance(text, str) or not text.strip():
            raise LayersearchError(f'{where}: "prompt" must be a non-empty string')
        return PromptRow(_digest({"prompt": text}), text=text)
    messages = item["messages"]
    if not isinstance(messages, list):
        raise LayersearchError(f'{where}: "messages" must be a non-empty list of {{"role", "content"}} objects')
    pairs = chat_messages(messages, where)
    return PromptRow(_digest({"messages": list(pairs)}), messages=pairs)


def chat_messages(messages: Any, where: str) -> tuple[tuple[str, str], ...]:
    """A chat's ``[{"role", "content"}, ...]`` as ((role, text), ...), checked by the rules of every
    prompt file and the API: a known role (:data:`_ROLES`), content as a string or text parts,
    valid Unicode. ``where`` opens each error line."""
    from layersearch.common.checks import check_text

    if not isinstance(messages, (list, tuple)) or not messages:
        raise LayersearchError(f'{where}: "messages" must be a non-empty list of {{"role", "content"}} objects')
    pairs = []
    for index, message in enumerate(messages):
        content = _text_parts(message.get("content"), f"{where}: message {index}") if isinstance(message, dict) else None
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) or not isinstance(content, str):
            raise LayersearchError(f'{where}: message {index} must be an object with "role" and "content" strings')
        if message["role"] not in _ROLES:
            raise LayersearchError(f"{where}: message {index} has role {message['role']!r} (choose from {', '.join(_ROLES)})")
        check_text(content, f"{where}: message {index}'s content")
        pairs.append((message["role"], content))
    return tuple(pairs)


def _text_parts(content: Any, where: str) -> Any:
    """A message's content: a string as it is, or OpenAI-style content parts (``[{"type": "text",
    "text": "..."}]``) joined into one; a part of another type (an image) is refused by name."""
    if not isinstance(content, list):
        return content
    texts = []
    for number, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text" or not isinstance(part.get("text"), str):
            shown = f"of type {kind!r}" if isinstance(kind, str) else "that is not a {\"type\": \"text\", \"text\": ...} object"
            raise LayersearchError(f"{where}: content part {number} is one {shown}; only text parts "
                                   '({"type": "text", "text": "..."}) or a content string can be decoded')
        texts.append(part["text"])
    return "".join(texts)


def _digest(content: Any) -> str:
    blob = json.dumps(content, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def _too_few(path: str, n: int, split: str | None, found: int, total: int) -> str:
    where = f"the {split} split" if split else "the file"
    need = math.ceil(n / FRACTIONS[split]) if split else n
    return (f"{path}: {n} prompt(s) asked from {where}, which holds {found} of the file's {total} distinct rows; "
            f"give at least about {need} rows (rows are split {', '.join(f'{k} {v:.0%}' for k, v in FRACTIONS.items())} "
            "by a hash of their content) or ask for fewer prompts")

