"""``layersearch bench --spec-bench FILE``: Spec-Bench answer files and its per-group table.

Methods: ``vanilla`` (transformers' plain greedy ``generate``) and ``ours`` with each mask
(``--skip-ratios`` uniform masks and ``--masks`` files). Each question is answered by every
method back to back (so drift on a shared machine hits them alike); each method's answers
go to ``DIR/<model>-<method>.jsonl`` in Spec-Bench's row format.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from layersearch.errors import LayersearchError
from layersearch.jsonfile import write_json_atomic


def run(args: Any, loaded: Any) -> int:
    """Answer the chosen questions with vanilla and each mask, write the files, print the tables."""
    from layersearch.data.spec_bench import read_questions, select
    from layersearch.runtime.baseline import hf_generate
    from layersearch.runtime.decoder import SpeculativeDecoder, eos_ids
    from layersearch.runtime.drafting import DraftPolicy
    from layersearch.specbench import (
        answer_question, answer_row, baseline_token_counter, format_table, group_table, same_answers, write_answers,
    )

    if not args.answers:
        raise LayersearchError("--spec-bench needs --answers DIR (where the answer files go)")
    if args.limit is not None and args.limit < 1:
        raise LayersearchError(f"--limit must be >= 1, got {args.limit}")
    answers = _answers_folder(args.answers)
    masks = _labelled_masks(args, loaded.info)
    if not masks:
        raise LayersearchError("no method of ours to run: give --skip-ratios or --masks")
    categories = tuple(c for c in (args.categories or "").split(",") if c) or None
    questions = select(read_questions(args.spec_bench), categories, args.limit, args.split)
    if not questions:
        raise LayersearchError("no Spec-Bench question matches --categories / --split")
    model, tokenizer = loaded.model, loaded.tokenizer
    _check_lengths(args, loaded, questions)  # every question before any answer
    policy = DraftPolicy(args.max_draft, args.draft_threshold, args.adaptive_threshold)
    methods = {"vanilla": lambda ids, n: hf_generate(model, ids, n)}
    for label, mask in masks:
        methods[f"ours-{label}"] = SpeculativeDecoder(model, mask, policy=policy).generate
    stop = eos_ids(model)
    model_id = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(loaded.info.name).name)  # a file name, even for a local folder
    rows: dict[str, list] = {name: [] for name in methods}
    for number, question in enumerate(questions, 1):
        for name, generate in methods.items():
            turns = answer_question(question, generate, tokenizer, args.max_new_tokens, stop_ids=stop,
                                    vanilla=name == "vanilla", device=model.device)
            rows[name].append(answer_row(question, turns, f"{model_id}-{name}"))
        _say(f"question {number}/{len(questions)} ({question.category} {question.question_id}) answered by {len(methods)} methods")
    answers.mkdir(exist_ok=True)  # checked above: an existing folder, or a new one in an existing folder
    paths = {name: write_answers(answers / f"{model_id}-{name}.jsonl", method_rows)
             for name, method_rows in rows.items()}
    count = baseline_token_counter(tokenizer)
    report: dict[str, Any] = {"model": loaded.info.to_dict(), "questions": len(questions),
                              "max_new_tokens": args.max_new_tokens, "methods": {}}
    base = sorted(rows["vanilla"], key=lambda r: r["question_id"])
    for name in methods:
        ordered = sorted(rows[name], key=lambda r: r["question_id"])
        table = group_table(ordered, base, count)
        equal = None if name == "vanilla" else same_answers(ordered, base)
        print(format_table(name, table, equal), flush=True)
        report["methods"][name] = {"answers": str(paths[name]), "equal_to_vanilla": equal,
                                   "groups": [vars(r) for r in table]}
    print("speedup and tok/s as Spec-Bench's speed.py computes them (baseline tokens: answer text "
          "re-tokenized minus one per turn); mean acc.: tokens per target forward")
    print(f"wrote {', '.join(str(p) for p in paths.values())} and {write_json_atomic(args.out, report)}")
    return 0


def _check_lengths(args: Any, loaded: Any, questions: Any) -> None:
    """Each question fits the context: its user turns in one prompt, and an answer of
    ``--max-new-tokens`` per turn (the later turns' prompts hold the earlier answers)."""
    from layersearch.models.context import check_fits
    from layersearch.specbench import prompt_ids

    for question in questions:
        turns = len(question.turns)
        ids = prompt_ids(loaded.tokenizer, [{"role": "user", "content": turn} for turn in question.turns])
        check_fits(loaded, ids.shape[1], turns * args.max_new_tokens, f"{args.spec_bench}: question {question.question_id}",
                   f"{turns} x --max-new-tokens" if turns > 1 else "--max-new-tokens")


def _labelled_masks(args: Any, info: Any) -> list[tuple[str, Any]]:
    """(file-name-safe label, mask): ``uniform-0.2`` for ``--skip-ratios``, the file's stem for ``--masks``."""
    from layersearch.commands.common import bench_masks

    masks = bench_masks(args.skip_ratios, args.masks, info)
    files = [Path(p).stem for p in args.masks.split(",") if p]
    labels = [str(m.provenance.get("label")) for m in masks[: len(masks) - len(files)]] + files
    out = [(re.sub(r"[^A-Za-z0-9.]+", "-", label).strip("-"), mask) for label, mask in zip(labels, masks)]
    if len({label for label, _ in out}) != len(out):
        raise LayersearchError("two methods would write the same answer file: give mask files distinct names")
    return out


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _answers_folder(given: str) -> Path:
    """``--answers``: an existing folder, or a new one whose parent exists (made only when the
    answers are written); checked before any work, like every ``--out``."""
    from layersearch.outputs import check_output

    folder = Path(given)
    if folder.is_dir():
        check_output(folder / "answers.jsonl", "--answers")  # writable
    elif folder.exists():
        raise LayersearchError(f"--answers {given} is not a folder")
    else:
        check_output(folder, "--answers")  # its parent exists and is writable
    return folder
