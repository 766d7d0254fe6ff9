"""``layersearch generate``: self-speculative (or plain) generation for one or more prompts."""

from __future__ import annotations

import json
from typing import Any

from layersearch.commands.common import format_stats, load, positive_int, read_prompts
from layersearch.errors import LayersearchError
from layersearch.mask import SkipMask


def run(args: Any) -> int:
    """Generate for ``--prompt`` / ``--prompts`` and print text plus statistics."""
    from layersearch.runtime.baseline import hf_generate
    from layersearch.runtime.sampling import SamplingConfig

    positive_int(args.max_new_tokens, "--max-new-tokens")
    prompts = [args.prompt] if args.prompt is not None else read_prompts(args.prompts)
    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    if args.baseline and (args.mask or args.skip_ratio is not None or args.dynamic):
        raise LayersearchError("--baseline runs plain decoding; it takes no --mask, --skip-ratio or --dynamic")
    # A bad mask file fails before the (slower) model load.
    mask_file = SkipMask.load(args.mask) if args.mask else None
    loaded = load(args)
    mask = None if args.baseline or args.dynamic else _mask(args, mask_file, loaded.info)
    decoder = None if args.baseline else _decoder(args, loaded, mask, sampling)
    profile = _profile(args, loaded.info) if mask is not None else None
    for index, text in enumerate(prompts):
        ids = loaded.tokenizer(text, return_tensors="pt").input_ids
        if decoder is None:
            result = hf_generate(loaded.model, ids, args.max_new_tokens, sampling=sampling)
        else:
            result = decoder.generate(ids, args.max_new_tokens)
        stats = result.stats.to_dict()
        if profile is not None and result.stats.acceptance_rate:
            # What the device's latency profile predicts for the M and alpha this run achieved.
            context = ids.shape[1] + len(result.token_ids) // 2
            stats["predicted_speedup"] = profile.expected_speedup(
                stats["mean_accepted_length"], stats["acceptance_rate"], mask, context,
                drafts=result.stats.draft_forwards / max(1, result.stats.target_forwards) or None,
            )
        _print(args, index, loaded.tokenizer.decode(result.token_ids, skip_special_tokens=True), result.token_ids, stats)
    return 0


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


def _decoder(args: Any, loaded, mask: SkipMask | None, sampling):
    from layersearch.runtime.decoder import SpeculativeDecoder
    from layersearch.runtime.drafting import DraftPolicy

    policy = DraftPolicy(args.max_draft, args.draft_threshold, args.adaptive_threshold)
    if args.dynamic:
        from layersearch.runtime.dynamic import dynamic_decoder

        return dynamic_decoder(args, loaded, policy=policy, sampling=sampling)
    return SpeculativeDecoder(loaded.model, mask, policy=policy, sampling=sampling)


def _print(args: Any, index: int, text: str, token_ids, stats: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps({"index": index, "token_ids": list(token_ids), "text": text, "stats": stats}), flush=True)
    else:
        predicted = stats.get("predicted_speedup")
        extra = f" predicted-speedup={predicted:.2f}" if predicted is not None else ""
        print(f"--- prompt {index}\n{text}\n[{format_stats(stats)}{extra}]", flush=True)
