"""Pieces several commands share: loading the model, reading prompts, printing stats."""

from __future__ import annotations

import sys
from typing import Any

from layersearch.common.checks import (
    check_draft_length, check_finite, check_int, check_real, check_seed, check_text, check_threads,
)
from layersearch.common.errors import LayersearchError


def load(args: Any):
    """Load ``--model`` on ``--device`` / ``--dtype`` (a LoadedModel)."""
    import torch
    import transformers

    from layersearch.models.loading import default_dtype, load_model

    # Our own output is the interface: no per-load progress bars or advisory warnings on stderr.
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()

    if getattr(args, "threads", None) is not None:
        # On a shared machine one thread per process is steadier than contending for all cores.
        torch.set_num_threads(check_threads(args.threads, "--threads"))
    from layersearch.steer.modeldir import check_model_config

    check_model_config(args.model, "--model")  # sizes checked before transformers allocates from them
    dtype = args.dtype or default_dtype(args.device)
    return load_model(args.model, device=args.device, dtype=dtype, progress=_say)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def read_prompts(path: str) -> list[str]:
    """Prompts from a JSONL file with one ``{"prompt": ...}`` object per line."""
    from layersearch.common.inputs import parse_json, read_text

    lines = read_text(path, "prompts").splitlines()
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        item = parse_json(line, f"{path}:{number}")
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str):
            raise LayersearchError(f'{path}:{number}: expected an object with a "prompt" string')
        if not item["prompt"].strip():
            raise LayersearchError(f"{path}:{number}: empty prompt")
        prompts.append(item["prompt"])
    if not prompts:
        raise LayersearchError(f"{path}: no prompts")
    return prompts


def format_stats(stats: dict[str, Any]) -> str:
    """One human-readable line: M, alpha, tokens/s and the time split."""
    alpha = stats.get("acceptance_rate")
    alpha_text = "n/a" if alpha is None else f"{alpha:.2f}"
    return (
        f"M={stats['mean_accepted_length']:.2f} alpha={alpha_text} "
        f"tokens/s={stats['tokens_per_second']:.1f} "
        f"draft={stats['draft_seconds']:.2f}s verify={stats['verify_seconds']:.2f}s "
        f"other={stats['other_seconds'] + stats['prefill_seconds']:.2f}s"
    )


def positive_int(value: int, what: str) -> int:
    """Check a count argument (>= 1)."""
    return check_int(value, what)


def seed(value: int, what: str = "--seed") -> int:
    """Check a seed argument (an integer in [0, 2**32 - 1], what every seeded generator takes)."""
    return check_seed(value, what)


def finite(value: float, what: str, *, low: float = float("-inf"), high: float = float("inf"),
           low_open: bool = False, high_open: bool = False) -> float:
    """Check a real-valued argument: finite (no NaN / inf) and in its range (see :func:`check_real`)."""
    return check_real(value, what, low=low, high=high, low_open=low_open, high_open=high_open)


def learning_rate(value: float, what: str = "--lr") -> float:
    """Check a learning rate: finite and in (0, 1] (an AdamW step moves each weight by about lr, so
    more than 1 per step is a typo, and it overflows into NaN weights before anything is written)."""
    return check_real(value, what, low=0.0, high=1.0, low_open=True)


def max_draft(value: int, what: str = "--max-draft") -> int:
    """Check a draft-length bound: an integer in [1, 64] (:data:`layersearch.common.checks.MAX_DRAFT_LENGTH`)."""
    return check_draft_length(value, what)


def context_limit(loaded: Any) -> int | None:
    """The model's context length (``max_position_embeddings``), None when it states none."""
    from layersearch.models.context import context_limit as limit

    return limit(loaded)


def check_context(loaded: Any, tokens: int, what: str) -> None:
    """Raise when ``tokens`` positions do not fit the model's context length (the one check,
    :mod:`layersearch.models.context`)."""
    from layersearch.models.context import check_context as check

    check(loaded, tokens, what)


def domain_options(items: list[str], option: str, form: str) -> dict[str, str]:
    """Repeated ``NAME=VALUE`` options (one mask source per domain) as {name: value}; one error
    line for a malformed or repeated one. ``form`` says the expected shape in that line."""
    named: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise LayersearchError(f"{option} takes {form}, got {item!r}")
        if name in named:
            raise LayersearchError(f"{option} gives two masks for domain {name!r}")
        named[name] = value
    return named




#: Options that name a file (or folder) a command writes; a command writing others (derived
#: names: tune's report, an ``--out-prefix``'s files) adds them in ``output_paths(args)``.
OUTPUT_OPTIONS = ("out", "save_spec", "report", "plot", "pca", "finetune_drafter", "out_dir")
#: Options whose values are names, never files read.
_NOT_PATHS = ("command", "name", "names", "prefix", "prompt")


def check_overwrites(args: Any, command: Any = None) -> None:
    """Refuse an output that is an input or another output of the same run (``generate --prompts
    p.jsonl --save-spec p.jsonl``), before any work. The outputs: the :data:`OUTPUT_OPTIONS` given,
    and what ``command.output_paths(args)`` ({option: path}) adds where the command module defines
    it; the inputs: every other option's value (or a path inside it: ``NAME=FILE``, ``disco:FILE``,
    ``sqlite:///FILE``, ``study:NAME@FILE``, comma lists) that names an existing file or folder."""
    from layersearch.common.outputs import check_distinct

    given = vars(args)
    outputs = {"--" + name.replace("_", "-"): given[name] for name in OUTPUT_OPTIONS if isinstance(given.get(name), str)}
    derived = getattr(command, "output_paths", None)
    outputs.update(derived(args) if derived is not None else {})
    storage = _storage_file(given.get("storage"))
    if storage is not None:  # read and written: a report onto it destroys the study, even one made by this run
        outputs["--storage"] = storage
    inputs = []
    for name, value in given.items():
        if name in OUTPUT_OPTIONS or name in ("out_prefix", "storage") or name in _NOT_PATHS:
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                inputs.extend(("--" + name.replace("_", "-"), path) for path in _paths_in(item))
    check_distinct(list(outputs.items()), inputs)


def _storage_file(value: Any) -> str | None:
    """The file of a ``--storage`` (``x.db``, ``x.log``, ``sqlite:///x.db``, ``journal:///x.log``), None
    for a database server or no storage (a malformed one is the command's to report)."""
    if not isinstance(value, str):
        return None
    for scheme in ("sqlite:///", "journal:///"):
        if value.startswith(scheme):
            return value[len(scheme):] or None
    return value if "://" not in value and value.endswith((".db", ".log", ".sqlite", ".sqlite3")) else None


def _paths_in(value: str) -> list[str]:
    """The existing files or folders ``value`` names, itself or inside one of the forms above."""
    import os

    found = []
    for part in value.split(","):
        for candidate in (part, part.partition("=")[2], part.partition(":")[2], part.rpartition("@")[2]):
            candidate = candidate[3:] if candidate.startswith("///") else candidate  # sqlite:///x, journal:///x
            if candidate and "\0" not in candidate and os.path.exists(candidate) and candidate not in found:
                found.append(candidate)
    return found


def check_shared_options(args: Any) -> None:
    """Range and finiteness of the options many commands share, checked by name before any
    command starts work (each command narrows them further where it needs to): every seed,
    ``--max-draft``, ``--draft-threshold``, ``--skip-ratio``, learning rates, ``--threads``
    (at most the machine's CPU threads), every float option (finite: no NaN or infinity) and
    every text value (valid UTF-8: a non-UTF-8 byte from the shell is named, not decoded)."""
    for name, value in vars(args).items():
        if value is None or isinstance(value, bool):
            continue
        option = "FILE" if name == "file" else "--" + name.replace("_", "-")
        for text in value if isinstance(value, list) else (value,):
            if isinstance(text, str):
                check_text(text, option, argv=True)
        if name == "seed" or name.endswith("_seed"):
            seed(value, option)
        elif name == "max_draft":
            max_draft(value, option)
        elif name in ("draft_threshold", "skip_ratio"):
            # "--skip-ratio (the skip ratio)": the option and the quantity it sets, as the messages before
            finite(value, f"{option} (the {name.replace('_', ' ')})", low=0.0, high=1.0)
        elif name in ("lr", "drafter_lr"):
            learning_rate(value, option)
        elif name == "threads":
            check_threads(value, option)
        elif isinstance(value, float):  # each command checks its own range; none takes NaN or infinity
            check_finite(value, option)
