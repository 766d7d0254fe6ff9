"""What several commands share: loading ``--model`` quietly. The checks they share are
:mod:`layersearch.common.checks`' (:func:`~layersearch.common.checks.check_shared_options`), the input and
output files :mod:`layersearch.common.inputs`' and :mod:`layersearch.common.outputs`'."""

from __future__ import annotations

import sys
from typing import Any

from layersearch.common.checks import check_int, check_threads


def load(args: Any):
    """Load ``--model`` on ``--device`` / ``--dtype`` (a LoadedModel)."""
    import transformers

    from layersearch.models.loading import default_dtype, load_model
    from layersearch.steer.modeldir import check_model_config

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
