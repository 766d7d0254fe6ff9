"""Text-to-SQL prompts from the TPC-H queries in sqlglot's source distribution.

Source: ``tests/fixtures/optimizer/tpc-h/tpc-h.sql`` and the table files beside it
(``*.csv.gz``, whose header lines give the columns) in the sqlglot *source* package; the
wheel has no tests. The source package is not installed but kept as a file in the cache
folder (``$LAYERSEARCH_CACHE/data``, else ``~/.cache/layersearch/data``); fetch it once
from PyPI with::

    pip download --no-deps --no-binary :all: sqlglot==30.30.0 -d ~/.cache/layersearch/data

Any ``sqlglot-*.tar.gz`` there works (the newest version is used); the pinned version
keeps the text the same on every machine. Without it, :func:`prompts` raises a
LayersearchError that prints this command.

TPC-H gives 22 queries and no questions, so each query number has a one-sentence
question written here from the query's business purpose and literals. A prompt lists
the schema as comments, then 3 examples (question comment, query), then the query
question, ending on a new line for the model to write the SQL (3-shot, as for Spider2).
Only queries of at most :data:`SHOT_CHARS` characters serve as examples, which keeps a
prompt near 1,100 tokens (SmolLM2 tokenizer).
"""

from __future__ import annotations

import gzip
import re
import tarfile
from functools import lru_cache
from pathlib import Path

from layersearch.data._common import Prompt, cache_dir, pick, rng_for
from layersearch.common.errors import LayersearchError

DOMAIN = "sql"
SHOTS = 3
SHOT_CHARS = 650  # longest example query (after re-indenting)
SDIST_VERSION = "30.30.0"  # the version the fetch command pins
FIXTURES = "tests/fixtures/optimizer/tpc-h/"
ASK = "-- Write the SQL query for:"

# TPC-H ships no questions: one per query number, written from the query's purpose and its
# literal values, so a question names what the query filters on.
QUESTIONS = {
    1: (
        "For line items shipped at least 90 days before 1998-12-01, report per return flag "
        "and line status the total quantity, base price, discounted price and charge, the "
        "average quantity, price and discount, and the number of items."
    ),
    2: (
        "For each part of size 15 whose type ends in BRASS, find the suppliers in EUROPE with"
        " the lowest supply cost; show balance, supplier, nation, part key, manufacturer, "
        "address, phone and comment, top 100 by balance."
    ),
    3: (
        "List the 10 orders of BUILDING-segment customers placed before 1995-03-15 with items"
        " shipped after that date that have the highest revenue, with order date and ship "
        "priority."
    ),
    4: (
        "Count, per order priority, the orders placed in the three months from 1993-07-01 "
        "that have at least one item received after its commit date."
    ),
    5: (
        "For each nation in ASIA, total the 1994 revenue of orders whose customer and "
        "supplier are both from that nation, largest first."
    ),
    6: (
        "How much revenue came from discounts on items shipped in 1994 with a discount "
        "between 0.05 and 0.07 and a quantity under 24?"
    ),
    7: (
        "Show the revenue shipped between FRANCE and GERMANY (either way) per supplier "
        "nation, customer nation and year, for 1995 and 1996."
    ),
    8: (
        "Per year in 1995 and 1996, what share of the revenue from ECONOMY ANODIZED STEEL "
        "parts bought by customers in AMERICA went to suppliers from BRAZIL?"
    ),
    9: (
        "For parts with 'green' in their name, compute the profit (discounted price minus "
        "supply cost times quantity) per supplier nation and order year, newest year first."
    ),
    10: (
        "Find the 20 customers with the most revenue lost to returned items (flag R) on "
        "orders from the three months starting 1993-10-01, with balance, nation, address, "
        "phone and comment."
    ),
    11: (
        "List the parts whose stock value (supply cost times available quantity) at suppliers"
        " in GERMANY exceeds 0.01% of the total stock value in GERMANY, largest first."
    ),
    12: (
        "For ship modes MAIL and SHIP, count the high-priority (1-URGENT or 2-HIGH) and other"
        " items received late in 1994 that were shipped before their commit date."
    ),
    13: (
        "How many customers have each number of orders, counting customers without orders and"
        " ignoring orders whose comment mentions special requests?"
    ),
    14: (
        "What percentage of the revenue from items shipped in September 1995 came from PROMO "
        "parts?"
    ),
    15: (
        "Which supplier had the highest total revenue in the three months from 1996-01-01? "
        "Show key, name, address, phone and the revenue."
    ),
    16: (
        "Count the distinct suppliers per brand, type and size of parts not of Brand#45, not "
        "of type MEDIUM POLISHED and of size 49, 14, 23, 45, 19, 3, 36 or 9, leaving out "
        "suppliers with customer complaints."
    ),
    17: (
        "What is the average yearly revenue (total divided by 7) from items of Brand#23 parts"
        " in MED BOX containers with a quantity below 20% of that part's average quantity?"
    ),
    18: (
        "List the 100 orders with a total quantity over 300, with customer name and key, "
        "order key, date, total price and quantity, by total price descending then date."
    ),
    19: (
        "Total the discounted revenue of items delivered in person by AIR or AIR REG for "
        "Brand#12 small containers (quantity 1-11, size 1-5), Brand#23 medium containers "
        "(10-20, size 1-10) and Brand#34 large containers (20-30, size 1-15)."
    ),
    20: (
        "List the name and address of suppliers in CANADA whose stock of some part named "
        "'forest...' exceeds half the quantity of it they shipped in 1994."
    ),
    21: (
        "Find the 100 suppliers in SAUDI ARABIA most often the only late supplier of a multi-"
        "supplier order with status F, with the number of such orders."
    ),
    22: (
        "For customers with phone country code 13, 31, 23, 29, 30, 18 or 17, no orders and a "
        "balance above the average positive balance, count customers and total balances per "
        "code."
    ),
}

_HEADER = re.compile(r"-{5,}\s*\n--\s*TPC-H\s+(\d+)\s*\n-{5,}\s*\n")


def fetch_command(folder: Path | None = None) -> str:
    """The shell command that puts the sqlglot source package into the cache folder."""
    return (
        f"pip download --no-deps --no-binary :all: sqlglot=={SDIST_VERSION} "
        f"-d {folder or cache_dir()}"
    )


def _version(path: Path) -> tuple[int, ...]:
    """The numeric version of a ``sqlglot-X.Y.Z.tar.gz`` file name (non-numbers sort first)."""
    match = re.fullmatch(r"sqlglot-([\d.]+)\.tar\.gz", path.name)
    return tuple(int(part) for part in match.group(1).split(".") if part) if match else ()


def find_sdist(folder: Path | None = None) -> Path:
    """The newest sqlglot source package in the cache; LayersearchError with the fetch
    command if there is none."""
    folder = folder or cache_dir()
    found = sorted(folder.glob("sqlglot-*.tar.gz"), key=lambda p: (_version(p), p.name))
    if not found:
        raise LayersearchError(
            f"{DOMAIN} prompts need the sqlglot source package (its TPC-H test queries are "
            f"not in the wheel) in {folder}: fetch it once with `{fetch_command(folder)}`"
        )
    return found[-1]


def compact(query: str) -> str:
    """A query with blank lines dropped and each indentation step made two spaces."""
    lines = [line.rstrip().expandtabs(8) for line in query.strip("\n").splitlines() if line.strip()]
    widths = [len(line) - len(line.lstrip()) for line in lines]
    unit = min((w for w in widths if w), default=1)
    return "\n".join("  " * (w // unit) + line.strip() for line, w in zip(lines, widths))


def parse_queries(text: str) -> dict[int, str]:
    """Query number -> the original query of each block of a sqlglot TPC-H fixture file.

    A block is a ``-- TPC-H <n>`` banner, the query as written, then sqlglot's optimized
    form; the first statement (up to ``;``) is the one a person would write.
    """
    parts = _HEADER.split(text)
    return {int(number): compact(body.split(";", 1)[0]) for number, body in zip(parts[1::2], parts[2::2])}


@lru_cache(maxsize=2)
def read_sdist(path: str, stamp: tuple[float, int]) -> tuple[dict[int, str], tuple[str, ...]]:
    """(queries by number, schema lines ``table(col, ...)``) from a sqlglot source package.

    ``stamp`` (modification time, size) makes a replaced file be read again.
    """
    queries: dict[int, str] = {}
    schema: list[str] = []
    try:
        with tarfile.open(path, "r:gz") as archive:
            for member in archive:
                folder, _, name = member.name.partition(FIXTURES)
                if not name or "/" in folder.strip("/") or not member.isfile():
                    continue  # only <top>/tests/fixtures/optimizer/tpc-h/<file>
                handle = archive.extractfile(member)
                if handle is None:  # only for a member that is not a file, skipped above
                    continue
                if name == "tpc-h.sql":
                    queries = parse_queries(handle.read().decode("utf-8"))
                elif name.endswith(".csv.gz"):
                    header = gzip.GzipFile(fileobj=handle).readline().decode("utf-8").strip()
                    schema.append(f"{name[: -len('.csv.gz')]}({', '.join(header.split('|'))})")
    except (tarfile.TarError, OSError, EOFError, UnicodeDecodeError) as error:
        raise LayersearchError(f"cannot read the sqlglot source package {path}: {error}") from None
    if not queries:
        raise LayersearchError(
            f"the sqlglot source package {path} has no {FIXTURES}tpc-h.sql: "
            f"replace it with `{fetch_command(Path(path).parent)}`"
        )
    return queries, tuple(sorted(schema))


def prompts(n: int, seed: int, split: str | None = None) -> tuple[Prompt, ...]:
    """``n`` 3-shot text-to-SQL prompts; each ends after a question for the model to write SQL."""
    sdist = find_sdist()
    info = sdist.stat()
    queries, schema = read_sdist(str(sdist), (info.st_mtime, info.st_size))
    items = [(k, QUESTIONS[k], queries[k]) for k in sorted(queries) if k in QUESTIONS]
    chosen = pick(
        len(items), n, SHOTS, rng_for(DOMAIN, seed), f"{DOMAIN} has {len(items)} TPC-H queries",
        shot_ok=lambda i: len(items[i][2]) <= SHOT_CHARS,
        item_id=lambda i: f"{DOMAIN}/{items[i][0]}", split=split,
    )
    head = "\n".join(["-- Tables of the TPC-H database:", *(f"-- {line}" for line in schema)])
    out = []
    for query, examples in chosen:
        blocks = [head] if schema else []
        blocks += [f"{ASK} {items[i][1]}\n{items[i][2]};" for i in examples]
        blocks.append(f"{ASK} {items[query][1]}\n")
        out.append(Prompt(DOMAIN, f"{DOMAIN}/{items[query][0]}", "\n\n".join(blocks)))
    return tuple(out)
