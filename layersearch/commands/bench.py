"""``layersearch bench`` and ``layersearch demo``: side-by-side speed of plain and speculative decoding."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from layersearch.commands.args import draft_args, model_args
from layersearch.commands.common import load, positive_int
from layersearch.errors import LayersearchError
from layersearch.mask import SkipMask, write_json_atomic


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``bench``: its arguments (the configurations it runs: ratios, masks, peers, drafters)."""
    p = sub.add_parser("bench", help="plain generate vs HF peers vs our loop, per domain")
    model_args(p, kernels=True)
    p.add_argument("--domains", default="summarization,math,code", help="comma-separated domains")
    p.add_argument("--prompts-per-domain", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--skip-ratios", default="0.1,0.2,0.3,0.45", help="uniform mask ratios to run")
    p.add_argument("--masks", default="", help="comma-separated mask files to run as well")
    p.add_argument("--repeats", type=int, default=3, help="runs per configuration (median reported)")
    p.add_argument("--profile", help="latency profile JSON (measured if absent)")
    p.add_argument("--out", default="bench.json")
    p.add_argument("--no-peers", action="store_true", help="skip HF's prompt lookup / early exit peers")
    p.add_argument("--peers", default="prompt-lookup,early-exit", help="transformers' peers to run (default prompt-lookup,early-exit)")
    p.add_argument("--drafters", default="prompt-lookup,hybrid",
                   help="our other drafters to run beside the layer-skip masks (default prompt-lookup,hybrid; '' for none)")
    p.add_argument("--split", choices=("train", "validation", "test"),
                   help="prompt split (default test; with --spec-bench: every question)")
    sb = p.add_argument_group("Spec-Bench mode (vanilla and ours on Spec-Bench's questions)")
    sb.add_argument("--spec-bench", metavar="FILE", help="Spec-Bench's question.jsonl: run in Spec-Bench mode")
    sb.add_argument("--categories", help="comma-separated categories or groups (mt_bench, translation, ...; default all)")
    sb.add_argument("--limit", type=int, help="at most N questions per category")
    sb.add_argument("--answers", metavar="DIR", help="folder for the answer files, one per method")
    draft_args(p)
    p.set_defaults(command="bench")


def run(args: Any) -> int:
    """Run the benchmark, print one table per domain and write the JSON report."""
    from layersearch.data import load_prompts
    from layersearch.runtime.drafting import DraftPolicy
    from layersearch.runtime.kernels import choose_kernels, model_kernels

    from layersearch.outputs import announce, check_output

    out = check_output(args.out)
    positive_int(args.repeats, "--repeats")
    positive_int(args.prompts_per_domain, "--prompts-per-domain")
    positive_int(args.max_new_tokens, "--max-new-tokens")
    domains = [d for d in args.domains.split(",") if d]
    drafters = _drafters(args)
    loaded = load(args)
    if getattr(args, "spec_bench", None):  # Spec-Bench mode: its answer files and per-group table
        from layersearch.commands import spec_bench

        return spec_bench.run(args, loaded)
    split = getattr(args, "split", None) or "test"  # a comparison: held-out prompts by default
    prompts = {d: [p.text for p in load_prompts(d, args.prompts_per_domain, seed=0, split=split)] for d in domains}
    masks = [SkipMask.none(loaded.info.num_layers, loaded.info)] + _masks(args, loaded.info)
    profile = _profile(args, loaded)
    kernels = choose_kernels(args.kernels, profile)
    _say(f"kernels: {kernels}")
    policy = DraftPolicy(args.max_draft, args.draft_threshold, args.adaptive_threshold)
    report: dict[str, Any] = {"model": loaded.info.to_dict(), "profile": profile.to_dict(), "kernels": kernels, "domains": {}}
    with model_kernels(loaded.model, kernels):  # every configuration, plain generate included, runs them
        _run_domains(args, loaded, domains, prompts, masks, profile, policy, drafters, report)
    write_json_atomic(out, report)
    announce(out, f"wrote {out}")
    return 0


def _run_domains(args: Any, loaded, domains, prompts, masks, profile, policy, drafters, report) -> None:
    """Measure every domain's configurations and print its table, filling ``report``."""
    from layersearch.bench import LOOP, PLAIN, configs, format_table, run_domain, summarize

    for domain in domains:
        ids = [loaded.tokenizer(text, return_tensors="pt").input_ids.to(loaded.model.device) for text in prompts[domain]]
        context = int(sum(i.shape[1] for i in ids) / len(ids)) + args.max_new_tokens // 2
        cfgs = configs(loaded.model, masks, policy, peers=_peers(args), drafters=drafters)
        _say(f"{domain}: {len(ids)} prompts x {len(cfgs)} configurations x {args.repeats} repeats")
        measured = run_domain(cfgs, ids, args.max_new_tokens, args.repeats, _say, device=loaded.model.device)
        loop, plain = measured.get(LOOP), measured.get(PLAIN)
        rows = [summarize(c.name, measured[c.name], profile, context, c.mask, loop, plain) for c in cfgs]
        report["domains"][domain] = {"context": context, "rows": rows}
        print(format_table(domain, rows), flush=True)


def _peers(args: Any) -> tuple[str, ...]:
    from layersearch.bench import PEERS

    if args.no_peers:
        return ()
    names = tuple(p for p in args.peers.split(",") if p)
    unknown = [p for p in names if p not in PEERS]
    if unknown:
        raise LayersearchError(f"--peers takes {' and/or '.join(PEERS)}, got {','.join(unknown)}")
    return names


def _drafters(args: Any) -> list[str]:
    names = [d for d in args.drafters.split(",") if d]
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
    from layersearch.runtime.profiler import quick_profile

    if args.profile:
        return LatencyProfile.load(args.profile, model=loaded.info)
    _say("measuring a quick latency profile (pass --profile FILE to reuse one)")
    return quick_profile(loaded.model, loaded.info, max_verify=16, repeats=3, progress=_say, kernels=args.kernels)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
