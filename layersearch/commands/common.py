"""What several commands share: loading ``--model`` quietly, and the checks of the options many
commands take (:func:`check_shared_options`); the input and output files are
:mod:`layersearch.common.inputs`' and :mod:`layersearch.common.outputs`'."""

from __future__ import annotations

import sys
from typing import Any, Mapping

from layersearch.common.checks import check_int, check_threads


def load(args: Any):
    """Load ``--model`` on ``--device`` / ``--dtype`` (a LoadedModel)."""
    import transformers

    from layersearch.models.loading import default_dtype, load_model
    from layersearch.models.modeldir import check_model_config

    # Our own output is the interface: no per-load progress bars or advisory warnings on stderr.
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    set_threads(getattr(args, "threads", None))

    check_model_config(args.model, "--model")  # sizes checked before transformers allocates from them
    dtype = args.dtype or default_dtype(args.device)
    return load_model(args.model, device=args.device, dtype=dtype, progress=_say)


def set_threads(threads: int | None) -> None:
    """``--threads``: torch's CPU threads (None: torch's choice)."""
    if threads is not None:
        import torch

        # On a shared machine one thread per process is steadier than contending for all cores.
        torch.set_num_threads(check_threads(threads, "--threads"))


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def positive_int(value: int, what: str) -> int:
    """Check a count argument (>= 1)."""
    return check_int(value, what)


def check_shared_options(options: Mapping[str, Any]) -> None:
    """Range and finiteness of the options many commands share (``options``: by name, as
    ``vars(args)``), checked by name before any command starts work (each command narrows them
    further where it needs to): every seed, ``--max-draft``, ``--draft-threshold``,
    ``--skip-ratio``, learning rates, ``--threads`` (at most the machine's CPU threads), every
    float option (finite: no NaN or infinity) and every text value (valid UTF-8: a non-UTF-8 byte
    from the shell is named, not decoded). Errors name the option's ``dest`` (the CLI words it
    as the option: :mod:`layersearch.commands.wording`)."""
    from layersearch.common.checks import (check_draft_length, check_finite, check_learning_rate, check_real, check_seed,
                                           check_text)

    for name, value in options.items():
        if value is None or isinstance(value, bool):
            continue
        for text in value if isinstance(value, list) else (value,):
            if isinstance(text, str):
                check_text(text, name, argv=True)
        if name == "seed" or name.endswith("_seed"):
            check_seed(value, name)
        elif name == "max_draft":
            check_draft_length(value, name)
        elif name in ("draft_threshold", "skip_ratio"):
            check_real(value, name, low=0.0, high=1.0)
        elif name in ("lr", "drafter_lr"):
            check_learning_rate(value, name)
        elif name == "threads":
            check_threads(value, name)
        elif isinstance(value, float):  # each command checks its own range; none takes NaN or infinity
            check_finite(value, name)


def spec_inputs(paths: Any, option: str) -> list[tuple[str, str]]:
    """The files the decoder spec files ``paths`` (a file, or a comma list) name inside them (profile,
    mask, router, DISCO, steering files, model folders), as (what, path) pairs: inputs of the run that
    no output may replace. A spec that cannot be read names none (the command itself reports it)."""
    from layersearch.common.errors import LayersearchError
    from layersearch.decoder.spec import DecoderSpec

    found: list[tuple[str, str]] = []
    for path in (p.strip() for p in paths.split(",")) if isinstance(paths, str) else ():
        try:
            spec = DecoderSpec.load(path) if path else None
        except LayersearchError:
            spec = None
        if spec is not None:
            where = f"{option} {path}'s"

            def note(file: str) -> str:
                found.append((where, file))
                return file

            spec.with_paths(note)
    return found


def note_full_draft(what: str, mask: Any, draft_quant: str | None = None) -> None:
    """One notice line on stderr when the plan ``mask`` (of ``what``: a file, a spec) changes nothing:
    no sub-layer skipped, none in int8, so its draft is the full model (correct, but no faster).
    A quantized draft (``draft_quant``: the model's own int8 twins or a draft model's) is not."""
    if mask is not None and mask.is_empty and draft_quant is None:
        print(f"layersearch: note: {what} skips no sub-layer and runs none in int8: it drafts with the full model",
              file=sys.stderr, flush=True)
