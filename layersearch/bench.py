"""The benchmark behind ``layersearch bench``: plain generate, transformers' peers and our loop.

Every configuration runs on the same prompts in one process, interleaved repeat by repeat,
so a speedup is a ratio measured side by side (the machine is shared and noisy); figures
are medians over repeats. Besides tokens/s it reports the issue's targets: the empty-mask
loop's cost per token against plain generate, bookkeeping outside model forwards, realized
against predicted speedup, and peak memory against weights + KV cache.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch

from layersearch.mask import SkipMask
from layersearch.profile import LatencyProfile
from layersearch.runtime.baseline import hf_generate
from layersearch.runtime.decoder import GenerationResult, SpeculativeDecoder
from layersearch.runtime.drafting import DraftPolicy
from layersearch.runtime.memory import PeakMemory
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


@dataclass(frozen=True)
class Config:
    """One way of generating: a name, a function of (prompt ids, new tokens), maybe a mask."""

    name: str
    generate: Callable[[torch.Tensor, int], GenerationResult]
    mask: SkipMask | None = None
    model: torch.nn.Module | None = None  # set for our loop: memory is judged against its weights and cache


@dataclass
class Measurement:
    """All repeats of one configuration on one domain."""

    totals: list[float] = field(default_factory=list)  # seconds per repeat (all prompts)
    speedups: list[float] = field(default_factory=list)  # plain total / this total, same repeat
    stats: list[Any] = field(default_factory=list)
    identical: bool = True
    outputs: list[tuple[int, ...]] = field(default_factory=list, repr=False)  # the latest repeat's tokens
    peak_ratio: float | None = None
    error: str | None = None


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


def _with_rule(label: str, rule: str | None, count: int) -> str:
    """A row's label, naming its lookahead rule where several are compared."""
    return label if rule is None or count == 1 and rule == "confidence" else f"{label} [{rule}]"


def _short(name: str) -> str:
    """A model reference short enough for a table: a path's file or folder name."""
    return name.rstrip("/").rsplit("/", 1)[-1].removesuffix(".gguf")


def run_domain(
    configs_: list[Config], prompts: list[torch.Tensor], new_tokens: int, repeats: int, progress, device="cpu"
) -> dict[str, Measurement]:
    """Measure every configuration on ``prompts``, interleaved prompt by prompt.

    Each prompt runs under every configuration back to back, so a load burst on a shared
    machine lands on all of them rather than on whichever owned that stretch of time. The order
    rotates with the repeat and the prompt (repeat r starts with configuration r): whatever
    runs first in a round is measured slower (a GPU warming up, caches), and a fixed order
    would put that bias into every ratio. Speedups are taken within a repeat."""
    results = {c.name: Measurement() for c in configs_}
    reference: list[tuple[int, ...]] = []
    for repeat in range(repeats):
        runs: dict[str, list[GenerationResult]] = {c.name: [] for c in configs_}
        peaks: dict[str, list[float | None]] = {c.name: [] for c in configs_}
        for index, ids in enumerate(prompts):
            shift = (repeat + index) % len(configs_)
            for config in configs_[shift:] + configs_[:shift]:
                if results[config.name].error:
                    continue
                try:
                    with PeakMemory(device) as memory:
                        runs[config.name].append(config.generate(ids, new_tokens))
                except Exception as exc:  # a peer transformers cannot run on this model is reported, not fatal
                    results[config.name].error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                    continue
                peaks[config.name].append(_memory_ratio(memory.peak_bytes, config, [ids], new_tokens))
        totals = {}
        for config in configs_:
            measurement, outputs = results[config.name], runs[config.name]
            if measurement.error:
                continue
            totals[config.name] = sum(o.stats.total_seconds for o in outputs)
            tokens = [o.token_ids for o in outputs]
            if config.name == PLAIN:
                reference = reference or tokens
            measurement.outputs = tokens
            measurement.totals.append(totals[config.name])
            measurement.stats.append(combine([o.stats for o in outputs]))
            known = [p for p in peaks[config.name] if p is not None]
            measurement.peak_ratio = max(known) if known else None
        for name, total in totals.items():
            results[name].speedups.append(totals[PLAIN] / total if PLAIN in totals else float("nan"))
            results[name].identical &= results[name].outputs == reference
        progress(f"repeat {repeat + 1}/{repeats} done")
    return results


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
    }
    if plain is not None and (ratio := _decode_ratio(plain, m)) is not None:
        row["decode_speedup"] = ratio
    if loop is not None and not loop.error and len(loop.totals) == len(m.totals):
        row["speedup_vs_loop"] = statistics.median(a / b for a, b in zip(loop.totals, m.totals))
        # The decode phase alone: the prefill is the same forward for both, and on long prompts
        # (math's 5-shot) it dilutes the end-to-end ratio towards 1. The profile predicts this one.
        if (ratio := _decode_ratio(loop, m)) is not None:
            row["decode_speedup_vs_loop"] = ratio
    if mask is not None and profile is not None and not mask.is_empty and alpha:
        drafts = pooled.draft_forwards / pooled.target_forwards if pooled.target_forwards else None
        row["expected_speedup"] = profile.expected_speedup(M, alpha, mask, context, drafts=drafts)
    if profile is not None and pooled.steps and name != LOOP:
        row.update(_step_prediction(profile, pooled.steps))
        if row.get("predicted_speedup") and "decode_speedup_vs_loop" in row:
            row["realized_over_predicted"] = row["decode_speedup_vs_loop"] / row["predicted_speedup"]
    return row


def _decode_ratio(base: Measurement, m: Measurement) -> float | None:
    """Median over repeats of base's decode-phase seconds / m's (None where either lacks a prefill time)."""
    if base.error or len(base.totals) != len(m.totals):
        return None
    if not all(st.prefill_seconds > 0 for st in (*base.stats, *m.stats)):
        return None
    return statistics.median(
        _decode_seconds(a, sa) / _decode_seconds(b, sb) for a, sa, b, sb in zip(base.totals, base.stats, m.totals, m.stats)
    )


def _decode_seconds(total: float, stats) -> float:
    """Seconds after the prefill (all prompts of one repeat)."""
    return max(total - stats.prefill_seconds, 1e-9)


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


def _memory_ratio(peak_extra: int | None, config: Config, prompts, new_tokens: int) -> float | None:
    """(weights + peak growth during generation) / (weights + final KV cache)."""
    if peak_extra is None or config.model is None:
        return None
    from layersearch.runtime.memory import kv_cache_bytes, weight_bytes

    model = config.model
    longest = max(p.shape[1] for p in prompts) + new_tokens
    weights = weight_bytes(model)
    return (weights + peak_extra) / (weights + kv_cache_bytes(model, longest))


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
