"""The benchmark behind ``layersearch bench``: plain generate, transformers' peers and our loop.

Every configuration runs on the same prompts in one process, interleaved repeat by repeat,
so a speedup is a ratio measured side by side (the machine is shared and noisy); figures
are medians over repeats. Besides tokens/s it reports the issue's targets: the empty-mask
loop's cost per token against plain generate, bookkeeping outside model forwards, realized
against predicted speedup, and peak memory against weights + KV cache.
"""

from __future__ import annotations

import contextlib
import os
import statistics
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from layersearch.decoder.build import assemble
from layersearch.common.errors import LayersearchError
from layersearch.common.modelfile import naming
from layersearch.common.outputs import OutputTarget
from layersearch.runtime import DRAFT_THRESHOLD, MAX_DRAFT
from layersearch.masks.mask import SkipMask
from layersearch.evaluation.measure import Configuration, Measurement, acceptance_per_position, compare, median_speedup
from layersearch.profiling.profile import LatencyProfile
from layersearch.runtime.baseline import hf_generate
from layersearch.runtime.draft_policy import DraftPolicy
from layersearch.runtime.loop import GenerationResult
from layersearch.runtime.stats import combine
from layersearch.decoder.spec import DrafterSpec, LookaheadSpec, compile_wanted
from layersearch.decoder.fragments import (drafter_kinds, drafter_spec, loaded_spec, mask_source, model_names, parse_drafters,
                                        parse_items, policy_lookahead, split_named, split_quant)

PLAIN = "plain generate"
STATIC = "plain generate static"  # transformers' static cache, auto-compiled: the fastest path GPU users run
LOOP = "ours: nothing skipped"  # our loop's plain decoding: the baseline the profile predicts against
ASSISTED = "assisted"  # the peer "assisted:MODEL": transformers' assisted generation with a draft model
#: Rows of transformers' static cache: each compiles per cache length, so each is warmed on every prompt.
STATIC_CACHE_PREFIXES = (STATIC, "hf assisted static")
#: Timed repeats by default: 5 on CUDA (min / median / max reported), 3 on CPU.
GPU_REPEATS = 5


def _hf_prompt_lookup(model) -> Configuration:
    return Configuration("hf prompt-lookup (10)", lambda ids, n: hf_generate(model, ids, n, prompt_lookup_num_tokens=10))


def _hf_early_exit(model) -> Configuration:
    exit_layer = model.config.num_hidden_layers // 2
    return Configuration(f"hf early-exit (layer {exit_layer})",
                         lambda ids, n: hf_generate(model, ids, n, assistant_early_exit=exit_layer))


#: transformers' own speculative modes that need no draft model: name -> (model) -> its row.
PEER_ROWS: dict[str, Callable[[Any], Configuration]] = {"prompt-lookup": _hf_prompt_lookup, "early-exit": _hf_early_exit}
PEERS = tuple(PEER_ROWS)

def configs(
    model, masks: Sequence[SkipMask], policy: DraftPolicy, peers: bool | Sequence[str], drafters: Sequence[str] = (),
    *, draft_models: Mapping[str, torch.nn.Module] | None = None, lookaheads: Sequence[str] = (), vocab=None,
    compile: bool = False,
) -> list[Configuration]:
    """Plain generate, transformers' peers, our loop per mask (and per lookahead rule), and our
    other drafters; every row of ours is a spec (:mod:`layersearch.decoder.fragments`) built by
    :func:`layersearch.decoder.build.assemble`.

    Peers: ``prompt-lookup``, ``early-exit`` and ``assisted:MODEL`` (assisted generation with that
    draft model and transformers' own defaults). Drafters (items of
    :func:`layersearch.decoder.fragments.parse_drafters`): ``prompt-lookup`` (n-grams of 3..2, HF's
    heuristic length schedule capped at 4), ``hybrid`` (lookup, else the first mask that skips
    something), any other registered drafter (with that mask), ``model:MODEL`` (our ModelDrafter)
    and ``hybrid:MODEL`` (lookup, else the draft model). ``draft_models`` maps each MODEL named
    there to its loaded model. ``lookaheads`` (rule names; empty: the policy's own rule) multiply
    the rows that draft with a model: the masks that skip something and the draft models.
    ``vocab`` (a VocabSubset) adds, for each of those, a row whose draft scores only that subset
    (FR-Spec), under the first rule. ``compile``: our rows run captured forwards. On CUDA,
    transformers' static-cache ``generate`` (:data:`STATIC`) joins as the baseline users run there."""
    draft_models = dict(draft_models or {})
    rules: list[tuple[str | None, LookaheadSpec]] = [(name, policy_lookahead(policy, name)) for name in lookaheads]
    rules = rules or [(None, policy_lookahead(policy))]
    result = [Configuration(PLAIN, lambda ids, n: hf_generate(model, ids, n))]
    if model.device.type == "cuda":
        result.append(Configuration(STATIC, lambda ids, n: hf_generate(model, ids, n, cache_implementation="static")))
    result += _peer_configs(model, peers, draft_models, static=model.device.type == "cuda")
    for mask in masks:
        label = LOOP if mask.is_empty else f"ours: {mask.provenance.get('label') or mask.short_string()}"
        if mask.is_empty:  # nothing drafts: the rule is moot, and the row is the loop's baseline
            result.append(_row(label, model, loaded_spec(mask_source=mask_source(mask), lookahead=rules[0][1]), mask, compile=compile))
            continue
        for rule_name, rule in rules:
            spec = loaded_spec(mask_source=mask_source(mask), lookahead=rule)
            result.append(_row(_with_rule(label, rule_name, len(rules)), model, spec, mask, compile=compile))
        if vocab is not None:
            spec = loaded_spec(mask_source=mask_source(mask), lookahead=rules[0][1], drafter=DrafterSpec(vocab=vocab.n))
            result.append(_row(_with_rule(f"{label} vocab {vocab.n}", rules[0][0], len(rules)), model, spec, mask, vocab=vocab,
                               compile=compile))
    return result + _drafter_configs(model, masks, drafters, draft_models, rules, policy_lookahead(policy), vocab, compile)


def _row(label: str, model, spec, mask: SkipMask | None, **given: Any) -> Configuration:
    """The bench row ``label``: ``spec``'s decode loop on ``model`` (``given``: objects already loaded)."""
    return Configuration(label, assemble(model, spec, **given).generate, mask, model)


def _peer_configs(model, peers: bool | Sequence[str], draft_models: Mapping[str, torch.nn.Module],
                  static: bool = False) -> list[Configuration]:
    """transformers' own speculative modes, in the order given; with ``static`` (CUDA), each
    assisted peer also with a static cache (:func:`assisted_static_row`), the GPU peer beside
    transformers' static-cache generate."""
    result = []
    for peer in PEERS if peers is True else tuple(peers or ()):
        kind, name = split_named(peer)
        if name is None:
            result.append(PEER_ROWS[kind](model))
        else:  # assisted:MODEL
            assistant = draft_models[name]
            result.append(Configuration(f"hf assisted ({_short(name)})", partial(hf_generate, model, assistant_model=assistant)))
            if static:
                result.append(assisted_static_row(model, name, assistant))
    return result


def assisted_static_row(model, name: str, assistant: torch.nn.Module) -> Configuration:
    """transformers' assisted generation over a static cache (``cache_implementation="static"``
    with ``assistant_model``): on CUDA, transformers compiles the verifier's forward over it, the
    assistant runs uncompiled. The draft-model peer of a GPU bench."""
    return Configuration(f"hf assisted static ({_short(name)})",
                         lambda ids, n: hf_generate(model, ids, n, assistant_model=assistant, cache_implementation="static"))


def _drafter_configs(
    model, masks: Sequence[SkipMask], drafters: Sequence[str], draft_models: Mapping[str, torch.nn.Module],
    rules: Sequence[tuple[str | None, Any]], own_rule: Any, vocab=None, compile: bool = False,
) -> list[Configuration]:
    """The rows of the ``drafters`` items: each a spec of its drafter (see :func:`configs`)."""
    from layersearch.runtime.drafters import drafter_entry
    from layersearch.runtime.lookahead import HeuristicLookahead

    result = []
    fallback = next((m for m in masks if not m.is_empty), None)
    first_name, first = rules[0]
    for item in drafters:
        kind, name = split_named(item)
        drafter = drafter_spec(item)
        entry = drafter_entry(drafter.name)
        if name is not None:  # a mixing drafter's rows keep the first rule: its lookup part has its own cap
            model_label = f"ours: {kind} ({_short(name)})"
            for rule_name, rule in (rules[:1] if entry.mixes else rules):
                spec = loaded_spec(drafter=drafter, mask_source=mask_source(None), lookahead=rule)
                result.append(_row(_with_rule(model_label, rule_name, len(rules)), model, spec, None, draft=draft_models[name], compile=compile))
            if vocab is not None and entry.takes_head and not entry.mixes:
                spec = loaded_spec(drafter=drafter_spec(item, vocab.n), mask_source=mask_source(None), lookahead=first)
                label = _with_rule(f"{model_label} vocab {vocab.n}", first_name, len(rules))
                result.append(_row(label, model, spec, None, draft=draft_models[name], vocab=vocab, compile=compile))
        elif not entry.runs_model:
            # a drafter that runs no model drafts on HF's schedule for prompt lookup: the heuristic rule, never above 4
            spec = loaded_spec(drafter=drafter, mask_source=mask_source(None), lookahead=LookaheadSpec("heuristic", 4))
            result.append(_row(f"ours: {kind} (<=4)", model, spec, None, lookahead=HeuristicLookahead(4, ceiling=4), compile=compile))
        elif fallback is not None:  # a drafter taking a plan: the first mask that skips something, the policy's rule
            spec = loaded_spec(drafter=drafter, mask_source=mask_source(fallback), lookahead=own_rule)
            label = fallback.provenance.get("label") or fallback.short_string()
            result.append(_row(f"ours: {kind} ({label})", model, spec, None, compile=compile))
    return result


def spec_configs(loaded, specs: Sequence[tuple[str, Any, Any]]) -> list[Configuration]:
    """One row per decoder spec: ``specs`` holds (label, DecoderSpec, SpecFiles) for each file;
    the row is ``spec: <label>``, decoding greedily (the bench checks outputs against plain
    ``generate``) with whatever kernels the bench has switched on for every row."""
    from layersearch.decoder.build import build_decoder

    result = []
    for label, spec, files in specs:
        built = build_decoder(loaded, spec, files, kernels="stock")  # the bench switches kernels around every row
        greedy = built.sampling(do_sample=False)
        generate: Callable[[torch.Tensor, int], GenerationResult]
        if built.speculative is None:  # a plain spec: transformers' generate
            generate = partial(hf_generate, loaded.model, sampling=greedy)
        else:
            generate = partial(built.speculative.generate, sampling=greedy)
        result.append(Configuration(f"spec: {label}", generate, _fixed_mask(built.spec), loaded.model))
    return result


def _fixed_mask(spec) -> SkipMask | None:
    """The mask a spec always drafts with, alone (the profile predicts its row), else None."""
    from layersearch.runtime.drafters import drafter_entry

    source = spec.mask_source
    if not drafter_entry(spec.drafter.name).predicted or spec.drafter.model is not None or source.kind != "mask":
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
    configs_: list[Configuration], prompts: list[torch.Tensor], new_tokens: int, repeats: int, progress, device="cpu",
    compiled: bool = False,
) -> dict[str, Measurement]:
    """Measure every configuration on ``prompts``, interleaved prompt by prompt, with speedups
    against the fastest plain path present: transformers' static-cache ``generate`` on CUDA,
    plain ``generate`` elsewhere (:func:`layersearch.evaluation.measure.compare`). ``compiled``:
    one untimed generation per configuration first, so compiling (paid once per shape) stays out
    of the timed repeats."""
    runs = warm_ups(configs_, prompts, compiled)
    if runs:
        progress(f"compiling: one untimed generation per configuration ({len(configs_)}) on the longest prompt"
                 + (f", {len(runs) - len(configs_)} more of transformers' static-cache rows" if len(runs) > len(configs_) else ""))
    for config, prompt in runs:
        with contextlib.suppress(Exception):  # one that fails is reported by its measured runs
            config.generate(prompt, new_tokens)
    return compare(configs_, prompts, repeats, new_tokens=new_tokens, baseline=baseline_name(configs_), progress=progress,
                   device=device)


def warm_ups(configs_: Sequence[Configuration], prompts: list[torch.Tensor], compiled: bool) -> list[tuple[Configuration, torch.Tensor]]:
    """The untimed generations before the timed repeats: where anything compiles (``compiled``,
    or a static-cache row of transformers', which compiles on CUDA), every configuration once on
    the longest prompt (the largest cache and shapes), and each static-cache row of transformers'
    on every other prompt too (it compiles per cache length): compile seconds stay out of every
    row's timings, HF's as ours."""
    static = [c for c in configs_ if c.name.startswith(STATIC_CACHE_PREFIXES)]
    if not (compiled or static) or not prompts:
        return []
    longest = max(prompts, key=lambda ids: ids.shape[-1])
    runs = [(config, longest) for config in configs_]
    runs += [(config, ids) for config in static for ids in prompts if ids is not longest]
    return runs


def baseline_name(configs_: Sequence[Configuration]) -> str:
    """The row speedups are reported against: :data:`STATIC` where it runs (CUDA), else :data:`PLAIN`."""
    return STATIC if any(c.name == STATIC for c in configs_) else PLAIN


def summarize(
    name: str, m: Measurement, profile: LatencyProfile | None, context: int, mask: SkipMask | None,
    loop: Measurement | None = None, plain: Measurement | None = None, eager: Measurement | None = None,
) -> dict[str, Any]:
    """Medians and target checks of one configuration; ``loop`` is our plain loop's measurement
    (the baseline for realized-vs-predicted: the profile costs our forwards, not generate()'s),
    ``plain`` the baseline plain ``generate`` (for the decode-phase speedup beside the end-to-end one),
    ``eager`` transformers' eager ``generate`` where the baseline is its static-cache path (a second column)."""
    if m.error:
        return {"config": name, "error": m.error}
    pooled = combine(m.stats)
    M, alpha = pooled.mean_accepted_length, pooled.acceptance_rate
    row: dict[str, Any] = {
        "config": name,
        "path": pooled.path,
        "compile_seconds": pooled.compile_seconds,  # inside the measured runs (the untimed warm-up compiles first)
        "tokens_per_second": statistics.median(s.tokens_per_second for s in m.stats),
        "speedup": statistics.median(m.speedups),
        "speedup_min": min(m.speedups) if m.speedups else None,
        "speedup_max": max(m.speedups) if m.speedups else None,
        "speedup_per_repeat": list(m.speedups),
        "seconds_per_repeat": list(m.totals),  # the raw timings: every prompt of a repeat, wall seconds
        "M": M,
        "alpha": alpha,
        "identical_to_plain": m.identical,
        # Share of wall time outside model forwards (our loop only; generate() is not instrumented).
        "overhead_share": (pooled.bookkeeping_seconds / pooled.total_seconds) if pooled.bookkeeping_seconds is not None else None,
        "memory_ratio": m.peak_ratio,
        # vLLM's phases, one definition for every row (DecodeStats): time to first token, time per
        # output token after it, and a draft model's own prompt forward (its own column).
        "ttft_ms": 1e3 * statistics.median(s.ttft for s in m.stats),
        "tpot_ms": _median_ms([s.tpot for s in m.stats]),
        "draft_prefill_ms": 1e3 * statistics.median(s.draft_prefill_seconds / max(s.generations, 1) for s in m.stats),
        **{k: v for k, v in acceptance_per_position(pooled.steps).items() if k != "drafted_per_position"},
    }
    if plain is not None and (ratio := median_speedup(plain, m, decode=True)) is not None:
        row["decode_speedup"] = ratio
    if eager is not None and (ratio := median_speedup(eager, m)) is not None:
        row["speedup_vs_eager_generate"] = ratio
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
        row["predicted_on"] = profile.predicts_for  # the device the profile's costs were measured on
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


def _median_ms(seconds: list[float | None]) -> float | None:
    """The median in milliseconds, None where any is missing."""
    known = [v for v in seconds if v is not None]
    return None if len(known) != len(seconds) else 1e3 * statistics.median(known)


def _cell(value: float | None, width: int, decimals: int = 2) -> str:
    """A right-aligned number, or '-' where there is none."""
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{decimals}f}"


def format_table(domain: str, rows: list[dict[str, Any]]) -> str:
    """A plain-text table of one domain's rows (``pred.`` names the device the profile predicts for)."""
    devices = sorted({r["predicted_on"] for r in rows if r.get("predicted_on")})
    baselines = sorted({r["baseline"] for r in rows if r.get("baseline")})
    head = (f"{'config':<36}{'path':>5}{'tok/s':>8}{'speedup':>9}{'decode':>7}{'vs loop':>8}{'dec/loop':>9}{'pred.':>7}{'M':>6}{'alpha':>7}"
            f"{'same':>6}{'ovh%':>6}{'mem':>6}{'TTFT':>7}{'TPOT':>7}{'dpre':>6}")
    lines = [f"== {domain}" + (f" (speedups over {', '.join(baselines)})" if baselines else ""), head]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['config']:<36}  not run: {r['error']}")
            continue
        lines.append(
            f"{r['config']:<36}{r.get('path', 'eager')[:4]:>5}{r['tokens_per_second']:>8.1f}{r['speedup']:>9.2f}{_cell(r.get('decode_speedup'), 7)}"
            f"{_cell(r.get('speedup_vs_loop'), 8)}{_cell(r.get('decode_speedup_vs_loop'), 9)}{_cell(r.get('predicted_speedup'), 7)}"
            f"{r['M']:>6.2f}{_cell(r['alpha'], 7)}{('yes' if r['identical_to_plain'] else 'NO'):>6}"
            f"{_cell(r['overhead_share'] and 100 * r['overhead_share'], 6, 1)}{_cell(r['memory_ratio'], 6)}"
            f"{_cell(r.get('ttft_ms'), 7, 0)}{_cell(r.get('tpot_ms'), 7, 0)}{_cell(r.get('draft_prefill_ms'), 6, 0)}"
        )
    lines.append(
        "path: capt(ured: compiled forwards, static cache) or eage(r); "
        "speedup: time of the baseline (plain generate; on CUDA its static-cache path) / this, same repeat (median; min and "
        "max in the report); decode: the same for the decode phase (after the "
        "first delivered tokens, which are left out with their time, and without a draft model's prompt forward); vs loop, dec/loop: the same against our loop with nothing skipped; pred.: what the latency "
        "profile predicts for the dec/loop "
        f"ratio from the run's own steps{' on ' + ', '.join(devices) if devices else ''}; "
        "same: tokens identical to plain; ovh%: time outside model forwards; mem: (weights + peak growth) / (weights + KV cache); "
        "TTFT, TPOT: time to first token and per output token after it (ms, vLLM's definitions); dpre: the draft model's prompt "
        "forward (ms)"
    )
    return "\n".join(lines)


# ----- the ``layersearch bench`` run: checked settings, draft models, the per-domain loop -------------
@dataclass(frozen=True)
class BenchSettings:
    """What one ``bench`` run measures (the command's options as values).

    ``peers`` and ``drafters`` are items of the ``KIND:MODEL@QUANT`` grammar
    (:mod:`layersearch.decoder.fragments`), ``lookaheads`` registered rule names, ``specs`` decoder
    spec files; ``domains`` may include the domain of the ``prompts`` file."""

    model: str
    out: str | Path | OutputTarget
    domains: tuple[str, ...] = ("summarization", "math", "code")
    prompts: str | None = None
    prompts_per_domain: int = 3
    max_new_tokens: int = 64
    repeats: int = 3
    skip_ratios: str = "0.1,0.2,0.3,0.45"
    masks: str = ""
    profile: str | None = None
    peers: tuple[str, ...] = PEERS
    drafters: tuple[str, ...] = field(default_factory=lambda: drafter_kinds()[0])  # the registry's drafters needing no model
    lookaheads: tuple[str, ...] = ()
    specs: str = ""
    draft_vocab: int = 0
    split: str | None = None
    device: str = "cpu"
    dtype: str | None = None
    kernels: str = "auto"
    max_draft: int = MAX_DRAFT
    draft_threshold: float = DRAFT_THRESHOLD
    adaptive_threshold: bool = False
    compile: str | None = None  # captured forwards: auto / on / off (None: auto)

    def __post_init__(self) -> None:
        from layersearch.common.checks import check_int

        for name in ("repeats", "prompts_per_domain", "max_new_tokens"):
            check_int(getattr(self, name), "--" + name.replace("_", "-"))
        check_int(self.draft_vocab, "draft_vocab", minimum=0)
        parse_items(",".join(self.peers), "peers", PEERS, (ASSISTED,))
        parse_drafters(",".join(self.drafters))
        check_lookaheads(self.lookaheads)

    @property
    def policy(self) -> DraftPolicy:
        """The draft policy of the mask rows (the default rule's cap and threshold)."""
        return DraftPolicy(self.max_draft, self.draft_threshold)


def check_lookaheads(names: Sequence[str], flag: str = "lookaheads") -> tuple[str, ...]:
    """``names`` if each is a registered lookahead rule (:data:`layersearch.runtime.LOOKAHEADS`)."""
    from layersearch.runtime import LOOKAHEADS

    unknown = [n for n in names if n not in LOOKAHEADS]
    if unknown:
        raise LayersearchError(f"{flag}: unknown rule {unknown[0]!r} (choose from {', '.join(LOOKAHEADS)})")
    return tuple(names)


def bench_masks(skip_ratios: str, masks: str, info: Any) -> list[SkipMask]:
    """``bench``'s masks: an evenly spread one per ``skip_ratios`` value (labelled ``uniform R``),
    then the files of ``masks`` (each checked against the model; labelled by file name unless
    the file carries a label)."""
    ratios = []
    for part in filter(None, skip_ratios.split(",")):
        try:
            ratios.append(float(part))
        except ValueError:
            raise LayersearchError(f"skip_ratios must be comma-separated numbers, got {part!r}", fields="skip_ratios") from None
    result = [SkipMask.uniform(info.num_layers, r, info).with_provenance(label=f"uniform {r:g}") for r in ratios]
    for path in filter(None, masks.split(",")):
        mask = SkipMask.load(path, model=info)
        result.append(mask if mask.provenance.get("label") else mask.with_provenance(label=Path(path).stem))
    # A mask that changes nothing is the loop's own row, which every bench has already: two rows
    # of one name would pool their runs (and read as outputs that differ).
    return [mask for mask in result if not mask.is_empty]


@dataclass
class PreparedBench:
    """A bench checked and loaded: the model, the spec rows, the draft models and FR-Spec's subset."""

    settings: BenchSettings
    loaded: Any
    spec_rows: list[Configuration]
    draft_models: dict[str, Any]
    vocab: Any


def prepare_bench(settings: BenchSettings, load: Callable[[], Any], say: Callable[[str], None]) -> PreparedBench:
    """Check everything that needs no model (the prompt file, quantization, spec files), then
    ``load()`` the model and load what needs it; bad input fails before the slow load."""
    from layersearch.frspec.vocab import draft_vocabulary

    _domains(settings)
    items = settings.peers + settings.drafters
    for name in model_names(items):
        from layersearch.models.quantize import check_quant

        check_quant(split_quant(name)[1], settings.device, settings.dtype)
    specs = read_specs(settings.specs, settings.model)  # a bad spec or file it names fails before the model load
    loaded = load()
    spec_rows = _spec_rows(loaded, specs)
    draft_models = load_draft_models(loaded, items, settings.device, settings.dtype, say)
    return PreparedBench(settings, loaded, spec_rows, draft_models, draft_vocabulary(loaded, settings.draft_vocab))


def _check_prompts_fit(loaded: Any, prompts: dict[str, list[str]], new_tokens: int) -> None:
    """Every domain's prompts + ``new_tokens`` against the model's context (one error line)."""
    from layersearch.models.context import check_all_fit

    lengths = ((f"{domain}: prompt {index + 1}", len(loaded.tokenizer(text).input_ids))
               for domain, texts in prompts.items() for index, text in enumerate(texts))
    check_all_fit(loaded, lengths, new_tokens)


def run_bench(prepared: PreparedBench, say: Callable[[str], None], show: Callable[[str], None]) -> dict[str, Any]:
    """Measure every domain's configurations, ``show`` each domain's table and write the report to
    ``settings.out`` after each domain (a long run stopped later keeps what it measured)."""
    from layersearch.data import load_prompts
    from layersearch.common.jsonfile import write_json_atomic
    from layersearch.kernels.select import choose_kernels, model_kernels

    settings, loaded = prepared.settings, prepared.loaded
    domains = _domains(settings)
    split = settings.split or "test"  # a comparison: held-out prompts by default
    prompts = {d: [p.text for p in load_prompts(d, settings.prompts_per_domain, seed=0, split=split, tokenizer=loaded.tokenizer)]
               for d in domains}
    _check_prompts_fit(loaded, prompts, settings.max_new_tokens)  # before profiles and drafts: the one context check
    masks = [SkipMask.none(loaded.info.num_layers, loaded.info)] + bench_masks(settings.skip_ratios, settings.masks, loaded.info)
    profile = _bench_profile(settings, loaded, say)
    compiled = compile_wanted(settings.compile or "auto", loaded.model.device.type)
    kernels = choose_kernels(settings.kernels, profile, loaded.model.dtype)  # compiled forwards run the numba kernels as custom ops
    say(f"kernels: {kernels}; compile: {'on' if compiled else 'off'}")
    from layersearch.common.jsonfile import BENCH_SCHEMA_VERSION

    from layersearch.common.provenance import provenance
    from layersearch.profiling.profiler import device_name

    report: dict[str, Any] = {"schema_version": BENCH_SCHEMA_VERSION, "model": loaded.info.to_dict(),
                              "profile": profile.to_dict(), "kernels": kernels, "domains": {},
                              "device": device_name(loaded.model.device), "repeats": settings.repeats,
                              **provenance()}  # argv, commit and versions: what made these figures
    options = dict(peers=settings.peers, drafters=settings.drafters, draft_models=prepared.draft_models,
                   lookaheads=settings.lookaheads, vocab=prepared.vocab, compile=compiled)
    with model_kernels(loaded.model, kernels):  # every configuration, plain generate included, runs them
        for domain in domains:
            ids = [loaded.tokenizer(text, return_tensors="pt").input_ids.to(loaded.model.device) for text in prompts[domain]]
            context = int(sum(i.shape[1] for i in ids) / len(ids)) + settings.max_new_tokens // 2
            cfgs = configs(loaded.model, masks, settings.policy, **options) + list(prepared.spec_rows)
            say(f"{domain}: {len(ids)} prompts x {len(cfgs)} configurations x {settings.repeats} repeats")
            measured = run_domain(cfgs, ids, settings.max_new_tokens, settings.repeats, say, device=loaded.model.device,
                                  compiled=compiled)
            baseline = baseline_name(cfgs)
            loop, plain = measured.get(LOOP), measured.get(baseline)
            eager = measured.get(PLAIN) if baseline != PLAIN else None
            rows = [summarize(c.name, measured[c.name], profile, context, c.mask, loop, plain, eager) for c in cfgs]
            for row in rows:
                row["baseline"] = baseline  # every row names what its speedup is over
            report["domains"][domain] = {"context": context, "baseline": baseline, "rows": rows}
            show(format_table(domain, rows))
            write_json_atomic(settings.out, report)
    return report


def _domains(settings: BenchSettings) -> list[str]:
    """The domains and the prompt file's domain (the file checked: it fails before the model loads)."""
    from layersearch.data.user import choose_rows, domain_for

    domains = list(settings.domains)
    if settings.prompts:
        choose_rows(settings.prompts, settings.prompts_per_domain, 0, settings.split or "test")
        domains.append(domain_for(settings.prompts))
    return domains


def read_specs(text: str, model: str) -> list[tuple[str, str, Any, Any]]:
    """(file, row label, DecoderSpec, SpecFiles) for each file of the comma-separated ``text``,
    every file it names read and checked; a spec bound to a model is checked against it once
    loaded (:func:`_spec_rows`)."""
    from layersearch.decoder.build import read_spec_files
    from layersearch.decoder.spec import DecoderSpec

    paths = [p.strip() for p in text.split(",") if p.strip()]
    if text.strip() and not paths:
        raise LayersearchError("specs: no spec file named", fields="specs")
    stems = [Path(p).stem for p in paths]
    specs = []
    for path, stem in zip(paths, stems):
        spec = DecoderSpec.load(path)
        _check_spec_model(path, spec, model)
        _check_placement(path, spec)
        specs.append((path, stem if stems.count(stem) == 1 else path, spec, read_spec_files(spec)))
    return specs


def _check_spec_model(path: str, spec: Any, model: str) -> None:
    """A spec not yet bound to a model (no fingerprint) must name the bench's ``model``."""
    if spec.model.info is not None:
        return
    ref = spec.model.ref
    same = ref.ref == model or ref.path and _real(ref.ref) == _real(model)
    if not same:
        raise LayersearchError(f"{path}: the spec is for model {ref.ref!r}, not the benched model {model!r}")


def _check_placement(path: str, spec: Any) -> None:
    """The spec's device and dtype must be names we know, though the bench runs on its own."""
    from layersearch.models.loading import check_device_name, resolve_dtype

    try:
        check_device_name(spec.model.device)
        if spec.model.dtype is not None:
            resolve_dtype(spec.model.dtype)
    except LayersearchError as exc:
        raise LayersearchError(f"{path}: {exc}") from None


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _spec_rows(loaded, specs) -> list[Configuration]:
    """The bench rows of the spec files, each checked against the loaded model first; an error
    names its file."""
    rows = []
    for path, label, spec, files in specs:
        try:
            spec.check_model(loaded.info)
            rows += spec_configs(loaded, [(label, spec, files)])
        except LayersearchError as exc:
            raise LayersearchError(f"{path}: {exc}") from None
    return rows


def load_draft_models(loaded, items: Sequence[str], device: str, dtype: str | None, say: Callable[[str], None]) -> dict[str, Any]:
    """The draft models that ``items`` (peers and drafters) name, each loaded once in the target's
    dtype and checked against its vocabulary; ``MODEL@int8`` is that model with int8 weights."""
    from layersearch.decoder.build import load_draft_model
    from layersearch.models.quantize import quantize_draft, quantized_copy

    names = model_names(items)
    models: dict[str, Any] = {}
    for name in names:
        ref, quant = split_quant(name)
        plain = models.get(ref)
        if plain is None:
            say(f"loading draft model {ref}")
            plain = load_draft_model(ref, loaded, device, dtype, progress=say).model
            if ref in names:
                models[ref] = plain
        if quant is not None:
            models[name] = quantized_copy(plain, quant) if ref in names else quantize_draft(plain, quant)
    return models


def _bench_profile(settings: BenchSettings, loaded, say: Callable[[str], None]) -> LatencyProfile:
    from layersearch.profiling.profiler import quick_profile

    if settings.profile:
        from layersearch.profiling.profiler import model_architecture

        profile = LatencyProfile.load(settings.profile)
        with naming(settings.profile):
            profile.check_model(loaded.info, model_architecture(loaded.model))  # the architecture; the device may be another
        if profile.predicts_for.split(":")[0] != loaded.model.device.type:
            say(f"{settings.profile}: costs measured on {profile.predicts_for}; acceptance measured here on "
                f"{loaded.model.device.type}: pred. is the speedup predicted on {profile.predicts_for}")
        return profile
    say("measuring a quick latency profile (give a saved profile to reuse one)")
    return quick_profile(loaded.model, loaded.info, max_verify=16, repeats=3, progress=say, kernels=settings.kernels)
