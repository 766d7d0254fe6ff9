"""``layersearch bench`` and ``layersearch demo``: side-by-side speed of plain and speculative decoding."""

from __future__ import annotations

import sys
from typing import Any

from layersearch.commands.common import load, positive_int
from layersearch.errors import LayersearchError
from layersearch.mask import SkipMask, write_json_atomic


def run(args: Any) -> int:
    """Run the benchmark, print one table per domain and write the JSON report."""
    from layersearch.bench import LOOP, configs, format_table, run_domain, summarize
    from layersearch.data import load_prompts
    from layersearch.runtime.drafting import DraftPolicy

    from layersearch.outputs import announce, check_output

    out = check_output(args.out)
    positive_int(args.repeats, "--repeats")
    positive_int(args.prompts_per_domain, "--prompts-per-domain")
    positive_int(args.max_new_tokens, "--max-new-tokens")
    domains = [d for d in args.domains.split(",") if d]
    drafters = _drafters(args)
    loaded = load(args)
    prompts = {d: [p.text for p in load_prompts(d, args.prompts_per_domain, seed=0)] for d in domains}
    masks = [SkipMask.none(loaded.info.num_layers, loaded.info)] + _masks(args, loaded.info)
    profile = _profile(args, loaded)
    policy = DraftPolicy(args.max_draft, args.draft_threshold, args.adaptive_threshold)
    report: dict[str, Any] = {"model": loaded.info.to_dict(), "profile": profile.to_dict(), "domains": {}}
    for domain in domains:
        ids = [loaded.tokenizer(text, return_tensors="pt").input_ids.to(loaded.model.device) for text in prompts[domain]]
        context = int(sum(i.shape[1] for i in ids) / len(ids)) + args.max_new_tokens // 2
        cfgs = configs(loaded.model, masks, policy, peers=_peers(args), drafters=drafters)
        _say(f"{domain}: {len(ids)} prompts x {len(cfgs)} configurations x {args.repeats} repeats")
        measured = run_domain(cfgs, ids, args.max_new_tokens, args.repeats, _say, device=loaded.model.device)
        loop = measured.get(LOOP)
        rows = [summarize(c.name, measured[c.name], profile, context, c.mask, loop) for c in cfgs]
        report["domains"][domain] = {"context": context, "rows": rows}
        print(format_table(domain, rows), flush=True)
    write_json_atomic(out, report)
    announce(out, f"wrote {out}")
    return 0


def _peers(args: Any) -> tuple[str, ...]:
    from layersearch.bench import PEERS

    if args.no_peers:
        return ()
    names = tuple(p for p in getattr(args, "peers", ",".join(PEERS)).split(",") if p)
    unknown = [p for p in names if p not in PEERS]
    if unknown:
        raise LayersearchError(f"--peers takes {' and/or '.join(PEERS)}, got {','.join(unknown)}")
    return names


def _drafters(args: Any) -> list[str]:
    names = [d for d in getattr(args, "drafters", "").split(",") if d]
    unknown = [d for d in names if d not in ("prompt-lookup", "hybrid")]
    if unknown:
        raise LayersearchError(f"--drafters takes prompt-lookup and/or hybrid, got {','.join(unknown)}")
    return names


def _masks(args: Any, info) -> list[SkipMask]:
    ratios = []
    for part in filter(None, args.skip_ratios.split(",")):
        try:
            ratios.append(float(part))
        except ValueError:
            raise LayersearchError(f"--skip-ratios must be comma-separated numbers, got {part!r}") from None
    masks = [SkipMask.uniform(info.num_layers, r, info).with_provenance(label=f"uniform {r:g}") for r in ratios]
    masks += [SkipMask.load(path, model=info) for path in filter(None, args.masks.split(","))]
    return masks


def _profile(args: Any, loaded):
    from layersearch.profile import LatencyProfile
    from layersearch.runtime.profiler import measure_profile

    if args.profile:
        return LatencyProfile.load(args.profile, model=loaded.info)
    _say("measuring a quick latency profile (pass --profile FILE to reuse one)")
    return measure_profile(loaded.model, loaded.info, contexts=(64, 256, 512), repeats=3, progress=_say)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
