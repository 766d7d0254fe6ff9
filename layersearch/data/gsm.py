"""Math reasoning prompts: GSM8K-style word problems that reasoning-gym generates offline.

Source: ``reasoning_gym.create_dataset("gsm_symbolic", size=N, seed=s)`` (``pip install
reasoning-gym``), which instantiates GSM8K problem templates with fresh numbers and
gives each a worked solution ending in ``#### <answer>``. Item ``i`` of a seed is the
same whatever the size, so ids ``math/<seed>-<i>`` are stable. Queries are items (of a split:
:mod:`layersearch.data.splits`)
``0..n-1``; the 5 examples of each prompt come from the next :data:`POOL` items, only
those short enough (:data:`SHOT_CHARS`) to keep a 5-shot prompt near 1,000 tokens.
"""

from __future__ import annotations

import re

from layersearch.data._common import Prompt, missing_package, rng_for
from layersearch.data.splits import in_split, shot_allowed
from layersearch.common.errors import LayersearchError

DOMAIN = "math"
SHOTS = 5
POOL = 40  # items generated beyond the queries to draw examples from
SHOT_CHARS = 700  # longest question + solution used as an example
INSTRUCTION = "Solve the math problem step by step. Give the final answer after ####."
# reasoning-gym appends an instruction for its own answer checker; GSM8K has none.
_SUFFIX = re.compile(r"\s*Give the result as your final answer\.\s*Do not include units\.\s*$")


def _generate(size: int, seed: int) -> list[tuple[str, str]]:
    """(question, worked solution) for items ``0..size-1`` of the seed's gsm_symbolic set."""
    try:
        from reasoning_gym import create_dataset
    except ImportError as error:
        raise missing_package("reasoning-gym", DOMAIN, f"import failed: {error}") from None
    try:
        dataset = create_dataset("gsm_symbolic", size=size, seed=seed)
    except (KeyError, ValueError) as error:  # a reasoning-gym without this generator
        raise LayersearchError(
            f"the installed reasoning-gym cannot make gsm_symbolic problems ({error}): "
            "run `pip install --upgrade reasoning-gym`"
        ) from None
    items = []
    for entry in dataset:
        solution = entry["metadata"].get("answer_cot") or f"#### {entry['answer']}"
        items.append((_SUFFIX.sub("", entry["question"]), solution.strip()))
    return items


def prompts(n: int, seed: int, split: str | None = None) -> tuple[Prompt, ...]:
    """``n`` 5-shot math prompts; each ends with ``Answer:`` for the model to fill.

    Items are those of the seed's generated set, so ids (and splits) include the seed.
    """
    queries, spare = _indices(n, seed, split)
    items = _generate(max(spare) + 1, seed)
    spare = sorted(spare, key=lambda i: len(items[i][0]) + len(items[i][1]))
    pool = [i for i in spare if len(items[i][0]) + len(items[i][1]) <= SHOT_CHARS]
    pool = sorted(pool if len(pool) >= SHOTS else spare[:SHOTS])  # rare: too few short ones
    rng = rng_for(DOMAIN, seed)
    out = []
    for query in queries:
        blocks = [INSTRUCTION]
        blocks += [f"Question: {items[i][0]}\nAnswer: {items[i][1]}" for i in rng.sample(pool, SHOTS)]
        blocks.append(f"Question: {items[query][0]}\nAnswer:")
        out.append(Prompt(DOMAIN, _item_id(seed, query), "\n\n".join(blocks)))
    return tuple(out)


def _item_id(seed: int, index: int) -> str:
    return f"{DOMAIN}/{seed}-{index}"


def _indices(n: int, seed: int, split: str | None) -> tuple[list[int], list[int]]:
    """(query items, example pool): without a split, items ``0..n-1`` and the next POOL;
    with one, the first ``n`` items of that split and the next POOL ``train`` items."""
    if split is None:
        return list(range(n)), list(range(n, n + POOL))
    queries: list[int] = []
    index = 0
    while len(queries) < n:
        if in_split(_item_id(seed, index), split):
            queries.append(index)
        index += 1
    spare: list[int] = []
    while len(spare) < POOL:
        if shot_allowed(_item_id(seed, index), split):
            spare.append(index)
        index += 1
    return queries, spare
