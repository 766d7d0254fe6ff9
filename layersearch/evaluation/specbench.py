"""Spec-Bench answer files and its per-group report, so its own scripts read our answers.

Spec-Bench's ``evaluation/speed.py`` and ``equal.py`` read one JSON row per question::

    {"question_id": 81, "category": "writing", "answer_id": "...", "model_id": "...",
     "choices": [{"index": 0, "turns": [text per turn], "decoding_steps": [...],
                  "new_tokens": [...], "wall_time": [seconds per turn],
                  "accept_lengths": [tokens emitted per target forward, every step]}],
     "tstamp": ...}

(rows sorted by question id). :func:`answer_row` writes that row; :func:`group_table`
computes its report the way ``speed.py`` does, per group (mt_bench, translation,
summarization, qa, math_reasoning, rag, overall):

* a method's tokens/s per question = sum(new_tokens) / sum(wall_time);
* the baseline's tokens/s per question = sum over turns of (len(tokenizer(text).input_ids) - 1)
  / sum(wall_time) -- the answer text re-tokenized, minus one token per turn (a BOS token
  for Llama tokenizers; SmolLM2's adds none, so this counts one token too few per turn, as
  Spec-Bench itself would on this model);
* speedup = mean(method tokens/s) / mean(baseline tokens/s), means over questions;
* mean accepted tokens = the mean of every question's ``accept_lengths`` pooled.

:func:`answer_question` runs one method on one question: each turn is a user message in the
model's chat template (a plain ``USER:/ASSISTANT:`` layout when it has none), and the second
turn follows the model's own first answer, as Spec-Bench's FastChat conversation does.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from layersearch.data.specbench import GROUPS, MT_BENCH, Question
from layersearch.common.errors import LayersearchError
from layersearch.runtime import DRAFT_THRESHOLD, MAX_DRAFT
from layersearch.common.inputs import parse_json
from layersearch.common.jsonfile import write_text_atomic

#: Report groups in Spec-Bench's order, "overall" last.
REPORT_GROUPS: tuple[str, ...] = (*GROUPS, "overall")


@dataclass(frozen=True)
class Turn:
    """One answered turn: the answer text and what Spec-Bench records about it."""

    text: str
    new_tokens: int
    wall_time: float
    decoding_steps: int
    accept_lengths: tuple[int, ...]


@dataclass(frozen=True)
class GroupResult:
    """Spec-Bench's report of one group for one method against the baseline."""

    group: str
    questions: int
    mean_accepted: float | None
    tokens_per_second: float | None
    baseline_tokens_per_second: float | None
    speedup: float | None


# ----- answer rows ----------------------------------------------------------------------------
def answer_row(
    question: Question, turns: Sequence[Turn], model_id: str, *, answer_id: str | None = None, tstamp: float | None = None
) -> dict[str, Any]:
    """The answer-file row of one question, in Spec-Bench's format (one choice, index 0)."""
    choice = {
        "index": 0,
        "turns": [t.text for t in turns],
        "decoding_steps": [t.decoding_steps for t in turns],
        "new_tokens": [t.new_tokens for t in turns],
        "wall_time": [t.wall_time for t in turns],
        "accept_lengths": [n for t in turns for n in t.accept_lengths],
    }
    return {
        "question_id": question.question_id,
        "category": question.category,
        "answer_id": answer_id or uuid.uuid4().hex[:22],
        "model_id": model_id,
        "choices": [choice],
        "tstamp": time.time() if tstamp is None else tstamp,
    }


def write_answers(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write an answer file atomically: one JSON row per line, sorted by question id."""
    ordered = sorted(rows, key=lambda row: row["question_id"])
    return write_text_atomic(path, "".join(json.dumps(row) + "\n" for row in ordered))


def read_answers(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a Spec-Bench answer file (ours or another tool's); LayersearchError names a bad line."""
    from layersearch.common.inputs import read_text

    path = Path(path)
    lines = read_text(path, "answer").splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        row = parse_json(line, f"{path}:{number}")  # bounded, finite numbers, valid Unicode
        try:
            choice = row["choices"][0]
            ok = isinstance(row["question_id"], int) and isinstance(row["category"], str) and all(
                isinstance(choice[key], list) for key in ("turns", "new_tokens", "wall_time", "accept_lengths")
            )
        except (KeyError, IndexError, TypeError):
            ok = False
        if not ok:
            raise LayersearchError(f"{path}:{number}: not a Spec-Bench answer row (question_id, category, choices[0] with "
                                   "turns, new_tokens, wall_time, accept_lengths)")
        rows.append(row)
    return rows


# ----- the report -------------------------------------------------------------------------------
def in_group(category: str, group: str) -> bool:
    """Whether a category counts towards a report group (speed.py's selection)."""
    if group == "overall":
        return True
    if group == "mt_bench":
        return category in MT_BENCH
    return category == group


def baseline_token_counter(tokenizer: Any) -> Callable[[str], int]:
    """Spec-Bench's count of a baseline answer's tokens: re-tokenized, minus one."""
    return lambda text: len(tokenizer(text).input_ids) - 1


def group_table(
    method_rows: Sequence[Mapping[str, Any]],
    baseline_rows: Sequence[Mapping[str, Any]],
    count_tokens: Callable[[str], int],
    groups: Sequence[str] = REPORT_GROUPS,
) -> list[GroupResult]:
    """Spec-Bench's per-group report of a method's answers against the baseline's answers.

    Groups without questions in the method's file are left out.
    """
    results = []
    for group in groups:
        rows = [r for r in method_rows if in_group(r["category"], group)]
        if not rows:
            continue
        base = [r for r in baseline_rows if in_group(r["category"], group)]
        speeds = [sum(r["choices"][0]["new_tokens"]) / sum(r["choices"][0]["wall_time"]) for r in rows]
        accepted = [n for r in rows for n in r["choices"][0]["accept_lengths"]]
        base_speeds = [
            sum(count_tokens(text) for text in r["choices"][0]["turns"]) / sum(r["choices"][0]["wall_time"]) for r in base
        ]
        tps = _mean(speeds)
        base_tps = _mean(base_speeds)
        results.append(GroupResult(
            group, len(rows), _mean(accepted), tps, base_tps,
            tps / base_tps if tps is not None and base_tps else None,
        ))
    return results


def same_answers(method_rows: Sequence[Mapping[str, Any]], baseline_rows: Sequence[Mapping[str, Any]]) -> bool:
    """Spec-Bench's equality check: every question's turns the same text, row by row."""
    if len(method_rows) != len(baseline_rows):
        return False
    return all(
        a["question_id"] == b["question_id"] and str(a["choices"][0]["turns"]) == str(b["choices"][0]["turns"])
        for a, b in zip(method_rows, baseline_rows)
    )


def format_table(method: str, results: Sequence[GroupResult], equal: bool | None = None) -> str:
    """Plain-text report of one method: a line per group."""
    lines = [f"== {method}" + ("" if equal is None else f" (answers equal to vanilla: {'yes' if equal else 'NO'})"),
             f"{'group':<16}{'questions':>10}{'mean acc.':>11}{'tok/s':>9}{'base tok/s':>12}{'speedup':>9}"]
    for r in results:
        lines.append(f"{r.group:<16}{r.questions:>10}{_num(r.mean_accepted, 11)}{_num(r.tokens_per_second, 9, 1)}"
                     f"{_num(r.baseline_tokens_per_second, 12, 1)}{_num(r.speedup, 9)}")
    return "\n".join(lines)


# ----- answering --------------------------------------------------------------------------------
def answer_question(
    question: Question,
    generate: Callable[[Any, int], Any],
    tokenizer: Any,
    max_new_tokens: int,
    *,
    stop_ids: Iterable[int] = (),
    vanilla: bool = False,
    device: Any = "cpu",
) -> tuple[Turn, ...]:
    """Answer every turn of ``question`` with ``generate(ids, max_new_tokens)`` -> GenerationResult.

    The second turn's prompt holds the model's own first answer. ``vanilla`` records one
    accepted token per generated token (plain decoding, as Spec-Bench's baseline does);
    otherwise the decoder's per-step ``accept_lengths``.
    """
    stop = frozenset(stop_ids)
    messages: list[dict[str, str]] = []
    turns = []
    for user in question.turns:
        messages.append({"role": "user", "content": user})
        ids = prompt_ids(tokenizer, messages).to(device)
        result = generate(ids, max_new_tokens)
        text = answer_text(tokenizer, result.token_ids, stop)
        stats = result.stats
        accept = (1,) * stats.new_tokens if vanilla else tuple(stats.accept_lengths)
        steps = stats.new_tokens if vanilla else stats.target_forwards + 1  # + the prefill's forward
        turns.append(Turn(text, stats.new_tokens, stats.run_seconds, steps, accept))
        messages.append({"role": "assistant", "content": text})
    return tuple(turns)


def prompt_ids(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> Any:
    """Token ids ``[1, n]`` of a conversation ending with the assistant's turn to speak."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        return tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
    # No template: a plain two-role layout (FastChat's default style).
    text = "".join(f"{'USER' if m['role'] == 'user' else 'ASSISTANT'}: {m['content']}\n" for m in messages)
    return tokenizer(text + "ASSISTANT:", return_tensors="pt").input_ids


def answer_text(tokenizer: Any, token_ids: Sequence[int], stop_ids: frozenset[int]) -> str:
    """The answer as Spec-Bench stores it: up to the first stop token, special tokens dropped, stripped."""
    ids = list(token_ids)
    cut = next((i for i, t in enumerate(ids) if t in stop_ids), len(ids))
    return tokenizer.decode(ids[:cut], skip_special_tokens=True).strip()


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _num(value: float | None, width: int, decimals: int = 2) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{decimals}f}"


# ----- ``bench``'s Spec-Bench run: every chosen question by vanilla and each mask ---------------
@dataclass(frozen=True)
class SpecBenchRun:
    """What ``bench``'s Spec-Bench run answers: the question file, the filter, the answer folder, the
    masks (``skip_ratios`` / ``masks``), the draft policy's settings, the lookahead rules
    (``lookaheads``: one method per rule and mask; empty: the policy's own rule), the report file."""

    questions: str
    answers: str | None
    out: str
    categories: str | None = None
    limit: int | None = None
    split: str | None = None
    skip_ratios: str = ""
    masks: str = ""
    max_new_tokens: int = 64
    max_draft: int = MAX_DRAFT
    draft_threshold: float = DRAFT_THRESHOLD
    adaptive_threshold: bool = False
    lookaheads: tuple[str, ...] = ()


def run_specbench(run: SpecBenchRun, loaded: Any, say: Callable[[str], None], show: Callable[[str], None]) -> list[Path]:
    """Answer the chosen questions with vanilla and each mask under each lookahead rule (back to
    back per question), write one answer file per method and the report; ``show`` gets each method's table. Returns the
    files written."""
    import re

    from layersearch.decoder.build import assemble
    from layersearch.data.specbench import read_questions, select
    from layersearch.common.jsonfile import write_json_atomic
    from layersearch.runtime.baseline import hf_generate
    from layersearch.runtime.loop import eos_ids
    from layersearch.runtime.draft_policy import DraftPolicy
    from layersearch.decoder.fragments import mask_spec, policy_lookahead

    if not run.answers:
        raise LayersearchError("spec_bench needs answers DIR (where the answer files go)", fields=("spec_bench", "answers"))
    if run.limit is not None and run.limit < 1:
        raise LayersearchError(f"limit must be >= 1, got {run.limit}", fields="limit")
    answers = answers_folder(run.answers)
    masks = labelled_masks(run.skip_ratios, run.masks, loaded.info)
    if not masks:
        raise LayersearchError("no method of ours to run: give skip_ratios or masks", fields=("skip_ratios", "masks"))
    categories = tuple(c for c in (run.categories or "").split(",") if c) or None
    questions = select(read_questions(run.questions), categories, run.limit, run.split)
    if not questions:
        raise LayersearchError("no Spec-Bench question matches categories / split", fields=("categories", "split"))
    model, tokenizer = loaded.model, loaded.tokenizer
    _check_first_turns_fit(loaded, questions, run.max_new_tokens)  # before any answer is written
    policy = DraftPolicy(run.max_draft, run.draft_threshold)
    methods = {"vanilla": lambda ids, n: hf_generate(model, ids, n)}
    for label, mask in masks:
        for rule in run.lookaheads or (None,):  # one method per ``lookaheads`` rule (default: the policy's rule)
            name = f"ours-{label}" if rule is None else f"ours-{label}-{rule}"
            methods[name] = assemble(model, mask_spec(mask, lookahead=policy_lookahead(policy, rule))).generate
    stop = eos_ids(model)
    model_id = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(loaded.info.name).name)  # a file name, even for a local folder
    rows: dict[str, list] = {name: [] for name in methods}
    for number, question in enumerate(questions, 1):
        for name, generate in methods.items():
            turns = answer_question(question, generate, tokenizer, run.max_new_tokens, stop_ids=stop,
                                    vanilla=name == "vanilla", device=model.device)
            rows[name].append(answer_row(question, turns, f"{model_id}-{name}"))
        say(f"question {number}/{len(questions)} ({question.category} {question.question_id}) answered by {len(methods)} methods")
    answers.mkdir(exist_ok=True)  # checked above: an existing folder, or a new one in an existing folder
    paths = {name: write_answers(answers / f"{model_id}-{name}.jsonl", method_rows)
             for name, method_rows in rows.items()}
    count = baseline_token_counter(tokenizer)
    report: dict[str, Any] = {"model": loaded.info.to_dict(), "questions": len(questions),
                              "max_new_tokens": run.max_new_tokens, "methods": {}}
    base = sorted(rows["vanilla"], key=lambda r: r["question_id"])
    for name in methods:
        ordered = sorted(rows[name], key=lambda r: r["question_id"])
        table = group_table(ordered, base, count)
        equal = None if name == "vanilla" else same_answers(ordered, base)
        show(format_table(name, table, equal))
        report["methods"][name] = {"answers": str(paths[name]), "equal_to_vanilla": equal,
                                   "groups": [vars(r) for r in table]}
    show("speedup and tok/s as Spec-Bench's speed.py computes them (baseline tokens: answer text "
         "re-tokenized minus one per turn); mean acc.: tokens per target forward")
    return [*paths.values(), write_json_atomic(run.out, report)]


def _check_first_turns_fit(loaded: Any, questions: Iterable[Question], new_tokens: int) -> None:
    """Every question's first turn (as the chat template formats it) + ``new_tokens`` against the
    model's context, in one error line (a later turn holds the model's own answer: not known yet)."""
    from layersearch.models.context import check_all_fit

    lengths = ((f"Spec-Bench question {q.question_id} ({q.category})",
                prompt_ids(loaded.tokenizer, [{"role": "user", "content": q.turns[0]}]).shape[-1])
               for q in questions if q.turns)
    check_all_fit(loaded, lengths, new_tokens)


def labelled_masks(skip_ratios: str, mask_files: str, info: Any) -> list[tuple[str, Any]]:
    """(file-name-safe label, mask): ``uniform-0.2`` for ``skip_ratios``, the file's stem for ``mask_files``."""
    import re

    from layersearch.evaluation.bench import bench_masks

    masks = bench_masks(skip_ratios, mask_files, info)
    files = [Path(p).stem for p in mask_files.split(",") if p]
    labels = [str(m.provenance.get("label")) for m in masks[: len(masks) - len(files)]] + files
    out = [(re.sub(r"[^A-Za-z0-9.]+", "-", label).strip("-"), mask) for label, mask in zip(labels, masks)]
    if len({label for label, _ in out}) != len(out):
        raise LayersearchError("two methods would write the same answer file: give mask files distinct names")
    return out


def answers_folder(given: str) -> Path:
    """``answers``: an existing folder, or a new one whose parent exists (made only when the
    answers are written); checked before any work, like every ``out``."""
    from layersearch.common.outputs import check_output

    folder = Path(given)
    if folder.is_dir():
        check_output(folder / "answers.jsonl", "answers")  # writable
    elif folder.exists():
        raise LayersearchError(f"answers {given} is not a folder", fields="answers")
    else:
        check_output(folder, "answers")  # its parent exists and is writable
    return folder
