"""``layersearch steer train | eval | shrink``: SD²'s steering for the layer-skip self-drafter or an
independent draft model (see :mod:`layersearch.steer`), a layer-pruned drafter cut from the
verifier (``generate --steering`` / ``--draft-model`` are wired in :mod:`layersearch.build`)."""

from __future__ import annotations

from typing import Any

from layersearch.commands.args import model_args
from layersearch.checks import check_int
from layersearch.commands.common import positive_int
from layersearch.errors import LayersearchError

DRAFTER_LR = 5e-5  # --finetune-drafter's default learning rate for the draft model's weights
MAX_SEEDS = 1000  # steer eval --seeds: each seed is one more decode of every prompt by every arm


def add_parser(sub, parser_class) -> None:
    """Register ``steer`` and its actions on the main CLI's subparsers."""
    p = sub.add_parser("steer", help="SD²: steer the drafter with a vector from the verifier's hidden states")
    actions = p.add_subparsers(dest="action", required=True, parser_class=parser_class)
    train = actions.add_parser("train", help="train W_hml / W_s on verifier samples of a domain's train split")
    model_args(train, threads=1)
    which = train.add_mutually_exclusive_group()
    which.add_argument("--mask", help="mask JSON file: steer the layer-skip self-drafter with this mask")
    which.add_argument("--skip-ratio", type=float, help="self-drafter with an evenly spread mask (default 0.25)")
    which.add_argument("--drafter", help="an independent draft model (embedded name, HF id or directory) sharing the tokenizer")
    train.add_argument("--domain", required=True)
    train.add_argument("--prompts", type=int, default=16, help="training prompts (default 16)")
    train.add_argument("--val-prompts", type=int, default=2, help="validation prompts for the held-out KL (default 2; 0: none)")
    train.add_argument("--new-tokens", type=int, default=32, help="tokens the verifier samples per prompt (default 32)")
    train.add_argument("--max-prompt-tokens", type=int, default=192, help="keep the last N prompt tokens (default 192)")
    train.add_argument("--steps", type=int, default=120, help="AdamW steps, one sample each (default 120)")
    train.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate (default 1e-4)")
    train.add_argument("--max-offset", type=int, default=8, help="k: delta is uniform in [1, k] (default 8)")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--finetune-drafter", metavar="OUT_DIR",
                       help="with --drafter: fine-tune the draft model too (all but its embeddings / LM head) and save "
                       "it as a model directory here; the steering file then names OUT_DIR as its drafter")
    train.add_argument("--drafter-lr", type=float, default=None,
                       help="AdamW learning rate of the drafter's weights with --finetune-drafter (default 5e-5)")
    train.add_argument("--out", required=True, help="steering file (.safetensors)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    ev = actions.add_parser("eval", help="steered vs unsteered block efficiency on the test split")
    model_args(ev, threads=1)
    ev.add_argument("--steering", required=True, help="steering file from `steer train`")
    ev.add_argument("--drafter", help="the draft model the file was trained for (default: the name in the file)")
    ev.add_argument("--domain", required=True)
    ev.add_argument("--prompts", type=int, default=4, help="test prompts (default 4)")
    ev.add_argument("--max-new-tokens", type=int, default=48)
    ev.add_argument("--max-prompt-tokens", type=int, default=192, help="keep the last N prompt tokens (default 192)")
    ev.add_argument("--draft-length", type=int, default=8, help="static draft length (default 8)")
    ev.add_argument("--seeds", type=int, default=3, help="sampling seeds at T=1 (default 3)")
    ev.add_argument("--seed", type=int, default=0, help="prompt selection seed")
    ev.add_argument("--out", help="write the full report as JSON")
    ev.add_argument("--quiet", action="store_true", help="no progress bar")
    shrink = actions.add_parser("shrink", help="an independent drafter: the model with N evenly spread layers kept")
    model_args(shrink, threads=1)
    shrink.add_argument("--keep-layers", type=int, required=True,
                        help="decoder layers to keep, evenly spread, the first and the last included")
    shrink.add_argument("--out", required=True, help="new model directory (missing or empty)")
    p.set_defaults(command="steer")


def run(args: Any) -> int:
    """Dispatch on the action."""
    if getattr(args, "val_prompts", 0) < 0:
        raise LayersearchError(f"--val-prompts must be >= 0, got {args.val_prompts}")
    for name in ("prompts", "new_tokens", "max_prompt_tokens", "steps", "max_offset", "max_new_tokens", "draft_length", "seeds"):
        if getattr(args, name, None) is not None:
            positive_int(getattr(args, name), "--" + name.replace("_", "-"))
    if getattr(args, "seeds", None) is not None:
        check_int(args.seeds, "--seeds", maximum=MAX_SEEDS)
    if args.action == "shrink":
        return _shrink(args)
    from layersearch.data import DOMAINS, user

    if args.domain not in DOMAINS and not user.is_user_domain(args.domain):
        raise LayersearchError(f"unknown domain {args.domain!r}: choose one of {', '.join(DOMAINS)} (or file:PROMPTS.jsonl)")
    if user.is_user_domain(args.domain):
        user.read_rows(args.domain[len(user.PREFIX):])  # a bad prompt file fails before the model loads
    return _train(args) if args.action == "train" else _eval(args)


# ----- shrink ------------------------------------------------------------------------------
def _shrink(args: Any) -> int:
    from layersearch.commands.common import load
    from layersearch.models.skipping import decoder_layers
    from layersearch.steer.modeldir import check_model_dir, save_model_dir
    from layersearch.steer.shrink import kept_layers, prune_layers

    if args.threads is not None:
        positive_int(args.threads, "--threads")
    check_model_dir(args.out)
    if args.keep_layers < 2:  # before the model loads; the upper bound needs its depth
        raise LayersearchError(f"--keep-layers must be at least 2 (the first and the last layer), got {args.keep_layers}")
    loaded = load(args)
    layers = kept_layers(len(decoder_layers(loaded.model)), args.keep_layers)
    small = prune_layers(loaded.model, layers)
    save_model_dir(args.out, small, loaded.tokenizer)
    print(f"kept layers {', '.join(map(str, layers))} of {loaded.info.num_layers}; wrote {args.out}", flush=True)
    return 0


# ----- train -------------------------------------------------------------------------------
def _train(args: Any) -> int:
    import torch

    from layersearch.commands.common import check_context, load
    from layersearch.mask import SkipMask
    from layersearch.outputs import check_output
    from layersearch.steer import SteeringFile, SteeringParams, default_layers
    from layersearch.steer.file import weights_record
    from layersearch.steer.hooks import intermediate_size
    from layersearch.steer.train import TrainSettings, collect, mean_kl, train

    settings = TrainSettings(
        steps=args.steps, lr=args.lr, max_offset=args.max_offset, new_tokens=args.new_tokens,
        max_prompt_tokens=args.max_prompt_tokens, seed=args.seed,
        drafter_lr=(DRAFTER_LR if args.drafter_lr is None else args.drafter_lr) if args.finetune_drafter is not None else None,
    )
    if args.skip_ratio is not None and not 0 < args.skip_ratio < 1:
        raise LayersearchError(f"--skip-ratio must be between 0 and 1 (exclusive), got {args.skip_ratio}")
    check_output(args.out)
    if args.drafter_lr is not None and args.finetune_drafter is None:
        raise LayersearchError("--drafter-lr is the fine-tuned drafter's learning rate; it needs --finetune-drafter")
    if args.finetune_drafter is not None:
        if not args.drafter:
            raise LayersearchError("--finetune-drafter fine-tunes an independent draft model: give --drafter MODEL")
        from layersearch.steer.modeldir import check_model_dir

        check_model_dir(args.finetune_drafter, "--finetune-drafter")
    mask_file = SkipMask.load(args.mask) if args.mask else None  # a bad mask fails before the model loads
    loaded = load(args)
    check_context(loaded, args.new_tokens + 1, f"--new-tokens {args.new_tokens}")  # prompts come on top
    drafter = _load_drafter(args, args.drafter, loaded) if args.drafter else None
    mask = None if drafter is not None else _self_mask(args, mask_file, loaded.info)
    draft_model = drafter.model if drafter is not None else loaded.model
    layers = default_layers(loaded.info.num_layers)
    params = SteeringParams(layers, loaded.info.hidden_size, draft_model.config.hidden_size, intermediate_size(draft_model))
    prompts = _prompts(loaded, args.domain, args.prompts, args.seed, "train", args.max_prompt_tokens)
    generator = torch.Generator().manual_seed(args.seed)
    with _bar(args, len(prompts), "sampling", "prompt") as bar:
        examples = collect(loaded.model, prompts, layers, settings, generator, progress=lambda i: bar.update())
    validation = []
    if args.val_prompts:
        held_out = _prompts(loaded, args.domain, args.val_prompts, args.seed, "validation", args.max_prompt_tokens)
        validation = collect(loaded.model, held_out, layers, settings, generator)
    kind = dict(mask=mask, drafter=None if drafter is None else drafter.model, max_offset=settings.max_offset)
    val_before = mean_kl(params, loaded.model, validation, **kind) if validation else None
    with _bar(args, settings.steps, "training", "step") as bar:
        losses = train(params, loaded.model, examples, settings, mask=mask, drafter=kind["drafter"],
                       progress=lambda step, loss: bar.update(last=loss))
    val_after = mean_kl(params, loaded.model, validation, **kind) if validation else None
    window = max(1, len(losses) // 10)
    first, last = sum(losses[:window]) / window, sum(losses[-window:]) / window
    training = {
        **settings.to_dict(), "domain": args.domain, "prompts": len(examples), "split": "train",
        "kl_first": first, "kl_last": last, "val_prompts": len(validation), "val_kl_before": val_before,
        "val_kl_after": val_after,
    }
    drafter_info = None if drafter is None else drafter.info
    if drafter is not None:  # the fingerprint is structural: this tells the tuned weights from the original
        training["drafter_weights"] = weights_record(drafter.model)
    if args.finetune_drafter is not None:
        drafter_info = _save_finetuned(args.finetune_drafter, drafter)
        training["finetuned_from"] = drafter.info.to_dict()
    SteeringFile(params, loaded.info, drafter_info, mask, training).save(args.out)
    if args.finetune_drafter is not None:
        print(f"fine-tuned the draft model; wrote {args.finetune_drafter}", flush=True)
    print(f"trained steering on {len(examples)} {args.domain} samples, {settings.steps} steps: "
          f"KL {first:.4f} -> {last:.4f} (mean of first / last {window} steps)"
          + (f"; held-out KL {val_before:.4f} -> {val_after:.4f}" if validation else "") + f"; wrote {args.out}", flush=True)
    return 0


def _save_finetuned(path: str, drafter):
    """Save the fine-tuned drafter at ``path``; its ModelInfo is named by ``path``."""
    from dataclasses import replace

    from layersearch.steer.modeldir import save_model_dir

    save_model_dir(path, drafter.model, drafter.tokenizer, "--finetune-drafter")
    return replace(drafter.info, name=str(path))


def _self_mask(args: Any, mask_file, info):
    from layersearch.mask import SkipMask

    if mask_file is not None:
        try:
            mask_file.check_model(info)
        except LayersearchError as exc:
            raise LayersearchError(f"{args.mask}: {exc}") from None
        mask = mask_file
    else:
        mask = SkipMask.uniform(info.num_layers, 0.25 if args.skip_ratio is None else args.skip_ratio, model=info)
    if mask.is_empty:
        raise LayersearchError("the mask skips nothing: the self-drafter would be the verifier itself")
    return mask


def _load_drafter(args: Any, name: str, loaded):
    from layersearch.build import load_draft_model

    return load_draft_model(name, loaded, args.device, args.dtype)


def _prompts(loaded, domain: str, n: int, seed: int, split: str, max_tokens: int):
    from layersearch.data import load_prompts

    texts = [p.text for p in load_prompts(domain, n, seed=seed, split=split, tokenizer=loaded.tokenizer)]
    return [loaded.tokenizer(t, return_tensors="pt").input_ids[0][-max_tokens:] for t in texts]


def _bar(args: Any, total: int, desc: str, unit: str):
    from layersearch.progress import TrialProgress

    return TrialProgress(total=total, quiet=args.quiet, desc=desc, unit=unit)


# ----- eval --------------------------------------------------------------------------------
def _eval(args: Any) -> int:
    from layersearch.commands.common import check_context, load
    from layersearch.outputs import check_output
    from layersearch.runtime.drafters import LayerSkipDrafter, ModelDrafter
    from layersearch.steer import SteeredDrafter, SteeringFile
    from layersearch.steer.bench import bias_cost_ms, compare, settings, summary

    if args.out:
        check_output(args.out)
    steering = SteeringFile.load(args.steering)  # a bad file fails before the model loads
    loaded = load(args)
    check_context(loaded, args.max_new_tokens + 1, f"--max-new-tokens {args.max_new_tokens}")  # prompts come on top
    drafter = None
    if steering.drafter is not None:
        drafter = _load_drafter(args, args.drafter or steering.drafter.name, loaded)
    elif args.drafter:
        raise LayersearchError(f"{args.steering}: trained for the layer-skip self-drafter; it takes no --drafter")
    try:
        if drafter is None:
            steering.check_models(loaded.info)
        else:
            steering.check_models(loaded.info, drafter.info, drafter.model)
        steering.check_params(loaded.model if drafter is None else drafter.model)
    except LayersearchError as exc:
        raise LayersearchError(f"{args.steering}: {exc}") from None

    def inner():
        return LayerSkipDrafter() if drafter is None else ModelDrafter(drafter.model)

    arms = {"unsteered": inner, "steered": lambda: SteeredDrafter(inner(), steering.params)}
    prompts = _prompts(loaded, args.domain, args.prompts, args.seed, "test", args.max_prompt_tokens)
    with _bar(args, len(prompts) * len(settings(args.seeds)), "decoding", "prompt") as bar:
        results = compare(loaded.model, prompts, arms, mask=steering.mask, max_new_tokens=args.max_new_tokens,
                          draft_length=args.draft_length, seeds=args.seeds, progress=lambda i: bar.update())
    report = {
        "steering": args.steering, "domain": args.domain, "split": "test", "prompts": len(prompts),
        "draft_length": args.draft_length, "max_new_tokens": args.max_new_tokens,
        "drafter": "layer-skip" if drafter is None else drafter.info.name,
        "summary": summary(results), "bias_ms_per_stage": bias_cost_ms(steering.params),
        "runs": [r.to_dict() for r in results],
    }
    if args.out:
        from layersearch.jsonfile import write_json_atomic

        write_json_atomic(args.out, report)
    _print_report(report)
    return 0


def _print_report(report: dict) -> None:
    print(f"{report['domain']} test split, {report['prompts']} prompts, draft length {report['draft_length']}, "
          f"drafter {report['drafter']}")
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
        print(f"{setting}: " + "; ".join(parts) + tail)
    print(f"computing W_s g: {report['bias_ms_per_stage']:.3f} ms per drafting stage", flush=True)
