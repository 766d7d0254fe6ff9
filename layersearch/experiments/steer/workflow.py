"""The ``layersearch steer`` workflows as functions: train a steering file, evaluate one, shrink a
drafter out of the verifier. Each checks its inputs before ``load()`` loads the verifier, so bad
input fails before the slow load; the CLI (``commands/steer.py``) parses and calls one of them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from layersearch.models.context import check_context
from layersearch.common.errors import LayersearchError
from layersearch.runtime import MAX_DRAFT


@dataclass(frozen=True)
class TrainJob:
    """What ``steer train`` makes: the drafter to steer (``mask`` file, ``skip_ratio`` or an
    independent ``drafter``), the domain's prompts, the training settings and the output."""

    domain: str
    out: str
    settings: Any  # steer.train.TrainSettings
    prompts: int = 16
    val_prompts: int = 2
    mask: str | None = None
    skip_ratio: float | None = None
    drafter: str | None = None
    finetune_drafter: str | None = None  # with drafter: fine-tune it and save it here
    device: str = "cpu"
    dtype: str | None = None
    quiet: bool = False


def check_domain(domain: str) -> None:
    """A built-in domain or ``file:PROMPTS.jsonl`` whose file reads (before the model loads)."""
    from layersearch.data import DOMAINS, user

    if domain not in DOMAINS and not user.is_user_domain(domain):
        raise LayersearchError(f"unknown domain {domain!r}: choose one of {', '.join(DOMAINS)} (or file:PROMPTS.jsonl)")
    if user.is_user_domain(domain):
        user.read_rows(domain[len(user.PREFIX):])


def train_steering(job: TrainJob, load: Callable[[], Any]) -> list[str]:
    """Train SD²'s steering for ``job`` and write its file (and the fine-tuned drafter); returns
    the lines that report it."""
    import torch

    from layersearch.masks.mask import SkipMask
    from layersearch.common.outputs import check_output
    from layersearch.steer import SteeringFile, SteeringParams, default_layers
    from layersearch.steer.file import weights_record
    from layersearch.steer.hooks import intermediate_size
    from layersearch.steer.train import collect, mean_kl, train

    settings = job.settings
    if job.skip_ratio is not None and not 0 < job.skip_ratio < 1:
        raise LayersearchError(f"skip_ratio must be between 0 and 1 (exclusive), got {job.skip_ratio}", fields="skip_ratio")
    check_output(job.out, "out")
    if job.finetune_drafter is not None:
        if not job.drafter:
            raise LayersearchError("finetune_drafter fine-tunes an independent draft model: give drafter MODEL", fields=("finetune_drafter", "drafter"))
        from layersearch.models.modeldir import check_model_dir

        check_model_dir(job.finetune_drafter, "finetune_drafter")
    mask_file = SkipMask.load(job.mask) if job.mask else None  # a bad mask fails before the model loads
    loaded = load()
    check_context(loaded, settings.new_tokens + 1, f"new_tokens {settings.new_tokens}", ("new_tokens",))  # prompts come on top
    drafter = _load_drafter(job.drafter, loaded, job.device, job.dtype) if job.drafter else None
    mask = None if drafter is not None else _self_mask(job, mask_file, loaded.info)
    draft_model = drafter.model if drafter is not None else loaded.model
    layers = default_layers(loaded.info.num_layers)
    params = SteeringParams(layers, loaded.info.hidden_size, draft_model.config.hidden_size, intermediate_size(draft_model))
    prompts = prompt_ids(loaded, job.domain, job.prompts, settings.seed, "train", settings.max_prompt_tokens)
    generator = torch.Generator().manual_seed(settings.seed)
    with progress_bar(job.quiet, len(prompts), "sampling", "prompt") as bar:
        examples = collect(loaded.model, prompts, layers, settings, generator, progress=lambda i: bar.update())
    validation = []
    if job.val_prompts:
        held_out = prompt_ids(loaded, job.domain, job.val_prompts, settings.seed, "validation", settings.max_prompt_tokens)
        validation = collect(loaded.model, held_out, layers, settings, generator)
    kind = dict(mask=mask, drafter=None if drafter is None else drafter.model, max_offset=settings.max_offset)
    val_before = mean_kl(params, loaded.model, validation, **kind) if validation else None
    with progress_bar(job.quiet, settings.steps, "training", "step") as bar:
        losses = train(params, loaded.model, examples, settings, mask=mask, drafter=kind["drafter"],
                       progress=lambda step, loss: bar.update(last=loss))
    val_after = mean_kl(params, loaded.model, validation, **kind) if validation else None
    window = max(1, len(losses) // 10)
    first, last = sum(losses[:window]) / window, sum(losses[-window:]) / window
    training = {
        **settings.to_dict(), "domain": job.domain, "prompts": len(examples), "split": "train",
        "kl_first": first, "kl_last": last, "val_prompts": len(validation), "val_kl_before": val_before,
        "val_kl_after": val_after,
    }
    drafter_info = None if drafter is None else drafter.info
    if drafter is not None:  # the fingerprint is structural: this tells the tuned weights from the original
        training["drafter_weights"] = weights_record(drafter.model)
    lines = []
    if job.finetune_drafter is not None and drafter is not None:  # it needs a drafter: checked above
        drafter_info = _save_finetuned(job.finetune_drafter, drafter)
        training["finetuned_from"] = drafter.info.to_dict()
    SteeringFile(params, loaded.info, drafter_info, mask, training).save(job.out)
    if job.finetune_drafter is not None:
        lines.append(f"fine-tuned the draft model; wrote {job.finetune_drafter}")
    lines.append(f"trained steering on {len(examples)} {job.domain} samples, {settings.steps} steps: "
                 f"KL {first:.4f} -> {last:.4f} (mean of first / last {window} steps)"
                 + (f"; held-out KL {val_before:.4f} -> {val_after:.4f}" if validation else "") + f"; wrote {job.out}")
    return lines


@dataclass(frozen=True)
class EvalJob:
    """What ``steer eval`` measures: a steering file on a domain's test prompts (see
    :func:`layersearch.experiments.steer.compare`)."""

    steering: str
    domain: str
    prompts: int = 4
    max_new_tokens: int = 48
    max_prompt_tokens: int = 192
    max_draft: int = MAX_DRAFT
    seeds: int = 3
    seed: int = 0
    drafter: str | None = None  # the draft model the file was trained for (default: the name in the file)
    device: str = "cpu"
    dtype: str | None = None
    quiet: bool = False


def evaluate_steering(job: EvalJob, load: Callable[[], Any]) -> dict[str, Any]:
    """Plain, unsteered and steered drafting on the test prompts: the report (JSON values)."""
    from layersearch.runtime.drafters import LayerSkipDrafter, ModelDrafter
    from layersearch.steer import SteeredDrafter, SteeringFile
    from layersearch.experiments.steer.experiment import bias_cost_ms, compare, settings, summary

    steering = SteeringFile.load(job.steering)  # a bad file fails before the model loads
    loaded = load()
    check_context(loaded, job.max_new_tokens + 1, f"max_new_tokens {job.max_new_tokens}", ("max_new_tokens",))  # prompts come on top
    drafter = None
    if steering.drafter is not None:
        drafter = _load_drafter(job.drafter or steering.drafter.name, loaded, job.device, job.dtype)
    elif job.drafter:
        raise LayersearchError(f"{job.steering}: trained for the layer-skip self-drafter; it takes no drafter", fields="drafter")
    try:
        if drafter is None:
            steering.check_models(loaded.info)
        else:
            steering.check_models(loaded.info, drafter.info, drafter.model)
        steering.check_params(loaded.model if drafter is None else drafter.model)
    except LayersearchError as exc:
        raise LayersearchError(f"{job.steering}: {exc}") from None

    def inner():
        return LayerSkipDrafter() if drafter is None else ModelDrafter(drafter.model)

    arms = {"unsteered": inner, "steered": lambda: SteeredDrafter(inner(), steering.params)}
    prompts = prompt_ids(loaded, job.domain, job.prompts, job.seed, "test", job.max_prompt_tokens)
    with progress_bar(job.quiet, len(prompts) * len(settings(job.seeds)), "decoding", "prompt") as bar:
        results = compare(loaded.model, prompts, arms, mask=steering.mask, max_new_tokens=job.max_new_tokens,
                          max_draft=job.max_draft, seeds=job.seeds, progress=lambda i: bar.update())
    return {
        "steering": job.steering, "domain": job.domain, "split": "test", "prompts": len(prompts),
        "max_draft": job.max_draft, "max_new_tokens": job.max_new_tokens,
        "drafter": "layer-skip" if drafter is None else drafter.info.name,
        "summary": summary(results), "bias_ms_per_stage": bias_cost_ms(steering.params),
        "runs": [r.to_dict() for r in results],
    }


def format_eval_report(report: dict) -> str:
    """The lines ``steer eval`` prints for its report."""
    lines = [f"{report['domain']} test split, {report['prompts']} prompts, draft length {report['max_draft']}, "
             f"drafter {report['drafter']}"]
    for setting, entry in report["summary"].items():
        parts = []
        for arm, row in entry["arms"].items():
            seeds = ", ".join(f"{m:.2f}" for m in row["block_efficiency_per_seed"])
            draft = f" draft {row['draft_ms_per_forward']:.1f} ms/forward" if row["draft_ms_per_forward"] else ""
            parts.append(f"{arm} M={row['block_efficiency']:.3f} [{seeds}] {row['tokens_per_second']:.1f} tok/s{draft}")
        gain = entry.get("block_efficiency_gain")
        speed = entry.get("speedup")
        tail = f"  steered/unsteered: M {gain:+.1%}, speed x{speed:.2f}" if gain is not None and speed else ""
        vs_plain = entry.get("speedup_vs_plain") or {}
        if vs_plain:
            tail += "  vs plain: " + ", ".join(f"{arm} x{ratio:.2f}" for arm, ratio in vs_plain.items())
        lines.append(f"{setting}: " + "; ".join(parts) + tail)
    lines.append(f"computing W_s g: {report['bias_ms_per_stage']:.3f} ms per drafting stage")
    return "\n".join(lines)


def shrink_drafter(load: Callable[[], Any], keep_layers: int, out: str) -> str:
    """Save the verifier with ``keep_layers`` evenly spread decoder layers as a model folder
    ``out`` (checked before the load); returns the line that reports it."""
    from layersearch.models.skipping import decoder_layers
    from layersearch.models.modeldir import check_model_dir, save_model_dir
    from layersearch.steer.shrink import kept_layers, prune_layers

    check_model_dir(out)
    if keep_layers < 2:  # before the model loads; the upper bound needs its depth
        raise LayersearchError(f"keep_layers must be at least 2 (the first and the last layer), got {keep_layers}", fields="keep_layers")
    loaded = load()
    layers = kept_layers(len(decoder_layers(loaded.model)), keep_layers)
    save_model_dir(out, prune_layers(loaded.model, layers), loaded.tokenizer)
    return f"kept layers {', '.join(map(str, layers))} of {loaded.info.num_layers}; wrote {out}"


def _save_finetuned(path: str, drafter: Any) -> Any:
    """Save the fine-tuned drafter at ``path``; its ModelInfo is named by ``path``."""
    from layersearch.models.modeldir import save_model_dir

    save_model_dir(path, drafter.model, drafter.tokenizer, "finetune_drafter")
    return replace(drafter.info, name=str(path))


def _self_mask(job: TrainJob, mask_file: Any, info: Any) -> Any:
    from layersearch.masks.mask import SkipMask

    if mask_file is not None:
        try:
            mask_file.check_model(info)
        except LayersearchError as exc:
            raise LayersearchError(f"{job.mask}: {exc}") from None
        mask = mask_file
    else:
        mask = SkipMask.uniform(info.num_layers, 0.25 if job.skip_ratio is None else job.skip_ratio, model=info)
    if mask.is_empty:
        raise LayersearchError("the mask skips nothing: the self-drafter would be the verifier itself")
    return mask


def _load_drafter(name: str, loaded: Any, device: str, dtype: str | None) -> Any:
    from layersearch.decoder.build import load_draft_model

    return load_draft_model(name, loaded, device, dtype)


def prompt_ids(loaded: Any, domain: str, n: int, seed: int, split: str, max_tokens: int) -> list[Any]:
    """``n`` prompts of ``domain``'s ``split`` as token ids, each cut to its last ``max_tokens``."""
    from layersearch.data import load_prompts

    texts = [p.text for p in load_prompts(domain, n, seed=seed, split=split, tokenizer=loaded.tokenizer)]
    return [loaded.tokenizer(t, return_tensors="pt").input_ids[0][-max_tokens:] for t in texts]


def progress_bar(quiet: bool, total: int, desc: str, unit: str) -> Any:
    """A progress bar on stderr (none when ``quiet``)."""
    from layersearch.common.progress import TrialProgress

    return TrialProgress(total=total, quiet=quiet, desc=desc, unit=unit)
