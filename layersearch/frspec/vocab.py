"""Token frequencies per tokenizer, and the draft vocabulary of the N most frequent tokens (FR-Spec).

The frequency table of a tokenizer is counted once, by tokenizing the *train* split of every
built-in prompt set (:func:`layersearch.data.load_prompts`; test prompts never), and cached as
JSON under :func:`~layersearch.models.loading.cache_root` ``/vocab/<tokenizer hash>.json``. The
hash covers the tokenizer's whole vocabulary (token -> id), so two tokenizers with the same
ids share a table and a changed one gets its own. The file is written whole (temporary file
and rename); a damaged, truncated or foreign one is counted again and replaced, never trusted.
A domain whose source package is missing is left out of the count (the file lists the domains
counted).

:func:`frequent_subset` turns a table into a :class:`~layersearch.frspec.head.VocabSubset`:
the ``n`` most frequent ids (ties by id), plus every special and end token, which a draft must
be able to propose (an end token drafted is an end token accepted).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from layersearch.common.checks import check_int
from layersearch.common.errors import LayersearchError
from layersearch.frspec.head import VocabSubset

logger = logging.getLogger(__name__)

KIND = "vocab-frequency"
FORMAT = 1
SPLIT = "train"
# At most this many prompts per domain: math generates as many as asked, the others have fewer.
PROMPTS_PER_DOMAIN = 200


@dataclass(frozen=True)
class FrequencyTable:
    """How often each token id occurs in the train prompts, for one tokenizer."""

    tokenizer: str  # tokenizer_hash of the tokenizer counted
    counts: tuple[tuple[int, int], ...]  # (id, count), most frequent first, ties by id; zero counts left out
    domains: tuple[str, ...]  # the prompt sets counted
    total: int  # tokens counted

    def ranked(self, vocab_size: int) -> list[int]:
        """Every id below ``vocab_size``, most frequent first (unseen ids last, by id)."""
        seen = [i for i, _ in self.counts if i < vocab_size]
        taken = set(seen)
        return seen + [i for i in range(vocab_size) if i not in taken]

    def to_dict(self) -> dict[str, Any]:
        """The cached JSON form."""
        return {
            "kind": KIND, "format": FORMAT, "tokenizer": self.tokenizer, "split": SPLIT,
            "domains": list(self.domains), "total": self.total, "counts": [list(pair) for pair in self.counts],
        }

    @classmethod
    def from_dict(cls, data: Any, tokenizer: str) -> "FrequencyTable":
        """Parse a cached table for ``tokenizer``; ValueError when anything is off."""
        if not isinstance(data, dict) or data.get("kind") != KIND or data.get("format") != FORMAT:
            raise ValueError("not a vocabulary frequency table of this format")
        if data.get("tokenizer") != tokenizer:
            raise ValueError("counted for another tokenizer")
        counts = tuple((int(i), int(c)) for i, c in data["counts"])
        if any(i < 0 or c < 1 for i, c in counts) or len({i for i, _ in counts}) != len(counts):
            raise ValueError("bad counts")
        if counts != tuple(sorted(counts, key=lambda pair: (-pair[1], pair[0]))):
            raise ValueError("counts out of order")
        domains = tuple(str(d) for d in data["domains"])
        total = int(data["total"])
        if total != sum(c for _, c in counts):
            raise ValueError("total does not match the counts")
        return cls(tokenizer, counts, domains, total)


def tokenizer_hash(tokenizer) -> str:
    """16 hex chars of sha256 over the tokenizer's vocabulary (token -> id, added tokens included)."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    blob = json.dumps(vocab, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def table_dir() -> Path:
    """The folder of cached frequency tables: ``cache_root()/vocab``."""
    from layersearch.models.loading import cache_root

    return cache_root() / "vocab"


def table_path(tokenizer) -> Path:
    """Where the frequency table of ``tokenizer`` is cached."""
    return table_dir() / f"{tokenizer_hash(tokenizer)}.json"


def frequency_table(tokenizer) -> FrequencyTable:
    """The cached frequency table of ``tokenizer``, counted (and cached) first if missing or damaged."""
    path = table_path(tokenizer)
    key = tokenizer_hash(tokenizer)
    try:
        return FrequencyTable.from_dict(json.loads(path.read_text(encoding="utf-8")), key)
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError) as exc:  # damaged or foreign: count again
        logger.warning("%s: unusable vocabulary frequency table (%s); counting again", path, exc)
    table = count_frequencies(tokenizer)
    _save(path, table)
    return table


def count_frequencies(tokenizer) -> FrequencyTable:
    """Count token ids over the train prompts of every built-in domain whose source is installed."""
    from layersearch.data import DOMAINS

    counts: Counter[int] = Counter()
    counted: list[str] = []
    reasons: list[str] = []
    for domain in DOMAINS:
        try:
            prompts = _train_prompts(domain)
        except LayersearchError as exc:
            reasons.append(str(exc))
            continue
        for prompt in prompts:
            counts.update(tokenizer(prompt.text, add_special_tokens=False)["input_ids"])
        counted.append(domain)
    if not counted:
        raise LayersearchError(f"no prompt set to count token frequencies from: {reasons[0]}")
    ranked = tuple(sorted(counts.items(), key=lambda pair: (-pair[1], pair[0])))
    return FrequencyTable(tokenizer_hash(tokenizer), ranked, tuple(counted), sum(counts.values()))


def frequent_subset(tokenizer, n: int, *, vocab_size: int, extra_ids: Iterable[int] = ()) -> VocabSubset:
    """The ``n`` most frequent ids of ``tokenizer`` below ``vocab_size`` (the model's head size),
    plus its special tokens and ``extra_ids`` (e.g. the model's end tokens)."""
    check_int(n, "the draft vocabulary size")
    if n >= vocab_size:
        raise LayersearchError(
            f"the draft vocabulary size must be below the model's vocabulary ({vocab_size}), got {n}; 0 means the full vocabulary"
        )
    top = frequency_table(tokenizer).ranked(vocab_size)[:n]
    specials = [*getattr(tokenizer, "all_special_ids", ()), *extra_ids]
    ids = sorted({*top, *(int(i) for i in specials if i is not None and 0 <= int(i) < vocab_size)})
    return VocabSubset(tuple(ids), tokenizer_hash(tokenizer), n)


def check_draft_vocab(loaded, n: int, what: str = "draft_vocab") -> int:
    """Refuse a draft vocabulary size ``n`` the loaded model cannot take (0: the full head, always
    fine); returns the model's vocabulary size. ``what`` names where ``n`` came from."""
    check_int(n, what, minimum=0)
    vocab_size = loaded.model.get_output_embeddings().weight.shape[0]
    if n >= vocab_size:
        raise LayersearchError(f"{what}: the draft vocabulary size must be below the model's vocabulary ({vocab_size}), "
                               f"got {n}; 0 means the full vocabulary", fields=what)
    return vocab_size


def draft_vocabulary(loaded, n: int, what: str = "draft_vocab") -> VocabSubset | None:
    """The draft vocabulary for ``drafter.vocab`` ``n`` of a loaded model (0: None, the full head):
    its tokenizer's ``n`` most frequent tokens plus its special and end tokens. ``what`` names
    where ``n`` came from in errors (the option, or a spec's field)."""
    vocab_size = check_draft_vocab(loaded, n, what)
    if n == 0:
        return None
    from layersearch.runtime.loop import eos_ids

    try:
        return frequent_subset(loaded.tokenizer, n, vocab_size=vocab_size, extra_ids=eos_ids(loaded.model))
    except LayersearchError as exc:
        raise LayersearchError(f"{what}: {exc}") from None


def _train_prompts(domain: str) -> tuple:
    """As many train prompts of ``domain`` as it has (at most PROMPTS_PER_DOMAIN)."""
    from layersearch.data import load_prompts

    best = load_prompts(domain, 1, split=SPLIT)  # a missing source package raises here
    # load_prompts refuses more prompts than a domain holds: find its largest count by bisection.
    low, high = 1, PROMPTS_PER_DOMAIN
    while low < high:
        middle = (low + high + 1) // 2
        try:
            best = load_prompts(domain, middle, split=SPLIT)
            low = middle
        except LayersearchError:
            high = middle - 1
    return best if len(best) == low else load_prompts(domain, low, split=SPLIT)


def _save(path: Path, table: FrequencyTable) -> None:
    """Cache ``table`` at ``path`` (whole or not at all); a cache that cannot be written is skipped."""
    from layersearch.common.jsonfile import write_json_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, table.to_dict())
    except (OSError, LayersearchError) as exc:
        logger.warning("could not cache the vocabulary frequency table at %s: %s", path, exc)
