"""A ``disco`` action's options checked before any model loads (``layersearch disco collect |
train | bench``), and the line ``train`` prints.

``options`` is any object with the action's option names as attributes (argparse's parsed
arguments, or a :class:`types.SimpleNamespace`)."""

from __future__ import annotations

from typing import Any

from layersearch.common.errors import LayersearchError

#: The count options of the actions (each an integer >= 1 where the action has it).
COUNT_OPTIONS = ("max_new_tokens", "max_draft", "prompts", "train_prompts", "val_prompts", "test_prompts", "repeats")


def check_options(options: Any) -> tuple[Any, Any]:
    """Check every option of a disco action (``options.action``: collect, train or bench) before any
    work: counts, the skip ratio, ``--out``, the mask file, the domains, the rows file. Returns
    (the ``--mask`` file's SkipMask or None, the ``--rows`` file's Rows or None)."""
    from layersearch.common.checks import check_int
    from layersearch.experiments.disco import check_domains
    from layersearch.masks.mask import SkipMask
    from layersearch.common.outputs import check_output

    for name in COUNT_OPTIONS:
        if getattr(options, name, None) is not None:
            check_int(getattr(options, name), "--" + name.replace("_", "-"))
    if options.max_new_tokens < 2:
        raise LayersearchError("--max-new-tokens must be >= 2 (rows start at the second token)")
    if options.skip_ratio is not None and not 0 < options.skip_ratio < 1:
        raise LayersearchError(f"--skip-ratio must be between 0 and 1 (exclusive), got {options.skip_ratio}")
    check_output(options.out, "--out")  # before any work: a directory or a missing folder is refused now, not after training
    mask_file = SkipMask.load(options.mask) if options.mask else None  # a bad mask fails before the model loads
    if options.action == "bench":
        domains = [d for d in options.domains.split(",") if d]
        if not domains:
            raise LayersearchError("--domains is empty")
        check_domains(domains)
    else:
        check_domains([options.domain])
    rows = None
    if getattr(options, "rows", None):
        from layersearch.disco import Rows

        rows = Rows.load(options.rows)
    return mask_file, rows


def trained_text(trained: Any, out: str) -> str:
    """``disco train``'s line: validation F1 of the classifier and the best static length, tau,
    SL_max and the file written."""
    f1 = trained.tuned.to_dict()["f1"]
    return (f"validation F1: classifier {f1['classifier']:.3f}, best static length {trained.tuned.static_length}: "
            f"{f1['best_static']:.3f}; tau {trained.file.tau:g}, SL_max {trained.file.sl_max}; wrote {out}")
