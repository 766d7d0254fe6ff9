"""The benchmark behind ``layersearch bench``: plain generate, transformers' peers and our loop.

Every configuration runs on the same prompts in one process, interleaved repeat by repeat,
so a speedup is a ratio measured side by side (the machine is shared and noisy); figures
are medians over repeats. Besides tokens/s it reports the issue's targets: the empty-mask
loop's cost per token against plain generate, bookkeeping outside model forwards, realized
against predicted speedup, and peak memory against weights + KV cache.
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping, Sequence

import torch

from layersearch.errors import LayersearchError
from layersearch.mask import SkipMask
from layersearch.measure import Configuration, Measurement, acceptance_per_position, compare, median_speedup
from layersearch.profile import LatencyProfile
from layersearch.runtime.baseline import hf_generate
from layersearch.runtime.decoder import SpeculativeDecoder
from layersearch.runtime.drafting import DraftPolicy
from layersearch.runtime.stats import combine

PLAIN = "plain generate"
LOOP = "ours: nothing skipped"  # our loop's plain decoding: the baseline the profile predicts against
PEERS = ("prompt-lookup", "early-exit")  # transformers' own speculative modes
ASSISTED = "assisted"  # the peer "assisted:MODEL": transformers' assisted generation with a draft model
DRAFTERS = ("prompt-lookup", "hybrid", "model")  # ours; "model:MODEL" and "hybrid:MODEL" name a draft model


def split_named(item: str) -> tuple[str, str | None]:
    """``"assisted:small"`` -> ``("assisted", "small")``; ``"hybrid"`` -> ``("hybrid", None)``."""
    kind, sep, name = item.partition(":")
    return kind, (name if sep else None)


def split_quant(name: str) -> tuple[str, str | None]:
    """``"small@int8"`` -> ``("small", "int8")`` (a draft model with quantized weights); ``"small"`` -> ``("small", None)``."""
    from layersearch.models.quantize import QUANT_SCHEMES

    import os

    ref, sep, quant = name.rpartition("@")
    if not sep or not ref or "/" in quant or os.path.exists(name):  # no suffix, or a path with an @ in it
        return name, None
    if quant not in QUANT_SCHEMES:  # "small@int4" is a quantization asked for, not a model named so
        raise LayersearchError(f"unknown draft quantization {quant!r} in {name!r} (choose from {', '.join(QUANT_SCHEMES)})")
    return ref, quant


# The harness's configuration and measurement, under the names this module has always used.
Config = Configuration


def configs(
    model, masks: Sequence[SkipMask], policy: DraftPolicy, peers: bool | Sequence[str], drafters: Sequence[str] = (),
    *, draft_models: Mapping[str, torch.nn.Module] | None = None, lookaheads: Sequence[str] = (), vocab=None,
) -> list[Config]:
    """Plain generate, transformers' peers, our loop per mask (and per lookahead rule), and our
    other drafters.

    Peers: ``prompt-lookup``, ``early-exit`` and ``assisted:MODEL`` (assisted generation with that
    draft model and transformers' own defaults). Drafters: ``prompt-lookup`` (n-grams of 3..2,
    HF's heuristic length schedule capped at 4), ``hybrid`` (lookup, else the first mask that
    skips something), ``model:MODEL`` (our ModelDrafter) and ``hybrid:MODEL`` (lookup, else the
    draft model). ``draft_models`` maps each MODEL named there to its loaded model.
    ``lookaheads`` (rule names; empty: the policy's own rule) multiply the rows that draft with
    a model: the masks that skip something and the draft models. ``vocab`` (a VocabSubset) adds,
    for each of those, a row whose draft scores only that subset (FR-Spec), under the first rule."""
    draft_models = dict(draft_models or {})
    rules = [(name, policy.lookahead(name)) for name in lookaheads] or [(None, policy.lookahead())]
    result = [Config(PLAIN, lambda ids, n: hf_generate(model, ids, n))] + _peer_configs(model, peers, draft_models)
    for mask in masks:
        label = LOOP if mask.is_empty else f"ours: {mask.provenance.get('label') or mask.short_string()}"
        if mask.is_empty:  # nothing drafts: the rule is moot, and the row is the loop's baseline
            result.append(Config(label, SpeculativeDecoder(model, mask, lookahead=rules[0][1]).generate, mask, model))
            continue
        for rule_name, rule in rules:
            decoder = SpeculativeDecoder(model, mask, lookahead=rule)
            result.append(Config(_with_rule(label, rule_name, len(rules)), decoder.generate, mask, model))
        if vocab is not None:
            from layersearch.runtime.drafters import LayerSkipDrafter

            decoder = SpeculativeDecoder(model, mask, lookahead=rules[0][1], drafter=LayerSkipDrafter(vocab=vocab))
            result.append(Config(_with_rule(f"{label} vocab {vocab.n}", rules[0][0], len(rules)), decoder.generate, mask, model))
    return result + _drafter_configs(model, masks, policy, drafters, draft_models, rules, vocab)


def _peer_configs(model, peers: bool | Sequence[str], draft_models: Mapping[str, torch.nn.Module]) -> list[Config]:
    """transformers' own speculative modes, in the order given."""
    result = []
    for peer in PEERS if peers is True else tuple(peers or ()):
        kind, name = split_named(peer)
        if kind == "prompt-lookup":
            result.append(Config("hf prompt-lookup (10)", lambda ids, n: hf_generate(model, ids, n, prompt_lookup_num_tokens=10)))
        elif kind == "early-exit":
            exit_layer = model.config.num_hidden_layers // 2
            result.append(Config(f"hf early-exit (layer {exit_layer})", lambda ids, n, e=exit_layer: hf_generate(model, ids, n, assistant_early_exit=e)))
        elif kind == ASSISTED:
            assistant = draft_models[name]
            result.append(Config(f"hf assisted ({_short(name)})", lambda ids, n, a=assistant: hf_generate(model, ids, n, assistant_model=a)))
    return result


def _drafter_configs(
    model, masks: Sequence[SkipMask], policy: DraftPolicy, drafters: Sequence[str],
    draft_models: Mapping[str, torch.nn.Module], rules: Sequence[tuple[str | None, Any]], vocab=None,
) -> list[Config]:
    from layersearch.runtime.drafters import HybridDrafter, ModelDrafter, drafter_named
    from layersearch.runtime.lookahead import HeuristicLookahead

    result = []
    fallback = next((m for m in masks if not m.is_empty), None)
    for item in drafters:
        kind, name = split_named(item)
        if kind == "prompt-lookup":
            decoder = SpeculativeDecoder(model, drafter=drafter_named(kind), lookahead=HeuristicLookahead(4, ceiling=4))
            result.append(Config("ours: prompt-lookup (<=4)", decoder.generate, None, model))
        elif kind == "hybrid" and name is not None:
            drafter = HybridDrafter(fallback=ModelDrafter(draft_models[name]))
            decoder = SpeculativeDecoder(model, drafter=drafter, lookahead=rules[0][1])
            result.append(Config(_with_rule(f"ours: hybrid ({_short(name)})", rules[0][0], len(rules)), decoder.generate, None, model))
        elif kind == "hybrid" and fallback is not None:
            decoder = SpeculativeDecoder(model, fallback, drafter=drafter_named(kind), policy=policy)
            label = fallback.provenance.get("label") or fallback.short_string()
            result.append(Config(f"ours: hybrid ({label})", decoder.generate, None, model))
        elif kind == "model":
            for rule_name, rule in rules:
                decoder = SpeculativeDecoder(model, drafter=ModelDrafter(draft_models[name]), lookahead=rule)
                result.append(Config(_with_rule(f"ours: model ({_short(name)})", rule_name, len(rules)), decoder.generate, None, model))
            if vocab is not None:
                decoder = SpeculativeDecoder(model, drafter=ModelDrafter(draft_models[name], vocab=vocab), lookahead=rules[0][1])
                label = f"ours: model ({_short(name)}) vocab {vocab.n}"
                result.append(Config(_with_rule(label, rules[0][0], len(rules)), decoder.generate, None, model))
    return result


def spec_configs(loaded, specs: Sequence[tuple[str, Any, Any]]) -> list[Config]:
    """One row per decoder spec: ``specs`` holds (label, DecoderSpec, SpecFiles) for each file;
    the row is ``spec: <label>``, decoding greedily (the bench checks outputs against plain
    ``generate``) with whatever kernels the bench has switched on for every row."""
    from layersearch.build import build_decoder

    result = []
    for label, spec, files in specs:
        built = build_decoder(loaded, spec, files, kernels="stock")  # the bench switches kernels around every row
        greedy = built.sampling(do_sample=False)
        if built.speculative is None:  # a plain spec: transformers' generate
            generate = lambda ids, n, s=greedy: hf_generate(loaded.model, ids, n, sampling=s)  # noqa: E731
        else:
            generate = lambda ids, n, d=built.speculative, s=greedy: d.generate(ids, n, sampling=s)  # noqa: E731
        result.append(Config(f"spec: {label}", generate, _fixed_mask(built.spec), loaded.model))
    return result


def _fixed_mask(spec) -> SkipMask | None:
    """The mask a layer-skip spec always drafts with (the profile predicts its row), else None."""
    source = spec.mask_source
    if spec.drafter.name != "layer-skip" or spec.drafter.model is not None or source.kind != "mask":
        return None
    return source.mask


def _with_rule(label: str, rule: str | None, count: int) -> str:
    """A row's label, naming its lookahead rule where several are compared."""
    return label if rule is None or count == 1 and rule == "confidence" else f"{label} [{rule}]"


def _short(name: str) -> str:
    """A model reference short enough for a table: a path's file or folder name."""
    ref, quant = split_quant(name)
    short = ref.rstrip("/").rsplit("/", 1)[-1].removesuffix(".gguf")
    return short if quant is None else f"{short} {quant}"


def run_domain(
    configs_: list[Config], prompts: list[torch.Tensor], new_tokens: int, repeats: int, progress, device="cpu"
) -> dict[str, Measurement]:
    """Measure every configuration on ``prompts``, interleaved prompt by prompt, with speedups
    against plain ``generate`` (:func:`layersearch.measure.compare`)."""
    return compare(configs_, prompts, repeats, new_tokens=new_tokens, baseline=PLAIN, progress=progress, device=device)


def summarize(
    name: str, m: Measurement, profile: LatencyProfile | None, context: int, mask: SkipMask | None,
    loop: Measurement | None = None, plain: Measurement | None = None,
) -> dict[str, Any]:
    """Medians and target checks of one configuration; ``loop`` is our plain loop's measurement
    (the baseline for realized-vs-predicted: the profile costs our forwards, not generate()'s),
    ``plain`` transformers' ``generate`` (for the decode-phase speedup beside the end-to-end one)."""
    if m.error:
        return {"config": name, "error": m.error}
    pooled = combine(m.stats)
    M, alpha = pooled.mean_accepted_length, pooled.acceptance_rate
    row: dict[str, Any] = {
        "config": name,
        "tokens_per_second": statistics.median(s.tokens_per_second for s in m.stats),
        "speedup": statistics.median(m.speedups),
        "speedup_per_repeat": list(m.speedups),
        "M": M,
        "alpha": alpha,
        "identical_to_plain": m.identical,
        # Share of wall time outside model forwards (our loop only; generate() is not instrumented).
        "overhead_share": (pooled.bookkeeping_seconds / pooled.total_seconds) if pooled.bookkeeping_seconds is not None else None,
        "memory_ratio": m.peak_ratio,
        **{k: v for k, v in acceptance_per_position(pooled.steps).items() if k != "drafted_per_position"},
    }
    if plain is not None and (ratio := median_speedup(plain, m, decode=True)) is not None:
        row["decode_speedup"] = ratio
    if loop is not None and (ratio := median_speedup(loop, m)) is not None:
        row["speedup_vs_loop"] = ratio
        # The decode phase alone: the prefill is the same forward for both, and on long prompts
        # (math's 5-shot) it dilutes the end-to-end ratio towards 1. The profile predicts this one.
        if (ratio := median_speedup(loop, m, decode=True)) is not None:
            row["decode_speedup_vs_loop"] = ratio
    if mask is not None and profile is not None and not mask.is_empty and alpha:
        drafts = pooled.draft_forwards / pooled.target_forwards if pooled.target_forwards else None
        row["expected_speedup"] = profile.expected_speedup(M, alpha, mask, context, drafts=drafts)
    if profile is not None and pooled.steps and name != LOOP:
        row.update(_step_prediction(profile, pooled.steps))
        if row.get("predicted_speedup") and "decode_speedup_vs_loop" in row:
            row["realized_over_predicted"] = row["decode_speedup_vs_loop"] / row["predicted_speedup"]
    return row


def _step_prediction(profile: LatencyProfile, steps) -> dict[str, Any]:
    """The profile's prediction for the run's own steps, and its two terms against what the
    loop measured: seconds per draft forward and per verification."""
    out: dict[str, Any] = {"predicted_speedup": profile.predicted_speedup_of_steps(steps)}
    forwards = sum(s.draft_forwards for s in steps)
    if forwards:
        predicted = sum(profile.step_seconds(s.position, 0, s.draft_forwards, s.mask) - profile.target_seconds(s.position)
                        for s in steps if s.draft_forwards)
        out["draft_forward_ms"] = {"measured": 1e3 * sum(s.draft_seconds for s in steps) / forwards,
                                   "predicted": 1e3 * predicted / forwards}
    verify = sum(profile.target_seconds(s.position) * profile.verify_ratio(s.drafted + 1) for s in steps)
    out["verify_ms"] = {"measured": 1e3 * sum(s.verify_seconds for s in steps) / len(steps),
                        "predicted": 1e3 * verify / len(steps)}
    return out


def _cell(value: float | None, width: int, decimals: int = 2) -> str:
    """A right-aligned number, or '-' where there is none."""
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{decimals}f}"


def format_table(domain: str, rows: list[dict[str, Any]]) -> str:
    """A plain-text table of one domain's rows."""
    head = f"{'config':<36}{'tok/s':>8}{'speedup':>9}{'decode':>7}{'vs loop':>8}{'dec/loop':>9}{'pred.':>7}{'M':>6}{'alpha':>7}{'same':>6}{'ovh%':>6}{'mem':>6}"
    lines = [f"== {domain}", head]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['config']:<36}  not run: {r['error']}")
            continue
        lines.append(
            f"{r['config']:<36}{r['tokens_per_second']:>8.1f}{r['speedup']:>9.2f}{_cell(r.get('decode_speedup'), 7)}"
            f"{_cell(r.get('speedup_vs_loop'), 8)}{_cell(r.get('decode_speedup_vs_loop'), 9)}{_cell(r.get('predicted_speedup'), 7)}"
            f"{r['M']:>6.2f}{_cell(r['alpha'], 7)}{('yes' if r['identical_to_plain'] else 'NO'):>6}"
            f"{_cell(r['overhead_share'] and 100 * r['overhead_share'], 6, 1)}{_cell(r['memory_ratio'], 6)}"
        )
    lines.append(
        "speedup: time of plain generate / this, same repeat (median); decode: the same after the prefill (time to the "
        "first new token); vs loop, dec/loop: the same against our loop with nothing skipped; pred.: what the latency "
        "profile predicts for the dec/loop "
        "ratio from the run's own steps; "
        "same: tokens identical to plain; ovh%: time outside model forwards; mem: (weights + peak growth) / (weights + KV cache)"
    )
    return "\n".join(lines)
