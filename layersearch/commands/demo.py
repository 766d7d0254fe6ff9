"""``layersearch demo``: ``tune`` on the embedded model with a small budget, on code prompts.

Code is where prompt lookup pays (a function's body repeats names from its signature and
docstring), so the demo shows a speedup found, checked on held-out prompts and written as a
spec that ``generate --spec`` runs.

Beside it, the model as its own draft (:mod:`layersearch.tune.demo`): the uniform int8
self-draft, the searched draft plan shipped with the package, and prompt lookup falling back to
it, on held-out code prompts. Last the command to run next, chosen from what the demo measured
(:func:`suggestion`).

Every argument is checked, and the model loaded, before the demo writes anything in its folder.
A second demo in the same folder resumes the newest study of ``OUT_DIR/demo.db`` (saying so);
``--fresh`` starts a new one beside it (``demo-2``, ``demo-3``...), keeping the earlier ones.
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
DEMO_TRAIN, DEMO_TEST = 2, 3  # train prompts each trial decodes, held-out prompts the finalists decode
STUDY = "demo"  # the first study's name; --fresh makes demo-2, demo-3...


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``demo``: its arguments."""
    p = sub.add_parser("demo", help="short demo on the embedded model: tune on code prompts, held-out speedup, a spec")
    model_args(p, threads=1)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--budget", type=float, default=DEMO_BUDGET,
                   help=f"search seconds: the mask pool and the trials (default {DEMO_BUDGET:g}; the latency profile "
                        "before and the held-out measurement after come on top)")
    p.add_argument("--out-dir", default="demo", help="folder for the prompt files, spec, report and study (default demo/)")
    p.add_argument("--fresh", action="store_true",
                   help=f"start a new study in OUT_DIR/demo.db ({STUDY}-2, {STUDY}-3...) instead of resuming the newest; "
                        "the earlier ones stay")
    p.set_defaults(command="demo")


def run(args: Any) -> int:
    """Write code prompts to a file, tune on them with a small budget, print the held-out tables
    and the fastest measured configuration as the command to run next."""
    from layersearch.commands.common import load, positive_int
    from layersearch.commands.tune_options import tune_from_options
    from layersearch.common.outputs import check_output_folder
    from layersearch.data import write_prompt_file
    from layersearch.tune.demo import plan_table
    from layersearch.tune.report import held_out_table

    settings = demo_settings(args)  # checks the numbers before any work
    if args.threads is not None:
        positive_int(args.threads, "--threads")
    folder = Path(args.out_dir)
    check_output_folder(folder, "--out-dir")  # a file, /proc: refused before the model loads
    prompts, spec = folder / "code_prompts.jsonl", folder / "spec.json"
    study = demo_study(folder, args.fresh)
    loaded = load(args)  # --model, --device, --dtype: a bad one is refused before anything is written
    check_study(study, settings, str(prompts), loaded.info.fingerprint)
    if study.resumed:
        say(f"resuming study {study.name} in {study.file} ({study.trials} trials); --fresh starts a new one")
    elif args.fresh and study.name != STUDY:
        say(f"starting study {study.name} in {study.file} (--fresh; the earlier studies stay)")
    write_prompt_file(prompts, "code", DEMO_PROMPTS)  # HumanEval-style prompts from the built-in code set
    quick = tune_args("--prompts", str(prompts), "--budget", str(args.budget), "--out", str(spec),
                      "--name", study.name, "--storage", study.storage, "--train-prompts", str(DEMO_TRAIN),
                      "--test-prompts", str(DEMO_TEST), "--repeats", str(DEMO_REPEATS), "--finalists", "3")
    for name in ("model", "device", "dtype", "threads", "max_new_tokens"):
        setattr(quick, name, getattr(args, name))
    say(f"tuning on {prompts} (layersearch tune --prompts FILE does this on yours): a latency profile, then a "
        f"{args.budget:g} s search budget for the mask pool and the trials, then the held-out measurement")
    result = tune_from_options(quick, lambda: loaded, say)
    print(held_out_table(result), flush=True)
    plans = plan_table(loaded, args.max_new_tokens, result.kernels, say)
    print("\n".join(plans.lines), flush=True)
    tune_held_out, plan_held_out = folder / "held_out.jsonl", folder / "plan_held_out.jsonl"
    write_prompts(tune_held_out, result.test_texts)
    write_prompts(plan_held_out, plans.texts)
    chosen = suggestion(result, plans, str(spec), str(tune_held_out), str(plan_held_out))
    print(next_line(chosen, str(tune_held_out)), flush=True)
    return 0


def demo_settings(args: Any) -> Any:
    """The tune settings the demo runs with (its budget and new tokens checked; the prompt file named later)."""
    from layersearch.tune import TuneSettings

    return TuneSettings("-", args.budget, STUDY, max_new_tokens=args.max_new_tokens, train_prompts=DEMO_TRAIN,
                        test_prompts=DEMO_TEST, repeats=DEMO_REPEATS)


@dataclass(frozen=True)
class DemoStudy:
    """The study a demo searches in: its name, storage URL and file, and what it already holds."""

    name: str
    storage: str
    file: str
    resumed: bool  # a study of that name is there already
    trials: int = 0  # its finished trials


def demo_study(folder: Path, fresh: bool) -> DemoStudy:
    """The demo's study in ``folder``/demo.db: the newest demo study there, resumed; with ``fresh``
    (or none there) a new name after the newest (:data:`STUDY`, then ``demo-2``, ``demo-3``...).
    Only reads: a demo.db that is no study storage is refused, never replaced."""
    file = folder / "demo.db"
    url = f"sqlite:///{file}"
    numbers = {_study_number(name): name for name in _study_names(url)}
    numbers.pop(0, None)  # another tool's study in the file: not the demo's
    if fresh or not numbers:
        newest = max(numbers, default=0)
        return DemoStudy(STUDY if newest == 0 else f"{STUDY}-{newest + 1}", url, str(file), False)
    name = numbers[max(numbers)]
    trials = sum(1 for t in _load(url, name).get_trials(deepcopy=False) if t.state.is_finished())
    return DemoStudy(name, url, str(file), True, trials)


def _study_names(url: str) -> list[str]:
    """The names of the studies in the storage ``url`` (none when its file is absent)."""
    import optuna

    from layersearch.study.storage import open_storage, quiet_warnings, storage_location

    location = storage_location(url)
    if not location.exists():
        return []
    with quiet_warnings():
        return list(optuna.get_all_study_names(open_storage(location, read_only=True)))


def _load(url: str, name: str) -> Any:
    """The study ``name`` in the storage ``url``, opened read-only."""
    import optuna

    from layersearch.study.storage import open_storage, quiet_warnings, storage_location

    with quiet_warnings():
        return optuna.load_study(study_name=name, storage=open_storage(storage_location(url), read_only=True))


def _study_number(name: str) -> int:
    """1 for :data:`STUDY`, N for ``demo-N`` (N >= 2), 0 for any other name."""
    if name == STUDY:
        return 1
    prefix, _, number = name.partition("-")
    return int(number) if prefix == STUDY and number.isdigit() and not number.startswith("0") and int(number) >= 2 else 0


def check_study(study: DemoStudy, settings: Any, prompts: str, fingerprint: str) -> None:
    """Refuse to resume ``study`` when it was made for another model or other sizes (before the
    demo writes anything), pointing at ``--fresh``."""
    if not study.resumed:
        return
    from layersearch.data.user import domain_for
    from layersearch.study.storage import storage_location
    from layersearch.tune.run import study_identity
    from layersearch.tune.study import check_identity

    identity = study_identity(settings, domain_for(prompts), None, fingerprint)
    check_identity(_load(study.storage, study.name), identity, storage_location(study.storage),
                   "--fresh starts a new study beside it")


def next_line(chosen: "Suggestion | None", tune_prompts: str) -> str:
    """The demo's last line: the command to run next, ranked by the tables' decode column."""
    if chosen is None:
        return ("run next: nothing measured faster than plain generate here; plain decoding: "
                f"layersearch generate --baseline --prompts {shlex.quote(tune_prompts)}")
    return (f"run next (the highest of the tables' decode column, {chosen.label}: {chosen.decode:.2f}x plain generate "
            f"in the decode phase, {chosen.end_to_end:.2f}x end to end, on the prompts of {chosen.prompts}; --baseline "
            f"decodes them plain):\n  {chosen.command}")


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
    """The lossless configuration highest in the tables' decode column (what the user sees),
    among those faster than plain generate end to end and in the decode phase on their prompts,
    as a ``generate`` command on those prompts
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
    row, words, prompts = max(fast, key=lambda item: item[0].speedup)  # the "decode" column of both tables
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

