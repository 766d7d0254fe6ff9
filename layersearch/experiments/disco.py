"""``layersearch disco train`` / ``bench``: train and tune DISCO on a domain, then compare every
draft-length rule on the domain's test prompts in one run (disco.txt Table 1).

Per domain: rows from the train split train the classifier; the validation split tunes tau /
SL_max, the static length and the perplexity threshold (replay with device-measured costs,
:mod:`layersearch.disco.tune`); the test split runs, interleaved with plain ``generate``: static
lengths 1..N (best marked), Self-SD's confidence and adaptive thresholds, HF's heuristic schedule,
HF's ROC-fitted confidence rule, the perplexity rule, DISCO, DISCO trained on each other domain
(transfer), and the oracle (drafting exactly the tokens that get accepted), whose latency is
replayed from the test run's own records: seconds per draft forward and per verification width.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from transformers import PreTrainedModel

from layersearch.evaluation.bench import PLAIN, run_domain, summarize
from layersearch.evaluation.measure import Configuration
from layersearch.decoder.build import assemble
from layersearch.disco.baselines import PerplexityLookahead, RocConfidenceLookahead
from layersearch.disco.classifier import train
from layersearch.disco.collect import Rows, collect
from layersearch.disco.file import DiscoFile
from layersearch.disco.tune import Costs, Tuned, measure_costs, replay, tune
from layersearch.common.errors import LayersearchError
from layersearch.runtime import MAX_DRAFT
from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.evaluation.measure import speedup
from layersearch.runtime.baseline import hf_generate
from layersearch.runtime.loop import eos_ids
from layersearch.runtime.stats import combine
from layersearch.decoder.spec import LookaheadSpec
from layersearch.decoder.fragments import mask_spec

Say = Callable[[str], None]


@dataclass(frozen=True)
class Trained:
    """A domain's DISCO file and what validation chose."""

    file: DiscoFile
    tuned: Tuned


def train_domain(
    model: PreTrainedModel, info: ModelInfo, mask: SkipMask, train_prompts: Sequence[Sequence[int]],
    val_prompts: Sequence[Sequence[int]], *, new_tokens: int, max_draft: int, loss: str, say: Say,
    domain: str, train_rows: Rows | None = None,
) -> Trained:
    """Collect (unless ``train_rows``), train, measure costs, tune; the file is not written here."""
    stop = eos_ids(model)
    if train_rows is None:
        say(f"{domain}: collecting training rows")
        train_rows = collect(model, mask, train_prompts, new_tokens, say, stop)
    say(f"{domain}: collecting validation rows")
    val_rows = collect(model, mask, val_prompts, new_tokens, say, stop)
    classifier, report = train(train_rows, val_rows, loss=loss)
    say(f"{domain}: trained ({report.epochs} epochs, validation loss {report.validation_loss:.3f}); measuring costs")
    costs = measure_costs(model, mask, val_prompts[0], max_draft)
    tuned = tune(classifier, val_rows, costs, max_draft)
    training = {
        "domain": domain, "loss": loss, "train_rows": len(train_rows), "validation_rows": len(val_rows),
        "train_acceptance": float(train_rows.label.mean()) if len(train_rows) else None,
        "epochs": report.epochs, "validation_loss": report.validation_loss, "costs": costs.to_dict(),
        "new_tokens": new_tokens, **tuned.to_dict(),
    }
    file = DiscoFile(info, mask.with_model(info), classifier, tuned.tau, tuned.sl_max, training)
    return Trained(file, tuned)


def rule_configs(
    model, mask: SkipMask, max_draft: int, trained: dict[str, Trained], domain: str, steps: dict[str, list]
) -> list[Configuration]:
    """Plain generate and our loop under every draft-length rule (one decoder each); every
    generation's per-step records are appended to ``steps[rule name]``."""
    own = trained[domain]

    def ours(label: str, rule) -> Configuration:
        """A row of our loop with ``rule``: a registered rule's LookaheadSpec, or a trained /
        baseline rule object (DISCO, ROC confidence, perplexity) in the spec's place."""
        if isinstance(rule, LookaheadSpec):
            decoder = assemble(model, mask_spec(mask, lookahead=rule))
        else:
            decoder = assemble(model, mask_spec(mask), lookahead=rule)

        def generate(ids, n):
            result = decoder.generate(ids, n)
            steps.setdefault(label, []).append(result.stats.steps)
            return result

        return Configuration(label, generate, mask, model)

    result = [Configuration(PLAIN, lambda ids, n: hf_generate(model, ids, n))]
    result += [ours(f"static {k}", LookaheadSpec("static", k)) for k in range(1, max_draft + 1)]
    result += [
        ours("self-sd confidence 0.8", LookaheadSpec("confidence", max_draft, 0.8)),
        ours("self-sd adaptive", LookaheadSpec("adaptive", max_draft, 0.8)),
        ours("hf heuristic", LookaheadSpec("heuristic", max_draft)),  # ceiling 32 (max_draft <= 32)
        ours("hf confidence (roc)", RocConfidenceLookahead(max_draft)),
        ours(f"ppl <= {own.tuned.ppl_threshold:g}", PerplexityLookahead(max_draft, own.tuned.ppl_threshold)),
        ours(f"DISCO (tau {own.file.tau:g}, SL_max {own.file.sl_max})", own.file.lookahead()),
    ]
    result += [ours(f"DISCO trained on {other}", t.file.lookahead()) for other, t in trained.items() if other != domain]
    return result


def record_costs(steps: dict[str, list], max_draft: int) -> Costs:
    """Seconds per draft forward and per verification width, from the test run's per-step records."""
    draft_seconds = draft_forwards = 0.0
    by_width: dict[int, list[float]] = {}
    for generation in (g for runs in steps.values() for g in runs):
        for outcome in generation:
            draft_seconds += outcome.draft_seconds
            draft_forwards += outcome.draft_forwards
            by_width.setdefault(outcome.drafted, []).append(outcome.verify_seconds)
    from layersearch.profiling.profiler import fit_line

    widths = sorted(by_width)
    slope, intercept = fit_line(widths, [statistics.median(by_width[w]) for w in widths]) if len(widths) > 1 else (0.0, 0.0)
    verify = tuple(statistics.median(by_width[k]) if k in by_width else intercept + slope * k for k in range(max_draft + 1))
    return Costs(draft_seconds / draft_forwards if draft_forwards else 0.0, verify)


def modelled_ms(generations: list, costs: Costs) -> float:
    """ms per token of these generations' own steps priced with the common ``costs`` (prefill
    left out): counts from the run, seconds without the shared machine's noise."""
    seconds = sum(s.draft_forwards * costs.draft + costs.verify_seconds(s.drafted) for g in generations for s in g)
    tokens = sum(s.emitted for g in generations for s in g)
    return 1000 * seconds / tokens if tokens else float("nan")


def table_rows(configs: list[Configuration], measured, best_static: str, steps: dict[str, list], costs: Costs) -> list[dict[str, Any]]:
    """Summary rows with wasted draft tokens (drafted - accepted, and stopping forwards) and the
    modelled latency of each rule's own steps (plain decoding: one 1-token forward per token)."""
    rows = []
    for config in configs:
        m = measured[config.name]
        row = summarize(config.name, m, None, 0, None)
        if not m.error and m.stats:
            pooled = combine(m.stats)
            row["wasted_draft_tokens"] = (pooled.drafted - pooled.accepted) / len(m.stats)
            row["stop_forwards"] = (pooled.draft_forwards - pooled.drafted) / len(m.stats)
            row["ms_per_token"] = 1000 * statistics.median(s.run_seconds / s.new_tokens for s in m.stats)
            row["modelled_ms_per_token"] = (
                modelled_ms(steps[config.name], costs) if config.name in steps else 1000 * costs.verify_seconds(0)
            )
        row["best_static"] = config.name == best_static
        rows.append(row)
    return rows


def oracle_row(test_rows: Rows, costs: Costs, measured, plain_ms: float) -> dict[str, Any]:
    """The oracle's replayed latency on the test outputs (prefill seconds from the run's records)."""
    result = replay(test_rows.prompts(), None, 10**6, costs)
    prefill = statistics.median(
        s.prefill_seconds for name, m in measured.items() if name != PLAIN and not m.error for s in m.stats
    )
    seconds = result.seconds + prefill  # prefill: all prompts of one repeat
    ms = 1000 * seconds / result.tokens
    decode_tokens = result.tokens - len(test_rows.prompts())  # the prefill's tokens cost no step
    return {
        "config": "oracle (replayed)", "ms_per_token": ms, "speedup": speedup(plain_ms, 1, ms, 1),  # both per token
        "modelled_ms_per_token": 1000 * (result.seconds / decode_tokens) if decode_tokens else None,
        "M": (result.tokens - len(test_rows.prompts())) / result.steps if result.steps else None,
        "alpha": 1.0, "wasted_draft_tokens": 0.0, "identical_to_plain": True,
    }


def format_table(domain: str, rows: list[dict[str, Any]], tuned: Tuned) -> str:
    """One domain's table, best static marked with '*'."""
    lines = [
        f"== {domain}: validation F1 classifier {tuned.classifier_f1:.3f} vs best static (SL {tuned.static_length}) "
        f"{tuned.static.f1:.3f}; tau {tuned.tau:g}, SL_max {tuned.sl_max}",
        f"{'config':<34} {'ms/tok':>7} {'speedup':>8} {'model':>6} {'m.spd':>6} {'M':>5} {'alpha':>6} {'wasted':>7} {'same':>5}",
    ]
    plain_model = next((r.get("modelled_ms_per_token") for r in rows if r["config"] == PLAIN), None)
    for r in rows:
        if r.get("error"):
            lines.append(f"{r['config']:<34} error: {r['error']}")
            continue
        name = ("* " if r.get("best_static") else "") + r["config"]
        alpha = "-" if r.get("alpha") is None else f"{r['alpha']:.2f}"
        lines.append(
            f"{name:<34} {r.get('ms_per_token', float('nan')):>7.1f} {r.get('speedup') or float('nan'):>7.2f}x "
            f"{r.get('modelled_ms_per_token') or float('nan'):>6.1f} {_ratio(plain_model, r.get('modelled_ms_per_token')):>5.2f}x "
            f"{r.get('M') or 0:>5.2f} {alpha:>6} {r.get('wasted_draft_tokens', 0):>7.1f} {str(r.get('identical_to_plain')):>5}"
        )
    lines.append(
        "ms/tok, speedup: measured wall time (prefill included), plain generate / this; model, m.spd: the rule's own "
        "steps priced with the run's median seconds per draft forward and per verification width (no prefill), "
        "and plain's one-token forwards / this; wasted: drafted - accepted tokens"
    )
    return "\n".join(lines)


def _ratio(a: float | None, b: float | None) -> float:
    return a / b if a and b else float("nan")


# ----- the ``layersearch disco`` workflows: the mask, the prompts, the per-domain bench ---------------
def check_domains(domains: Sequence[str]) -> None:
    """Built-in domains or ``file:PROMPTS.jsonl`` whose files read (before the model loads)."""
    from layersearch.data import DOMAINS, user

    unknown = [d for d in domains if d not in DOMAINS and not user.is_user_domain(d)]
    if unknown:
        raise LayersearchError(f"unknown domain {unknown[0]!r}: choose one of {', '.join(DOMAINS)} (or file:PROMPTS.jsonl)")
    for domain in domains:
        if user.is_user_domain(domain):
            user.read_rows(domain[len(user.PREFIX):])


def draft_mask(loaded: Any, mask_file: SkipMask | None, mask_path: str | None, skip_ratio: float | None,
               max_new_tokens: int) -> SkipMask:
    """The draft's mask on ``loaded``: the mask file's (checked against the model) or an evenly
    spread one (``skip_ratio``, default 0.15); the model's context must hold the new tokens."""
    from layersearch.models.context import check_context

    check_context(loaded, max_new_tokens + 1, f"max_new_tokens {max_new_tokens}", ("max_new_tokens",))  # prompts come on top
    if mask_file is not None:
        try:
            mask_file.check_model(loaded.info)
        except LayersearchError as exc:
            raise LayersearchError(f"{mask_path}: {exc}") from None
        mask = mask_file
    else:
        mask = SkipMask.uniform(loaded.info.num_layers, 0.15 if skip_ratio is None else skip_ratio, loaded.info)
    if mask.is_empty:
        raise LayersearchError("the mask skips nothing: the draft would be the target")
    return mask


def prompt_tokens(loaded: Any, domain: str, n: int, seed: int, split: str) -> list[list[int]]:
    """``n`` prompts of ``domain``'s ``split`` as token id lists."""
    from layersearch.data import load_prompts

    texts = [p.text for p in load_prompts(domain, n, seed=seed, split=split, tokenizer=loaded.tokenizer)]
    return [loaded.tokenizer(t, return_tensors="pt").input_ids[0].tolist() for t in texts]


@dataclass(frozen=True)
class BenchSettings:
    """The sizes of ``disco bench``: prompts per split, tokens, the longest draft, the loss, repeats."""

    train_prompts: int = 8
    val_prompts: int = 4
    test_prompts: int = 4
    seed: int = 0
    max_new_tokens: int = 48
    max_draft: int = MAX_DRAFT
    loss: str = "ce"
    repeats: int = 1


def bench_domains(loaded: Any, mask: SkipMask, domains: Sequence[str], settings: BenchSettings,
                  say: Callable[[str], None], show: Callable[[str], None]) -> dict[str, Any]:
    """Train a classifier per domain, then measure every draft-length rule (DISCO trained on each
    domain included: the transfer) on each domain's test prompts; ``show`` gets each domain's
    table. Returns the report (without ``argv``)."""
    s = settings
    trained = {}
    for domain in domains:
        train = prompt_tokens(loaded, domain, s.train_prompts, s.seed, "train")
        val = prompt_tokens(loaded, domain, s.val_prompts, s.seed, "validation")
        trained[domain] = train_domain(loaded.model, loaded.info, mask, train, val, new_tokens=s.max_new_tokens,
                                       max_draft=s.max_draft, loss=s.loss, say=say, domain=domain)
    report: dict[str, Any] = {"model": loaded.info.to_dict(), "mask": mask.to_dict(), "domains": {}}
    for domain in domains:
        prompts = prompt_tokens(loaded, domain, s.test_prompts, s.seed, "test")
        ids = [torch.tensor([p]) for p in prompts]
        steps: dict[str, list] = {}
        configs = rule_configs(loaded.model, mask, s.max_draft, trained, domain, steps)
        say(f"{domain}: {len(ids)} test prompts x {len(configs)} rules x {s.repeats} repeats")
        measured = run_domain(configs, ids, s.max_new_tokens, s.repeats, say, device=loaded.model.device)
        statics = [c.name for c in configs if c.name.startswith("static ") and not measured[c.name].error]
        best = min(statics, key=lambda n: statistics.median(measured[n].totals))
        costs = record_costs(steps, s.max_draft)
        rows = table_rows(configs, measured, best, steps, costs)
        test_rows = collect(loaded.model, mask, prompts, s.max_new_tokens, None, eos_ids(loaded.model))
        plain_ms = next(r["ms_per_token"] for r in rows if r["config"] == PLAIN)
        rows.append(oracle_row(test_rows, costs, measured, plain_ms))
        report["domains"][domain] = {"rows": rows, "validation": dict(trained[domain].file.training), "costs": costs.to_dict(),
                                     "test_acceptance": float(test_rows.label.mean())}
        show(format_table(domain, rows, trained[domain].tuned))
    return report
