"""What every prompt source shares: the Prompt value, finding packages and the cache, sampling.

Sources read files that installed packages ship, so a package is located with
``importlib.util.find_spec`` (no import: gensim or django would cost seconds and
pull in their dependencies) and a missing one becomes a one-line
:class:`LayersearchError` naming the pip package to install.
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from layersearch.common.checks import check_int
from layersearch.data.splits import in_split, shot_allowed
from layersearch.common.errors import LayersearchError


@dataclass(frozen=True)
class Prompt:
    """One few-shot prompt: its domain, a stable id within the domain, and the full text."""

    domain: str
    id: str
    text: str


def package_dir(module: str, pip_name: str, domain: str) -> Path:
    """The folder of installed package ``module``, found without importing it.

    Raises LayersearchError naming ``pip_name`` and the install command when it is absent.
    """
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a broken or half-removed install
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise missing_package(pip_name, domain)
    return Path(next(iter(spec.submodule_search_locations)))


def missing_package(pip_name: str, domain: str, detail: str = "") -> LayersearchError:
    """The error for a package that a domain's prompts need but is not installed."""
    why = f" ({detail})" if detail else ""
    return LayersearchError(
        f"{domain} prompts need the '{pip_name}' package, which is not installed{why}: "
        f"run `pip install {pip_name}`"
    )


def shipped_file(root: Path, relative: str, pip_name: str) -> Path:
    """``root/relative`` from an installed package; LayersearchError if this version lacks it."""
    path = root / relative
    if not path.is_file():
        raise LayersearchError(
            f"the installed '{pip_name}' has no {relative}: "
            f"reinstall it with `pip install --force-reinstall {pip_name}`"
        )
    return path


def cache_dir() -> Path:
    """Where downloaded sources live: ``$LAYERSEARCH_CACHE/data``, else ``~/.cache/layersearch/data``."""
    root = os.environ.get("LAYERSEARCH_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "layersearch"
    return base / "data"


def check_count(n: int) -> None:
    """Reject a prompt count that is not a positive int."""
    check_int(n, "the number of prompts")


def rng_for(domain: str, seed: int) -> random.Random:
    """A generator private to one domain and seed (string seeds hash the same on every run)."""
    return random.Random(f"layersearch.data/{domain}/{seed}")


def pick(
    size: int,
    n: int,
    shots: int,
    rng: random.Random,
    what: str,
    shot_ok: Callable[[int], bool] = lambda i: True,
    *,
    item_id: Callable[[int], str] | None = None,
    split: str | None = None,
) -> list[tuple[int, list[int]]]:
    """Choose ``n`` query items out of ``size`` and ``shots`` example items for each query.

    Examples come only from items that are no query of this set (so no prompt shows the
    answer of another) and that pass ``shot_ok`` (short enough to serve as an example).
    With a ``split`` (``item_id`` gives each item's stable id), queries are items of that
    split and examples items of ``train`` (see :mod:`layersearch.data.splits`); without
    one, every item may be either, and the draws are those of earlier versions.
    Returns ``[(query_index, [example_index, ...]), ...]``.
    """
    name = item_id or str
    query_ok = [in_split(name(i), split) for i in range(size)]
    example_ok = [shot_ok(i) and shot_allowed(name(i), split) for i in range(size)]
    eligible = sum(example_ok)
    candidates = sum(query_ok)
    both = sum(1 for i in range(size) if query_ok[i] and example_ok[i])
    # Queries that are also example items must leave ``shots`` of them unused.
    most = candidates - max(0, shots - (eligible - both)) if eligible >= shots else 0
    if n > most:
        where = f" in the {split} split" if split else ""
        raise LayersearchError(
            f"{what}: at most {most} prompts{where} with {shots}-shot examples, asked for {n}"
        )
    order = list(range(size))
    rng.shuffle(order)
    queries: list[int] = []
    spare = eligible
    for i in order:
        if len(queries) == n:
            break
        if not query_ok[i]:
            continue
        if example_ok[i]:
            if spare <= shots:  # keep enough items back to serve as examples
                continue
            spare -= 1
        queries.append(i)
    taken = set(queries)
    pool = [i for i in range(size) if i not in taken and example_ok[i]]
    return [(q, rng.sample(pool, shots)) for q in queries]


# Words whose trailing period does not end a sentence (news prose: titles, initials, firms).
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr st jr sr prof gen col lt sgt capt cmdr rev gov sen rep inc co corp ltd "
    "no vs etc jan feb mar apr aug sept sep oct nov dec u.s u.k u.n e.g i.e".split()
)
_BOUNDARY = re.compile(r"[.!?][\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s)")


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences on ., ! or ? followed by a capital, sparing abbreviations."""
    sentences, start = [], 0
    for match in _BOUNDARY.finditer(text):
        words = text[start : match.start() + 1].split()
        last = words[-1].rstrip(".").lower() if words else ""
        if last in _ABBREVIATIONS or (len(last) == 1 and last.isalpha()):
            continue
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters: at a sentence end if one lies in the
    last quarter, else at a word boundary."""
    if len(text) <= limit:
        return text
    head = text[: limit + 1]  # one more, so a sentence ending exactly at limit is seen
    ends = [m.end() for m in _SENTENCE_END.finditer(head) if m.end() <= limit]
    if ends and ends[-1] >= limit * 3 // 4:
        return head[: ends[-1]]
    head = head[:limit]
    space = head.rfind(" ")
    return (head[:space] if space > 0 else head).rstrip()


def join_sentences(sentences: Sequence[str], limit: int) -> str:
    """Whole sentences from the front while they fit in ``limit`` characters (at least one,
    clipped if it alone is too long)."""
    out: list[str] = []
    length = 0
    for sentence in sentences:
        extra = len(sentence) + (1 if out else 0)
        if out and length + extra > limit:
            break
        out.append(sentence)
        length += extra
    return clip(" ".join(out), limit)
