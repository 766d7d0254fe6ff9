"""The demo's second table: the model as its own draft, on held-out code prompts.

The uniform int8 self-draft (every sub-layer and the head in int8), the best draft plan a search
found for SmolLM2-135M on the train split of the built-in code prompts (shipped as package data,
:data:`PLAN_FILE`; how it was searched is in its provenance and docs/results.md), and prompt
lookup falling back to that plan, measured side by side with plain ``generate`` and our prompt
lookup on the code domain's test split (held out from the plan's search); and the command to
run next, chosen from what the demo measured (:func:`suggestion`).
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

    return Path(str(files("layersearch.data").joinpath(*PLAN_FILE)))


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
#: The plan rows' ``generate`` options, by the start of their labels (bench's "ours: ..." rows).
PLAN_OPTIONS = {
    "ours: prompt-lookup": "--drafter prompt-lookup",
    f"ours: {INT8_LABEL}": "--draft-quant int8",
    "ours: searched plan": "--mask {plan}",
    "ours: hybrid (searched plan)": "--drafter hybrid --mask {plan}",
}


@dataclass(frozen=True)
class Suggestion:
    """The command to run next: the fastest configuration measured, on the prompts it was measured on."""

    command: str
    label: str
    end_to_end: float  # its measured speedup over plain generate, prefill included
    decode: float  # the same, decode phase
    prompts: str  # the prompt file the command reads


def suggestion(result: Any, plans: PlanTable, spec: str, tune_prompts: str, plan_prompts: str) -> Suggestion | None:
    """The fastest lossless configuration the demo measured, faster than plain generate end to end
    and in the decode phase on its prompts, as a ``generate`` command on those prompts
    (``spec``: the file ``result``'s spec was written to; ``tune_prompts``, ``plan_prompts``: files
    holding ``result``'s and ``plans``' held-out prompts); None when nothing was faster."""
    options = []
    kernels = f"--kernels {result.kernels}"
    if not result.selection.plain_chosen:
        row = next(r for r in result.selection.rows if r.label == result.selection.winner)
        options.append((row, f"--spec {spec} --prompts {tune_prompts} {kernels}", tune_prompts))
    for row in plans.rows:
        for start, words in PLAN_OPTIONS.items():
            if row.label.startswith(start):
                options.append((row, f"{words.format(plan=shipped_plan())} --lookahead static --max-draft {PLAN_MAX_DRAFT} "
                                     f"--prompts {plan_prompts} {kernels}", plan_prompts))
    fast = [(row, words, prompts) for row, words, prompts in options if row.identical and row.speedup is not None
            and row.end_to_end is not None and row.speedup > 1.0 and row.end_to_end > 1.0]
    if not fast:
        return None
    row, words, prompts = max(fast, key=lambda item: item[0].end_to_end)
    return Suggestion(f"layersearch generate {words}", row.label, row.end_to_end, row.speedup, prompts)
