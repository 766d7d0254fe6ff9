"""The demo's second table: the model as its own draft, on held-out code prompts.

The uniform int8 self-draft (every sub-layer and the head in int8), the best draft plan a search
found for SmolLM2-135M on the train split of the built-in code prompts (shipped as package data,
:data:`PLAN_FILE`; how it was searched is in its provenance and docs/results.md), and prompt
lookup falling back to that plan, measured side by side with plain ``generate`` and our prompt
lookup on the code domain's test split (held out from the plan's search).
"""

from __future__ import annotations

from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable, Sequence

#: The searched draft plan of the embedded SmolLM2-135M, package data of ``layersearch.data``.
PLAN_FILE = ("plans", "smollm2-135m-code.json")
PLAN_PROMPTS = 3  # held-out code prompts of the plan rows
PLAN_MAX_DRAFT = 3  # static drafts of 3, as the int8 self-draft's results (docs/results.md)


def shipped_plan() -> Path:
    """The path of the searched plan shipped with the package (:data:`PLAN_FILE`)."""
    from importlib.resources import files

    plan = files("layersearch.data")
    for part in PLAN_FILE:
        plan = plan.joinpath(part)
    return Path(str(plan))


@dataclass(frozen=True)
class PlanTable:
    """The plan rows measured: the table's lines, its HeldOutRows and the prompts they decoded."""

    lines: tuple[str, ...]
    rows: tuple[Any, ...] = ()
    texts: tuple[str, ...] = ()


def plan_table(loaded: Any, new_tokens: int, kernels: str, say: Callable[[str], None]) -> PlanTable:
    """The model-as-its-own-draft rows (see the module docstring) of ``loaded`` as held-out table
    lines, with ``kernels``; one note line instead where ``loaded`` is not the model the plan was
    searched for. ``say`` gets a progress line."""
    from layersearch.data import load_prompts
    from layersearch.masks.mask import SkipMask
    from layersearch.tune.report import held_out_lines

    plan = SkipMask.load(shipped_plan())
    if plan.model is not None and plan.model.fingerprint != loaded.info.fingerprint:
        return PlanTable((f"(the shipped draft plan is for {plan.model.name}; no plan rows for {loaded.info.name})",))
    say(f"the model as its own draft: {PLAN_PROMPTS} held-out code prompts, plain generate measured again beside them")
    texts = tuple(p.text for p in load_prompts("code", PLAN_PROMPTS, split="test", tokenizer=loaded.tokenizer))
    rows = measure_plan_rows(loaded, plan, texts, new_tokens, kernels)
    lines = ("the model as its own draft (code test split, held out from the plan's search; static drafts of "
             f"{PLAN_MAX_DRAFT}; the plan: {plan.short_string()}):", *held_out_lines(rows))
    return PlanTable(lines, tuple(rows), texts)


def measure_plan_rows(loaded: Any, plan: Any, texts: Sequence[str], new_tokens: int, kernels: str) -> list[Any]:
    """Plain generate, our prompt lookup, the uniform int8 self-draft, ``plan`` and the hybrid
    (prompt lookup, else ``plan``) on ``texts``, interleaved (HeldOutRows)."""
    from layersearch.evaluation.bench import configs, run_domain, summarize
    from layersearch.masks.mask import SkipMask
    from layersearch.runtime.draft_policy import DraftPolicy
    from layersearch.tune.objective import with_kernels
    from layersearch.tune.select import held_out_row

    info = loaded.info
    searched = plan.with_model(info).with_provenance(label="searched plan")
    uniform = SkipMask.none(info.num_layers, info).kept_in_int8().with_provenance(label=INT8_LABEL)
    # The plan first: the hybrid falls back to the first mask (bench's rule, so `bench` reproduces these rows).
    rows = configs(loaded.model, [searched, uniform], DraftPolicy(PLAN_MAX_DRAFT), peers=(),
                   drafters=("prompt-lookup", "hybrid"), lookaheads=("static",))
    rows = [with_kernels(c, loaded.model, kernels) for c in rows]
    prompts = [loaded.tokenizer(text, return_tensors="pt").input_ids.to(loaded.model.device) for text in texts]  # [1, n] each
    measured = run_domain(rows, prompts, new_tokens, 1, lambda message: None, device=loaded.model.device)
    plain = measured[rows[0].name]
    return [held_out_row(c.name, summarize(c.name, measured[c.name], None, 0, None, plain=plain), drafts=i > 0)
            for i, c in enumerate(rows)]


INT8_LABEL = "int8 self-draft (all, head)"
