"""A ``steer`` action's options checked and turned into its job (``layersearch steer train |
eval | shrink``): the counts, ``--seeds``' bound, the training settings.

``options`` is any object with the action's option names as attributes (argparse's parsed
arguments, or a :class:`types.SimpleNamespace`)."""

from __future__ import annotations

from typing import Any

from layersearch.common.checks import check_int
from layersearch.common.errors import LayersearchError

DRAFTER_LR = 5e-5  # --finetune-drafter's default learning rate for the draft model's weights
MAX_SEEDS = 1000  # steer eval --seeds: each seed is one more decode of every prompt by every arm
#: The count options of the actions (each an integer >= 1 where the action has it).
COUNT_OPTIONS = ("prompts", "new_tokens", "max_prompt_tokens", "steps", "max_offset", "max_new_tokens", "seeds")


def check_counts(options: Any) -> None:
    """The count options of any action, before any work: ``--val-prompts`` >= 0, the others >= 1,
    ``--seeds`` at most :data:`MAX_SEEDS`."""
    if getattr(options, "val_prompts", 0) < 0:
        raise LayersearchError(f"--val-prompts must be >= 0, got {options.val_prompts}")
    for name in COUNT_OPTIONS:
        if getattr(options, name, None) is not None:
            check_int(getattr(options, name), "--" + name.replace("_", "-"))
    if getattr(options, "seeds", None) is not None:
        check_int(options.seeds, "--seeds", maximum=MAX_SEEDS)


def train_job(options: Any) -> Any:
    """``steer train``'s :class:`~layersearch.experiments.steer.workflow.TrainJob` (settings checked;
    ``--drafter-lr`` only with ``--finetune-drafter``, :data:`DRAFTER_LR` by default there)."""
    from layersearch.steer.train import TrainSettings
    from layersearch.experiments.steer.workflow import TrainJob

    o = options
    finetune = o.finetune_drafter is not None
    settings = TrainSettings(
        steps=o.steps, lr=o.lr, max_offset=o.max_offset, new_tokens=o.new_tokens,
        max_prompt_tokens=o.max_prompt_tokens, seed=o.seed,
        drafter_lr=(DRAFTER_LR if o.drafter_lr is None else o.drafter_lr) if finetune else None,
    )
    if o.drafter_lr is not None and not finetune:
        raise LayersearchError("--drafter-lr is the fine-tuned drafter's learning rate; it needs --finetune-drafter")
    return TrainJob(o.domain, o.out, settings, o.prompts, o.val_prompts, o.mask, o.skip_ratio,
                    o.drafter, o.finetune_drafter, o.device, o.dtype, o.quiet)
