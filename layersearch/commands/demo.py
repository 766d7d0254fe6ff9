"""``layersearch demo``: ``tune`` on the embedded model with a small budget, on code prompts.

Code is where prompt lookup pays (a function's body repeats names from its signature and
docstring), so the demo shows a speedup found, checked on held-out prompts and written as a
spec that ``generate --spec`` runs.

Beside it, the model as its own draft (:mod:`layersearch.tune.demo`): the uniform int8
self-draft, the searched draft plan shipped with the package, and prompt lookup falling back to
it, on held-out code prompts. Last the command to run next, chosen from what the demo measured
(:func:`suggestion`).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layersearch.commands.args import model_args
from layersearch.tune.demo import INT8_LABEL, PLAN_MAX_DRAFT, PlanTable, shipped_plan

DEMO_PROMPTS = 40  # code prompts written to the demo's prompt file (about 8 land in the test split)
DEMO_BUDGET = 90.0  # seconds of search: the mask pool and the trials
# Held-out repeats (the median counts): on a loaded 2-core machine one repeat of a 48-token
# generation swings by 2x, enough to rank prompt lookup below transformers' when it is not.
DEMO_REPEATS = 3


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``demo``: its arguments."""
    p = sub.add_parser("demo", help="short demo on the embedded model: tune on code prompts, held-out speedup, a spec")
    model_args(p, threads=1)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--budget", type=float, default=DEMO_BUDGET,
                   help=f"search seconds: the mask pool and the trials (default {DEMO_BUDGET:g}; the latency profile "
                        "before and the held-out measurement after come on top)")
    p.add_argument("--out-dir", default="demo", help="folder for the prompt files, spec and report (default demo/)")
    p.set_defaults(command="demo")


def run(args: Any) -> int:
    """Write code prompts to a file, tune on them with a small budget, print the held-out tables
    and the fastest measured configuration as the command to run next."""
    from layersearch.commands import tune
    from layersearch.commands.common import load, positive_int
    from layersearch.data import write_prompt_file
    from layersearch.tune import TuneSettings
    from layersearch.tune.demo import plan_table
    from layersearch.tune.report import held_out_table

    TuneSettings("-", args.budget, "demo", max_new_tokens=args.max_new_tokens)  # checks the numbers before any work
    if args.threads is not None:
        positive_int(args.threads, "--threads")
    folder = Path(args.out_dir)
    prompts = folder / "code_prompts.jsonl"
    spec = folder / "spec.json"
    write_prompt_file(prompts, "code", DEMO_PROMPTS)  # HumanEval-style prompts from the built-in code set
    quick = tune_args("--prompts", str(prompts), "--budget", str(args.budget), "--out", str(spec),
                      "--name", "demo", "--storage", f"sqlite:///{folder / 'demo.db'}", "--train-prompts", "2",
                      "--test-prompts", "3", "--repeats", str(DEMO_REPEATS), "--finalists", "3")
    for name in ("model", "device", "dtype", "threads", "max_new_tokens"):
        setattr(quick, name, getattr(args, name))
    say(f"tuning on {prompts} (layersearch tune --prompts FILE does this on yours): a latency profile, then a "
        f"{args.budget:g} s search budget for the mask pool and the trials, then the held-out measurement")
    result = tune.tune_from_args(quick)
    print(held_out_table(result), flush=True)
    plans = plan_table(load(args), args.max_new_tokens, result.kernels, say)
    print("\n".join(plans.lines), flush=True)
    tune_held_out, plan_held_out = folder / "held_out.jsonl", folder / "plan_held_out.jsonl"
    write_prompts(tune_held_out, result.test_texts)
    write_prompts(plan_held_out, plans.texts)
    chosen = suggestion(result, plans, str(spec), str(tune_held_out), str(plan_held_out))
    if chosen is None:
        print("run next: nothing measured faster than plain generate here; plain decoding: "
              f"layersearch generate --baseline --prompts {shlex.quote(str(tune_held_out))}", flush=True)
    else:
        print(f"run next (the fastest measured, {chosen.label}: {chosen.end_to_end:.2f}x plain generate end to end, "
              f"{chosen.decode:.2f}x in the decode phase, on the prompts of {chosen.prompts}; --baseline decodes them "
              f"plain):\n  {chosen.command}", flush=True)
    return 0


#: The plan rows' ``generate`` options, by the start of their labels (bench's "ours: ..." rows).
PLAN_OPTIONS = {  # the rules bench gave them: prompt lookup HF's schedule, the hybrid the policy's confidence rule
    "ours: prompt-lookup": "--drafter prompt-lookup --lookahead heuristic --max-draft 4",
    f"ours: {INT8_LABEL}": f"--draft-quant int8 --lookahead static --max-draft {PLAN_MAX_DRAFT}",
    "ours: searched plan": f"--mask {{plan}} --lookahead static --max-draft {PLAN_MAX_DRAFT}",
    "ours: hybrid (searched plan)": f"--drafter hybrid --mask {{plan}} --lookahead confidence --max-draft {PLAN_MAX_DRAFT}",
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
    quote = shlex.quote
    options = []
    kernels = f"--kernels {result.kernels}"
    if not result.selection.plain_chosen:
        row = next(r for r in result.selection.rows if r.label == result.selection.winner)
        options.append((row, f"--spec {quote(spec)} --prompts {quote(tune_prompts)} {kernels}", tune_prompts))
    for row in plans.rows:
        for start, words in PLAN_OPTIONS.items():
            if row.label.startswith(start):
                options.append((row, f"{words.format(plan=quote(str(shipped_plan())))} --prompts {quote(plan_prompts)} {kernels}", plan_prompts))
                break
    fast = [(row, words, prompts) for row, words, prompts in options if row.identical and row.speedup is not None
            and row.end_to_end is not None and row.speedup > 1.0 and row.end_to_end > 1.0]
    if not fast:
        return None
    row, words, prompts = max(fast, key=lambda item: item[0].end_to_end)
    return Suggestion(f"layersearch generate {words}", row.label, row.end_to_end, row.speedup, prompts)


def write_prompts(path: Path, texts: Any) -> None:
    """A prompt file (``{"prompt": ...}`` per line) of ``texts``, written atomically (the demo's own folder)."""
    import json

    from layersearch.common.outputs import write_output

    write_output(path, "".join(json.dumps({"prompt": text}) + "\n" for text in texts), "--out-dir")


def say(message: str) -> None:
    """A progress line on stderr."""
    print(message, file=sys.stderr, flush=True)


def tune_args(*argv: str) -> argparse.Namespace:
    """``tune``'s arguments as its own parser reads ``argv`` (its defaults for the rest)."""
    from layersearch.commands import tune

    parser = argparse.ArgumentParser(prog="layersearch")
    tune.add_parser(parser.add_subparsers(dest="command"), argparse.ArgumentParser)
    return parser.parse_args(["tune", *argv])

