"""Summarization prompts and long texts from the news articles that gensim ships.

Source: ``gensim/test/test_data/lee_background.cor`` in the gensim wheel (``pip install
gensim``): 300 Australian news articles, one per line (the Lee corpus). They come without
reference summaries, so a news article's lead sentence serves as its summary: an example
shows the article *without* its first sentence under ``Article:`` and that first sentence
under ``Summary:`` (a lead sentence states what the rest reports, the way CNN/DM
highlights do). Article bodies are cut to about 1,200 characters at a sentence end, so
a 1-shot prompt stays under 600 tokens (SmolLM2 tokenizer); :func:`long_text` uses the
articles whole.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from layersearch.common.checks import check_int
from layersearch.data._common import (
    Prompt,
    package_dir,
    pick,
    rng_for,
    clip,
    join_sentences,
    shipped_file,
    split_sentences,
)
from layersearch.common.errors import LayersearchError

DOMAIN = "summarization"
SHOTS = 1
BODY_CHARS = 1200  # longest article body in a prompt
CORPUS = "test/test_data/lee_background.cor"
INSTRUCTION = "Summarize the news article in one sentence."


def corpus_path() -> Path:
    """The Lee background corpus inside the installed gensim."""
    return shipped_file(package_dir("gensim", "gensim", DOMAIN), CORPUS, "gensim")


@lru_cache(maxsize=4)
def read_articles(path: str) -> tuple[str, ...]:
    """The non-empty articles of a one-article-per-line file, whitespace collapsed."""
    lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    return tuple(" ".join(line.split()) for line in lines if line.strip())


@lru_cache(maxsize=4)
def _pairs(path: str) -> tuple[tuple[int, str, str], ...]:
    """(article line number, clipped body, lead sentence) for articles of two or more sentences."""
    pairs = []
    for number, article in enumerate(read_articles(path)):
        sentences = split_sentences(article)
        if len(sentences) >= 2:
            pairs.append((number, join_sentences(sentences[1:], BODY_CHARS), sentences[0]))
    return tuple(pairs)


def prompts(n: int, seed: int, split: str | None = None) -> tuple[Prompt, ...]:
    """``n`` 1-shot summarization prompts; each ends with ``Summary:`` for the model to fill."""
    pairs = _pairs(str(corpus_path()))
    chosen = pick(
        len(pairs), n, SHOTS, rng_for(DOMAIN, seed), f"{DOMAIN} has {len(pairs)} articles",
        item_id=lambda i: f"{DOMAIN}/{pairs[i][0]}", split=split,
    )
    out = []
    for query, examples in chosen:
        blocks = [INSTRUCTION]
        blocks += [f"Article: {pairs[i][1]}\nSummary: {pairs[i][2]}" for i in examples]
        blocks.append(f"Article: {pairs[query][1]}\nSummary:")
        out.append(Prompt(DOMAIN, f"{DOMAIN}/{pairs[query][0]}", "\n\n".join(blocks)))
    return tuple(out)


def long_text(approx_chars: int, seed: int) -> str:
    """Whole news articles in a seeded order, joined by blank lines and cut to about
    ``approx_chars`` characters (at a sentence end where one is near)."""
    check_int(approx_chars, "approx_chars")
    articles = list(read_articles(str(corpus_path())))
    total = sum(len(a) + 2 for a in articles) - 2
    if approx_chars > total:
        raise LayersearchError(
            f"the news corpus has {total} characters: ask for at most that many, not {approx_chars}"
        )
    rng_for("long", seed).shuffle(articles)
    parts, length = [], -2
    for article in articles:
        parts.append(article)
        length += len(article) + 2
        if length >= approx_chars:
            break
    return clip("\n\n".join(parts), approx_chars)
