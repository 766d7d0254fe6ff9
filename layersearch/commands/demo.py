"""``layersearch demo``: ``tune`` on the embedded model with a small budget, on code prompts.

Code is where prompt lookup pays (a function's body repeats names from its signature and
docstring), so the demo shows a speedup found, checked on held-out prompts and written as a
spec that ``generate --spec`` runs.

Beside it, the model as its own draft: the uniform int8 self-draft (every sub-layer and the head
in int8), the best draft plan a search found for SmolLM2-135M on the train split of the built-in
code prompts (shipped as package data, :data:`PLAN_FILE`; how it was searched is in its
provenance and docs/results.md), and prompt lookup falling back to that plan, measured side by
side with plain ``generate`` and our prompt lookup on the code domain's test split (held out from
the plan's search).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from layersearch.commands.args import model_args

DEMO_PROMPTS = 40  # code prompts written to the demo's prompt file (about 8 land in the test split)
#: The searched draft plan of the embedded SmolLM2-135M, package data of ``layersearch.data``.
PLAN_FILE = ("plans", "smollm2-135m-code.json")
PLAN_PROMPTS = 3  # held-out code prompts of the plan rows
PLAN_MAX_DRAFT = 3  # static drafts of 3, as the int8 self-draft's results (docs/results.md)


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``demo``: its arguments."""
    p = sub.add_parser("demo", help="short demo on the embedded model: tune on code prompts, held-out speedup, a spec")
    model_args(p, threads=1)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--budget", type=float, default=60.0, help="search seconds (default 60)")
    p.add_argument("--out-dir", default="demo", help="folder for the prompt file, spec and report (default demo/)")
    p.set_defaults(command="demo")


def run(args: Any) -> int:
    """Write code prompts to a file, tune on them with a small budget, print the held-out table."""
    from layersearch.commands import tune
    from layersearch.commands.common import positive_int
    from layersearch.data import write_prompt_file
    from layersearch.tune import TuneSettings
    from layersearch.tune.report import held_out_table

    TuneSettings("-", args.budget, "demo", max_new_tokens=args.max_new_tokens)  # checks the numbers before any work
    if args.threads is not None:
        positive_int(args.threads, "--threads")
    folder = Path(args.out_dir)
    prompts = folder / "code_prompts.jsonl"
    write_prompt_file(prompts, "code", DEMO_PROMPTS)  # HumanEval-style prompts from the built-in code set
    quick = tune_args("--prompts", str(prompts), "--budget", str(args.budget), "--out", str(folder / "spec.json"),
                      "--name", "demo", "--storage", f"sqlite:///{folder / 'demo.db'}", "--train-prompts", "2",
                      "--test-prompts", "3", "--repeats", "1", "--finalists", "2")
    for name in ("model", "device", "dtype", "threads", "max_new_tokens"):
        setattr(quick, name, getattr(args, name))
    print(f"tuning on {prompts} for {args.budget:g} s (layersearch tune --prompts FILE does this on yours)", file=sys.stderr)
    result = tune.tune_from_args(quick)
    print(held_out_table(result), flush=True)
    print("\n".join(plan_lines(args, result.kernels)), flush=True)
    print(f"run it: layersearch generate --spec {folder / 'spec.json'} --prompt \"def fib(n):\"", flush=True)
    print(f"the plan: layersearch generate --mask {shipped_plan()} --lookahead static --max-draft {PLAN_MAX_DRAFT} "
          "--prompt \"def fib(n):\"", flush=True)
    return 0


def shipped_plan() -> Path:
    """The path of the searched plan shipped with the package (:data:`PLAN_FILE`)."""
    from importlib.resources import files

    return Path(str(files("layersearch.data").joinpath(*PLAN_FILE)))


def plan_lines(args: Any, kernels: str) -> list[str]:
    """The model-as-its-own-draft rows (see the module docstring) as held-out table lines, with
    ``kernels``; one note line instead where ``--model`` is not the model the plan was searched for."""
    from layersearch.commands.common import load
    from layersearch.masks.mask import SkipMask
    from layersearch.tune.report import held_out_lines

    loaded = load(args)
    plan = SkipMask.load(shipped_plan())
    if plan.model is not None and plan.model.fingerprint != loaded.info.fingerprint:
        return [f"(the shipped draft plan is for {plan.model.name}; no plan rows for {loaded.info.name})"]
    print(f"the model as its own draft: {PLAN_PROMPTS} held-out code prompts, plain generate measured again beside them",
          file=sys.stderr, flush=True)
    rows = measure_plan_rows(loaded, plan, args.max_new_tokens, kernels)
    return ["the model as its own draft (code test split, held out from the plan's search; static drafts of "
            f"{PLAN_MAX_DRAFT}; the plan: {plan.short_string()}):", *held_out_lines(rows)]


def measure_plan_rows(loaded: Any, plan: Any, new_tokens: int, kernels: str) -> list[Any]:
    """Plain generate, our prompt lookup, the uniform int8 self-draft, ``plan`` and the hybrid
    (prompt lookup, else ``plan``) on the code domain's test prompts, interleaved (HeldOutRows)."""
    from layersearch.evaluation.bench import configs, run_domain, summarize
    from layersearch.data import load_prompts
    from layersearch.masks.mask import SkipMask
    from layersearch.runtime.drafting import DraftPolicy
    from layersearch.tune.objective import with_kernels
    from layersearch.tune.select import held_out_row

    info = loaded.info
    searched = plan.with_model(info).with_provenance(label="searched plan")
    uniform = SkipMask.none(info.num_layers, info).kept_in_int8().with_provenance(label="int8 self-draft (all, head)")
    # The plan first: the hybrid falls back to the first mask (bench's rule, so `bench` reproduces these rows).
    rows = configs(loaded.model, [searched, uniform], DraftPolicy(PLAN_MAX_DRAFT), peers=(),
                   drafters=("prompt-lookup", "hybrid"), lookaheads=("static",))
    rows = [with_kernels(c, loaded.model, kernels) for c in rows]
    prompts = [loaded.tokenizer(p.text, return_tensors="pt").input_ids.to(loaded.model.device)  # [1, n] each
               for p in load_prompts("code", PLAN_PROMPTS, split="test", tokenizer=loaded.tokenizer)]
    measured = run_domain(rows, prompts, new_tokens, 1, lambda message: None, device=loaded.model.device)
    plain = measured[rows[0].name]
    return [held_out_row(c.name, summarize(c.name, measured[c.name], None, 0, None, plain=plain)) for c in rows]


def tune_args(*argv: str) -> argparse.Namespace:
    """``tune``'s arguments as its own parser reads ``argv`` (its defaults for the rest)."""
    from layersearch.commands import tune

    parser = argparse.ArgumentParser(prog="layersearch")
    tune.add_parser(parser.add_subparsers(dest="command"), argparse.ArgumentParser)
    return parser.parse_args(["tune", *argv])

