"""Spec-Bench's question set as prompt sources: ``spec-bench:<group>``.

Spec-Bench (Xia et al. 2024; github.com/hemingkx/Spec-Bench, ``data/spec_bench/question.jsonl``)
has 480 rows ``{"question_id", "category", "turns": [...]}``: MT-bench's eight categories
(two turns each) and 80 one-turn questions of translation, summarization, qa,
math_reasoning and rag. The project does not ship the file; users pass its path.

Its evaluation groups the categories as in :data:`GROUPS` (``mt_bench`` pools the eight
MT-bench categories). As a prompt source a question is its first turn; the stable id is
``spec-bench:<category>/<question_id>``, which fixes its split
(:mod:`layersearch.data.splits`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from layersearch.data._common import Prompt, rng_for
from layersearch.data.splits import in_split
from layersearch.common.errors import LayersearchError
from layersearch.common.inputs import parse_json

PREFIX = "spec-bench:"
MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
#: Spec-Bench's report groups, in its order ("overall" pools every question).
GROUPS: tuple[str, ...] = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")
DOMAINS: tuple[str, ...] = tuple(PREFIX + g for g in GROUPS)


@dataclass(frozen=True)
class Question:
    """One Spec-Bench question: its id, category and the user turns in order."""

    question_id: int
    category: str
    turns: tuple[str, ...]

    @property
    def group(self) -> str:
        """The report group: ``mt_bench`` for the eight MT-bench categories, else the category."""
        return "mt_bench" if self.category in MT_BENCH else self.category

    @property
    def item_id(self) -> str:
        """The stable id that fixes the question's split."""
        return f"{PREFIX}{self.category}/{self.question_id}"


def read_questions(path: str | os.PathLike[str]) -> tuple[Question, ...]:
    """Every question of a Spec-Bench ``question.jsonl``; LayersearchError names a bad line."""
    from layersearch.common.inputs import check_regular_file

    path = check_regular_file(path, "Spec-Bench question")  # a FIFO would block the reader below
    try:
        info = path.stat()
    except OSError as exc:
        raise LayersearchError(f"cannot read the Spec-Bench question file {path}: {exc.strerror}") from None
    return _read(str(path), (info.st_mtime, info.st_size))


@lru_cache(maxsize=4)
def _read(path: str, stamp: tuple[float, int]) -> tuple[Question, ...]:
    """Parse the file (``stamp`` makes a changed file be read again)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise LayersearchError(f"cannot read the Spec-Bench question file {path}: {exc}") from None
    questions = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        row = parse_json(line, f"{path}:{number}")  # bounded, finite numbers, valid Unicode (the turns are prompts)
        turns = row.get("turns") if isinstance(row, dict) else None
        if (
            not isinstance(row, dict)
            or isinstance(row.get("question_id"), bool)
            or not isinstance(row.get("question_id"), int)
            or not isinstance(row.get("category"), str)
            or not isinstance(turns, list)
            or not turns
            or not all(isinstance(t, str) for t in turns)
        ):
            raise LayersearchError(
                f'{path}:{number}: expected {{"question_id": int, "category": str, "turns": [str, ...]}}'
            )
        questions.append(Question(row["question_id"], row["category"], tuple(turns)))
    if not questions:
        raise LayersearchError(f"{path}: no questions")
    return tuple(questions)


def select(
    questions: tuple[Question, ...],
    categories: tuple[str, ...] | None = None,
    limit: int | None = None,
    split: str | None = None,
) -> tuple[Question, ...]:
    """Questions of the given categories or groups (None: all), of ``split`` (None: any),
    at most ``limit`` per category, in file order."""
    known = set(GROUPS) | {q.category for q in questions}
    wanted = set(categories or ())
    unknown = sorted(wanted - known)
    if unknown:
        raise LayersearchError(
            f"unknown Spec-Bench categories {', '.join(unknown)}: choose from {', '.join(sorted(known))}"
        )
    taken: dict[str, int] = {}
    out = []
    for q in questions:
        if wanted and q.category not in wanted and q.group not in wanted:
            continue
        if not in_split(q.item_id, split) or (limit is not None and taken.get(q.category, 0) >= limit):
            continue
        taken[q.category] = taken.get(q.category, 0) + 1
        out.append(q)
    return tuple(out)


def prompts(path: str | os.PathLike[str], group: str, n: int, seed: int, split: str | None = None) -> tuple[Prompt, ...]:
    """``n`` first-turn prompts of a Spec-Bench group, chosen by ``seed`` from ``split``."""
    if group not in GROUPS:
        raise LayersearchError(f"unknown Spec-Bench group {group!r}: choose one of {', '.join(GROUPS)}")
    pool = list(select(read_questions(path), (group,), split=split))
    if n > len(pool):
        where = f" in the {split} split" if split else ""
        raise LayersearchError(f"{PREFIX}{group} has {len(pool)} questions{where}, asked for {n}")
    chosen = rng_for(PREFIX + group, seed).sample(pool, n)
    return tuple(Prompt(PREFIX + group, q.item_id, q.turns[0]) for q in chosen)
