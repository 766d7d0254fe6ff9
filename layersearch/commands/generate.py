"""``layersearch generate``: self-speculative (or plain) generation for one or more prompts."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from layersearch.checks import check_int
from layersearch.commands.args import draft_args, model_args, swift_args
from layersearch.commands.onthefly import check_on_the_fly, input_summary, swift_config
from layersearch.commands.steer import check_draft_model_args, draft_model_for_generate, steer_drafter, steering_for_generate
from layersearch.commands.common import check_context, format_stats, load, positive_int, read_prompts
from layersearch.errors import LayersearchError
from layersearch.mask import SkipMask


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``generate``: its arguments (drafter, lookahead and verification options included)."""
    p = sub.add_parser("generate", help="generate text with self-speculative decoding (or plain, with --baseline)")
    model_args(p, kernels=True)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--mask", help="mask JSON file")
    which.add_argument("--skip-ratio", type=float, help="use an evenly spread mask skipping this share of sub-layers")
    which.add_argument("--dynamic", choices=["knapsack"], help="re-select the draft sub-network while decoding")
    which.add_argument("--router", help="KNN-SSD router file (`layersearch knn build`): each prompt's mask by nearest neighbour")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompts", help='JSONL file, one {"prompt": ...} per line')
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--baseline", action="store_true", help="plain autoregressive decoding (transformers generate)")
    p.add_argument("--profile", help="latency profile JSON: adds the predicted speedup to the stats (and feeds --dynamic knapsack)")
    p.add_argument("--reselect-every", type=int, default=64, help="decoding steps between re-selections (--dynamic)")
    p.add_argument("--json", action="store_true", help="print one JSON object per prompt")
    draft_args(p)
    p.add_argument("--drafter", choices=["layer-skip", "prompt-lookup", "hybrid"], default="layer-skip",
                   help="where drafts come from: the masked model, n-gram lookup over prompt and output, "
                   "or lookup first and the masked model otherwise (default layer-skip)")
    p.add_argument("--verification", choices=["chain", "tree"], default="chain",
                   help="verify the draft chain, or SWIFT's token tree of top-k candidates per position (greedy; "
                   "sampling verifies the chain) (default chain)")
    p.add_argument("--lookahead", default=None, metavar="{static,confidence,adaptive,heuristic,disco:FILE}",
                   help="draft-length rule: static --max-draft, stop below --draft-threshold, Self-SD's adaptive "
                   "threshold, HF's heuristic schedule, or a DISCO classifier file (its mask unless --mask is given) "
                   "(default: confidence, adaptive with --adaptive-threshold)")
    # SWIFT on the fly (issue 12): --skip-ratio is then SWIFT's r (default 0.45).
    p.add_argument("--on-the-fly", choices=["swift"], default=None,
                   help="optimize the skipped layers while generating, over the stream of --prompts (SWIFT)")
    swift_args(p)
    # SD² (issue 15): steer the layer-skip drafter or an independent draft model with a trained steering file.
    p.add_argument("--steering", help="steering file from `layersearch steer train` (uses its mask, or its draft model)")
    p.add_argument("--draft-model", metavar="MODEL",
                   help="draft with an independent model sharing the tokenizer (embedded name, HF id or directory; "
                   "default with a --steering file trained for one: that file's)")
    p.set_defaults(command="generate")


def run(args: Any) -> int:
    """Generate for ``--prompt`` / ``--prompts`` and print text plus statistics."""
    from layersearch.runtime.baseline import hf_generate
    from layersearch.runtime.kernels import choose_kernels, model_kernels
    from layersearch.runtime.sampling import SamplingConfig

    positive_int(args.max_new_tokens, "--max-new-tokens")
    prompts = [args.prompt] if args.prompt is not None else read_prompts(args.prompts)
    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    if args.baseline and (args.mask or args.skip_ratio is not None or args.dynamic or getattr(args, "router", None)):
        raise LayersearchError("--baseline runs plain decoding; it takes no --mask, --skip-ratio, --dynamic or --router")
    _check_args(args)
    check_draft_model_args(args)
    check_on_the_fly(args)
    # A bad mask or DISCO file fails before the (slower) model load.
    mask_file = SkipMask.load(args.mask) if args.mask else None
    disco = _disco_file(args)
    router = _router(args)
    loaded = load(args)
    if router is not None:
        _check_router(args, router, loaded.info)
    steering, mask_file = steering_for_generate(args, loaded.info, mask_file)  # SD²: its mask unless --mask
    draft = draft_model_for_generate(args, loaded, steering)  # an independent drafter (or None)
    if draft is not None and args.profile:
        raise LayersearchError(f"{args.steering}: drafts with model {draft.info.name!r}; --profile predicts layer-skip drafts only")
    if steering is not None and router is not None:
        raise LayersearchError("--steering was trained for one mask; it takes no --router (which switches masks)")
    if disco is not None:
        _check_disco(args, disco, loaded.info)
        if mask_file is None and args.skip_ratio is None:
            mask_file = disco.mask  # the mask the classifier was trained for
    plain_mask = args.baseline or args.dynamic or router is not None or args.on_the_fly or draft is not None
    mask = None if plain_mask else _mask(args, mask_file, loaded.info)
    decoder = None if args.baseline else _decoder(args, loaded, mask, sampling, router, steering, draft)
    loaded_profile = _profile(args, loaded.info)
    profile = loaded_profile if mask is not None else None  # predictions are for layer-skip drafts
    encoded = [loaded.tokenizer(text, return_tensors="pt").input_ids for text in prompts]
    for index, ids in enumerate(encoded):  # every prompt checked before any output
        where = "the prompt" if args.prompt is not None else f"{args.prompts}: prompt {index + 1}"
        check_context(loaded, ids.shape[1] + args.max_new_tokens, f"{where} ({ids.shape[1]} tokens) + --max-new-tokens")
    kernels = choose_kernels(args.kernels, loaded_profile)  # auto: the profile's choice, stock without one
    with model_kernels(loaded.model, kernels):  # plain and speculative decoding alike
        for index, ids in enumerate(encoded):
            if decoder is None:
                result = hf_generate(loaded.model, ids, args.max_new_tokens, sampling=sampling)
            else:
                result = decoder.generate(ids, args.max_new_tokens)
            stats = result.stats.to_dict()
            stats["kernels"] = kernels
            if args.on_the_fly:
                stats["swift"] = input_summary(decoder.controller, result.stats)
            if profile is not None and result.stats.steps:
                # What the device's latency profile predicts for this run's own steps (as bench checks it).
                stats["predicted_speedup"] = profile.predicted_speedup_of_steps(result.stats.steps)
            _print(args, index, loaded.tokenizer.decode(result.token_ids, skip_special_tokens=True), result.token_ids, stats)
    return 0


def _check_args(args: Any) -> None:
    """The checks that need no model, done before it loads."""
    from layersearch.runtime.drafting import DraftPolicy

    if args.threads is not None:
        positive_int(args.threads, "--threads")
    if args.skip_ratio is not None and not 0.0 <= args.skip_ratio <= 1.0:
        raise LayersearchError(f"--skip-ratio must be between 0 and 1, got {args.skip_ratio}")
    if args.reselect_every < 1:
        raise LayersearchError(f"--reselect-every must be >= 1, got {args.reselect_every}")
    DraftPolicy(args.max_draft, args.draft_threshold, args.adaptive_threshold)
    if args.adaptive_threshold and getattr(args, "lookahead", None) not in (None, "adaptive"):
        raise LayersearchError(f"--adaptive-threshold is the adaptive lookahead; it contradicts --lookahead {args.lookahead}")


def _profile(args: Any, info):
    if not args.profile:
        return None
    from layersearch.profile import LatencyProfile

    return LatencyProfile.load(args.profile, model=info)


def _mask(args: Any, mask_file: SkipMask | None, info) -> SkipMask:
    if mask_file is not None:
        try:
            mask_file.check_model(info)
        except LayersearchError as exc:
            raise LayersearchError(f"{args.mask}: {exc}") from None
        return mask_file
    ratio = 0.25 if args.skip_ratio is None else args.skip_ratio
    return SkipMask.uniform(info.num_layers, ratio, model=info)


def _decoder(args: Any, loaded, mask: SkipMask | None, sampling, router=None, steering=None, draft=None):
    from layersearch.runtime.decoder import SpeculativeDecoder
    from layersearch.runtime.drafters import drafter_named
    from layersearch.runtime.drafting import DraftPolicy

    policy = DraftPolicy(args.max_draft, args.draft_threshold, args.adaptive_threshold)
    if args.adaptive_threshold and getattr(args, "lookahead", None) not in (None, "adaptive"):
        raise LayersearchError(f"--adaptive-threshold is the adaptive lookahead; it contradicts --lookahead {args.lookahead}")
    name = getattr(args, "lookahead", None)
    if name is not None and name.startswith("disco:"):
        lookahead = _disco_file(args).lookahead()
    else:
        lookahead = policy.lookahead(name)
    plugins = _verification(getattr(args, "verification", None) or "chain")
    plugins["drafter"] = drafter_named(getattr(args, "drafter", None) or "layer-skip", plugins.pop("branching"))
    if draft is not None:
        from layersearch.runtime.drafters import ModelDrafter

        plugins["drafter"] = ModelDrafter(draft.model)  # drafts a chain: tree verification falls back to it
    plugins["drafter"] = steer_drafter(plugins["drafter"], steering)
    if args.on_the_fly:
        from layersearch.swift.controller import swift_decoder

        return swift_decoder(loaded.model, swift_config(args), sampling=sampling, lookahead=lookahead, **plugins)
    if args.dynamic:
        return dynamic_decoder(args, loaded, policy=policy, sampling=sampling, lookahead=lookahead, **plugins)
    if router is not None:
        from layersearch.knn.controller import KnnController

        controller = KnnController(router)
        return SpeculativeDecoder(loaded.model, sampling=sampling, lookahead=lookahead, controller=controller, **plugins)
    return SpeculativeDecoder(loaded.model, mask, sampling=sampling, lookahead=lookahead, **plugins)


def _disco_file(args: Any):
    """The DISCO file of ``--lookahead disco:FILE`` (validated), else None (an unknown rule name
    fails here, before the model load)."""
    from layersearch.runtime.lookahead import LOOKAHEAD_NAMES

    name = getattr(args, "lookahead", None)
    if name is None or name in LOOKAHEAD_NAMES:
        return None
    if not name.startswith("disco:"):
        raise LayersearchError(f"unknown lookahead {name!r} (choose from {', '.join(LOOKAHEAD_NAMES)}, disco:FILE)")
    from layersearch.disco.file import DiscoFile

    path = name[len("disco:"):]
    if not path:
        raise LayersearchError("--lookahead disco: needs a file, e.g. --lookahead disco:disco.json")
    return DiscoFile.load(path)


# ----- KNN-SSD (--router) --------------------------------------------------------------
def _router(args: Any):
    """The router of ``--router`` (validated), else None."""
    path = getattr(args, "router", None)
    if not path:
        return None
    from layersearch.knn.router import Router

    return Router.load(path)


def _check_router(args: Any, router, info) -> None:
    try:
        router.check_model(info)
    except LayersearchError as exc:
        raise LayersearchError(f"{args.router}: {exc}") from None


def _check_disco(args: Any, disco, info) -> None:
    try:
        disco.check_model(info)
    except LayersearchError as exc:
        raise LayersearchError(f"{args.lookahead[len('disco:'):]}: {exc}") from None


def _verification(kind: str) -> dict[str, Any]:
    """The verifier and the drafts' branching for ``--verification``."""
    from layersearch.runtime.tree import TopKBranching, TreeVerifier
    from layersearch.runtime.verification import ChainVerifier

    if kind == "tree":
        return {"verifier": TreeVerifier(), "branching": TopKBranching()}
    if kind == "chain":
        return {"verifier": ChainVerifier(), "branching": None}
    raise LayersearchError(f"unknown verification {kind!r} (chain or tree)")


def load_or_measure_profile(path: str | None, loaded, *, max_verify: int = 12, stream=None):
    """The profile at ``path`` (checked against the model), or a quick one measured now (said on ``stream``)."""
    from layersearch.profile import LatencyProfile
    from layersearch.runtime.profiler import quick_profile

    stream = stream or sys.stderr
    if path:
        return LatencyProfile.load(path, model=loaded.info)
    print(
        "layersearch: no --profile given; measuring a quick latency profile "
        "(save one with `layersearch profile --out FILE` for better numbers)",
        file=stream,
        flush=True,
    )
    return quick_profile(loaded.model, loaded.info, max_verify=max_verify)


def dynamic_decoder(args: Any, loaded, *, policy, sampling, **plugins: Any):
    """The decoder of ``layersearch generate --dynamic knapsack`` (uses ``args.profile``, ``args.reselect_every``)."""
    from layersearch.knapspec.controller import KnapSpecController
    from layersearch.runtime.decoder import SpeculativeDecoder

    kind = getattr(args, "dynamic", "knapsack") or "knapsack"
    if kind != "knapsack":
        raise LayersearchError(f"unknown dynamic mode {kind!r} (only 'knapsack')")
    interval = getattr(args, "reselect_every", 64)
    check_int(interval, "--reselect-every")
    profile = load_or_measure_profile(getattr(args, "profile", None), loaded, max_verify=policy.max_draft_tokens + 1)
    controller = KnapSpecController(loaded.model, profile, max_gamma=policy.max_draft_tokens, interval=interval)
    plugins.setdefault("lookahead", policy.lookahead())
    return SpeculativeDecoder(loaded.model, sampling=sampling, controller=controller, **plugins)


def _print(args: Any, index: int, text: str, token_ids, stats: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps({"index": index, "token_ids": list(token_ids), "text": text, "stats": stats}), flush=True)
    else:
        predicted = stats.get("predicted_speedup")
        extra = f" predicted-speedup={predicted:.2f}" if predicted is not None else ""
        if "swift" in stats:
            swift = stats["swift"]
            match = "-" if swift["matchness"] is None else f"{swift['matchness']:.2f}"
            extra += (f" swift: phase={swift['phase']} matchness={match} opt-steps={swift['optimization_steps']} "
                      f"opt-seconds={swift['optimization_seconds']:.2f} skip-ratio={swift['skip_ratio']:g}")
        print(f"--- prompt {index}\n{text}\n[{format_stats(stats)}{extra}]", flush=True)
