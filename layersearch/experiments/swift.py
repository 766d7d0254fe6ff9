"""SWIFT's bench (``layersearch swift stream``): the dynamic-input-stream experiment (swift.txt §5,
Fig. 7) and the chain/tree ablation.

A stream of held-out prompts switches task domain every ``per_domain`` inputs. Every method
decodes the whole stream greedily, one input after the other, on the same model:

* ``plain``        transformers' ``generate`` (the reference for speedups);
* ``fixed``        one mask searched before the stream on the first domain's *train* prompts
                   (SWIFT's random + GP-UCB search, matchness objective, same count and window):
                   Self-SD's situation in Fig. 7, a static mask meeting later domains;
* ``swift``        :class:`~layersearch.swift.controller.SwiftController`, one object for the
                   whole stream (the optimizer learns across inputs and domains);
* ``fixed-tree`` / ``swift-tree``  the same with SWIFT's token-tree verification
                   (:mod:`layersearch.runtime.tree`), for the ablation table.

Each input is decoded by every method back to back (order rotated per input), so a change of
the machine's load hits all methods alike; each method keeps one decoder for the whole stream.

Per input: tokens, seconds, speedup over ``plain`` on that input, M, alpha, and for the SWIFT
methods the best mask's matchness on the input's window, the phase and the optimization time.
Speculative outputs are checked token for token against ``plain`` (greedy is lossless); a
mismatch is an error, not a data point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from layersearch.common.errors import LayersearchError
from layersearch.runtime import DRAFT_THRESHOLD, MAX_DRAFT
from layersearch.masks.mask import SkipMask
from layersearch.swift import search as swift_search

METHODS = ("plain", "fixed", "swift", "fixed-tree", "swift-tree")


@dataclass(frozen=True)
class StreamInput:
    """One prompt of the stream."""

    index: int
    domain: str
    text: str


@dataclass(frozen=True)
class InputResult:
    """One method on one input."""

    method: str
    index: int
    domain: str
    tokens: int
    seconds: float
    target_forwards: int
    drafted: int
    accepted: int
    matchness: float | None = None  # SWIFT methods: the best mask's matchness on this input's window
    phase: str | None = None
    optimization_seconds: float = 0.0
    mask: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready record."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class StreamReport:
    """Every method's per-input results, the fixed mask and its search."""

    inputs: tuple[StreamInput, ...]
    results: tuple[InputResult, ...]
    fixed_mask: SkipMask
    fixed_matchness: float
    settings: dict[str, Any] = field(default_factory=dict)

    def of(self, method: str) -> list[InputResult]:
        """``method``'s results in stream order."""
        return [r for r in self.results if r.method == method]

    def speedups(self, method: str) -> list[float]:
        """Per input: :func:`layersearch.evaluation.measure.speedup` over plain (same tokens, checked: plain
        seconds / ``method`` seconds); NaN for an input
        that ended at its first token (nothing decoded: the ratio would time the prefill only)."""
        from layersearch.evaluation.measure import speedup

        plain = {r.index: r for r in self.of("plain")}
        ratios = [speedup(plain[r.index].seconds, plain[r.index].tokens, r.seconds, r.tokens) if r.tokens > 1 else None
                  for r in self.of(method)]
        return [float("nan") if ratio is None else ratio for ratio in ratios]

    def summary(self) -> list[dict[str, Any]]:
        """The ablation table: per method M, alpha, tokens/s and speedup over plain (pooled over the stream)."""
        from layersearch.evaluation.measure import speedup

        plain = self.of("plain")
        plain_seconds, plain_tokens = sum(r.seconds for r in plain), sum(r.tokens for r in plain)
        rows = []
        for method in dict.fromkeys(r.method for r in self.results):
            rs = self.of(method)
            tokens, seconds = sum(r.tokens for r in rs), sum(r.seconds for r in rs)
            forwards, drafted, accepted = (sum(getattr(r, k) for r in rs) for k in ("target_forwards", "drafted", "accepted"))
            rows.append({
                "method": method,
                "M": (tokens - len(rs)) / forwards if forwards else 1.0,  # each prefill's token excluded
                "alpha": accepted / drafted if drafted else None,
                "tokens_per_second": tokens / seconds if seconds else 0.0,
                "speedup": speedup(plain_seconds, plain_tokens, seconds, tokens),
                "optimization_seconds": sum(r.optimization_seconds for r in rs),
            })
        return rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready report."""
        return {
            "settings": self.settings,
            "fixed_mask": self.fixed_mask.to_dict(),
            "fixed_mask_search_matchness": self.fixed_matchness,
            "inputs": [s.__dict__ for s in self.inputs],
            "summary": self.summary(),
            "results": [r.to_dict() for r in self.results],
        }


def build_stream(domains: Sequence[str], per_domain: int, *, seed: int = 0) -> tuple[StreamInput, ...]:
    """``per_domain`` held-out (test split) prompts of each domain, domain by domain."""
    from layersearch.data import load_prompts

    if not domains:
        raise LayersearchError("the stream needs at least one domain")
    texts = []
    for domain in domains:
        texts += [(domain, p.text) for p in load_prompts(domain, per_domain, seed=seed, split="test")]
    return tuple(StreamInput(i, d, t) for i, (d, t) in enumerate(texts))


def search_fixed_mask(runtime: Any, num_layers: int, *, skip_ratio: float, gamma: int, trials: int, seed: int = 0,
                      bo_interval: int = swift_search.BO_INTERVAL, kappa: float = swift_search.KAPPA) -> tuple[SkipMask, float]:
    """SWIFT's offline search on a runtime's prompts (matchness over ``gamma`` tokens): the even
    mask, then ``trials`` random / GP-UCB candidates of the same count; the best and its matchness."""
    rng = np.random.default_rng(seed)
    count = swift_search.skip_count(num_layers, skip_ratio)
    best = swift_search.initial_mask(num_layers, skip_ratio)
    best_score = runtime.matchness(best, gamma).matchness
    xs, ys = [[int(b) for b in best.to_flat()]], [best_score]
    for trial in range(trials):
        candidate, _ = swift_search.propose(
            np.asarray(xs, dtype=np.int8), np.asarray(ys), num_layers=num_layers, count=count, trial_number=trial,
            rng=rng, bo_interval=bo_interval, kappa=kappa,
        )
        score = runtime.matchness(candidate, gamma).matchness
        xs.append([int(b) for b in candidate.to_flat()])
        ys.append(score)
        if score > best_score:
            best, best_score = candidate, score
    return best, best_score


def run_stream(
    loaded: Any,
    inputs: Sequence[StreamInput],
    *,
    methods: Sequence[str],
    fixed_mask: SkipMask,
    make_decoder: Callable[[str], Any],
    max_new_tokens: int,
    progress: Callable[[str], None] = lambda message: None,
) -> list[InputResult]:
    """Decode the stream with every method (``make_decoder(method)`` builds a speculative one);
    raises if a speculative output differs from plain decoding."""
    from layersearch.runtime.baseline import hf_generate
    from layersearch.swift import optimization_seconds

    encoded = [loaded.tokenizer(s.text, return_tensors="pt").input_ids for s in inputs]
    hf_generate(loaded.model, encoded[0], 2)  # warm-up, untimed
    order = ["plain", *[m for m in methods if m != "plain"]]
    # One decoder per method for the whole stream (SWIFT's optimizer learns across inputs).
    decoders = {m: None if m == "plain" else make_decoder(m) for m in order}
    results: list[InputResult] = []
    for item, ids in zip(inputs, encoded):
        # Every method on this input back to back, in an order rotated per input, so a change
        # of machine load hits all of them alike (sequential passes measured load, not methods).
        shift = item.index % len(order)
        outputs = {}
        for method in order[shift:] + order[:shift]:
            decoder = decoders[method]
            outputs[method] = hf_generate(loaded.model, ids, max_new_tokens) if decoder is None else decoder.generate(ids, max_new_tokens)
        for method in order:
            out = outputs[method]
            if out.token_ids != outputs["plain"].token_ids:
                raise LayersearchError(f"{method} differs from plain decoding on input {item.index} (a bug: greedy is lossless)")
            results.append(_result(method, item, out, getattr(decoders[method], "controller", None), optimization_seconds))
        progress(f"input {item.index + 1}/{len(inputs)} ({item.domain}, {outputs['plain'].stats.new_tokens} tokens): "
                 + ", ".join(f"{m} {outputs[m].stats.total_seconds:.1f} s" for m in order))
    return results


def _result(method: str, item: StreamInput, out: Any, controller: Any, optimization_seconds) -> InputResult:
    stats = out.stats
    extra: dict[str, Any] = {}
    if method.startswith("swift"):
        controller.finish()
        summary = controller.inputs[-1]
        extra = dict(matchness=summary.matchness, phase=summary.phase,
                     optimization_seconds=optimization_seconds(stats.selections), mask=controller.best.short_string())
    elif method.startswith("fixed"):
        extra = dict(mask=stats.steps[0].mask.short_string() if stats.steps and stats.steps[0].mask else None)
    return InputResult(method, item.index, item.domain, stats.new_tokens, stats.total_seconds, stats.target_forwards,
                       stats.drafted, stats.accepted, **extra)


def fixed_mask_on_train(loaded: Any, domain: str, config: Any, *, prompts: int, trials: int, seed: int) -> tuple[SkipMask, float]:
    """SWIFT's offline search on ``domain``'s train prompts (Self-SD's static situation), with the
    on-the-fly optimiser's settings ``config`` (a :class:`~layersearch.swift.controller.SwiftConfig`)."""
    from layersearch.data import load_prompts
    from layersearch.objectives.measuring import ModelRuntime

    texts = [p.text for p in load_prompts(domain, prompts, seed=seed, split="train")]
    runtime = ModelRuntime.from_texts(loaded, texts, max_new_tokens=config.window + 1, warm_up=False)
    return search_fixed_mask(runtime, loaded.info.num_layers, skip_ratio=config.skip_ratio, gamma=config.window,
                             trials=trials, seed=seed, bo_interval=config.bo_interval, kappa=config.kappa)


def swift_decoder(model: Any, config: Any = None, *, policy: Any = None, sampling: Any = None, verifier: str = "chain",
                  compile: bool | None = None) -> Any:
    """The decode loop driven by a new :class:`~layersearch.swift.controller.SwiftController`
    (``config``: its SwiftConfig; ``policy``: a DraftPolicy; ``sampling``: a SamplingSpec;
    ``verifier``: chain or tree; ``compile``: captured forwards, None as the spec's default),
    built by :func:`layersearch.decoder.build.assemble`. Reuse the decoder,
    or its ``controller``, for every input of a stream: the optimizer's state carries across them."""
    from dataclasses import asdict

    from layersearch.decoder.build import assemble
    from layersearch.models.skipping import decoder_layers
    from layersearch.decoder.spec import LookaheadSpec, MaskSourceSpec, SamplingSpec
    from layersearch.decoder.fragments import loaded_spec, policy_lookahead
    from layersearch.swift.controller import SwiftConfig, SwiftController, check_swift_model

    config = SwiftConfig() if config is None else config
    check_swift_model(model)
    controller = SwiftController(len(decoder_layers(model)), config)
    spec = loaded_spec(mask_source=MaskSourceSpec("swift", swift=asdict(config)), verifier=verifier,
                       lookahead=policy_lookahead(policy) if policy is not None else LookaheadSpec(),
                       sampling=sampling or SamplingSpec())
    return assemble(model, spec, controller=controller, compile=compile)


def method_decoder(method: str, loaded: Any, fixed: SkipMask, config: Any, policy: Any) -> Any:
    """The decoder of one stream method: SWIFT on the fly or the fixed mask, chain or tree verified."""
    from layersearch.decoder.build import assemble
    from layersearch.decoder.fragments import mask_spec

    verifier = "tree" if method.endswith("-tree") else "chain"
    if method.startswith("swift"):
        return swift_decoder(loaded.model, config, policy=policy, verifier=verifier)
    return assemble(loaded.model, mask_spec(fixed, policy, verifier=verifier))


@dataclass(frozen=True)
class StreamJob:
    """What ``swift stream`` runs: the domain-switching stream, the methods, the fixed mask's
    search on the first domain's train prompts, the draft policy (see the module docstring)."""

    domains: str = "translation,math,code"  # comma-separated, in stream order
    methods: str = "plain,fixed,swift,fixed-tree,swift-tree"
    per_domain: int = 3
    max_new_tokens: int = 64
    search_prompts: int = 2
    search_trials: int = 30
    seed: int = 0
    max_draft: int = MAX_DRAFT
    draft_threshold: float = DRAFT_THRESHOLD

    def check(self) -> tuple[list[str], list[str]]:
        """(domains, methods), each checked (one error line, before the model loads)."""
        from layersearch.common.checks import check_int
        from layersearch.data import DOMAINS
        from layersearch.runtime.draft_policy import DraftPolicy

        for value, flag in ((self.per_domain, "per_domain"), (self.max_new_tokens, "max_new_tokens"),
                            (self.search_prompts, "search_prompts")):
            check_int(value, flag)
        check_int(self.search_trials + 1, "search_trials + 1")
        domains = [d.strip() for d in self.domains.split(",") if d.strip()]
        unknown = [d for d in domains if d not in DOMAINS]
        if not domains or unknown:
            raise LayersearchError(f"domains: unknown or empty {', '.join(unknown) or self.domains!r} (known: {', '.join(DOMAINS)})", fields="domains")
        methods = [m.strip() for m in self.methods.split(",") if m.strip()]
        if not methods or any(m not in METHODS for m in methods):
            raise LayersearchError(f"methods: choose from {', '.join(METHODS)}, got {self.methods!r}", fields="methods")
        DraftPolicy(self.max_draft, self.draft_threshold)
        return domains, methods


def stream_experiment(job: StreamJob, config: Any, load: Callable[[], Any], out: Any, plot: Any,
                      settings: dict[str, Any], say: Callable[[str], None]) -> StreamReport:
    """Search the fixed mask on the first domain, decode the stream with every method, write the
    JSON report to ``out`` and the picture to ``plot`` (both checked outputs); the report."""
    import json

    from layersearch.common.outputs import write_output
    from layersearch.evaluation.plots import plot_swift_stream
    from layersearch.runtime.draft_policy import DraftPolicy

    domains, methods = job.check()
    policy = DraftPolicy(job.max_draft, job.draft_threshold)
    inputs = build_stream(domains, job.per_domain, seed=job.seed)
    loaded = load()
    fixed, fixed_score = fixed_mask_on_train(loaded, domains[0], config, prompts=job.search_prompts,
                                             trials=job.search_trials, seed=job.seed)
    say(f"fixed mask searched on {domains[0]} (train): matchness {fixed_score:.3f}, {fixed.short_string()}")
    results = run_stream(
        loaded, inputs, methods=methods, fixed_mask=fixed, max_new_tokens=job.max_new_tokens,
        make_decoder=lambda method: method_decoder(method, loaded, fixed, config, policy), progress=say,
    )
    report = StreamReport(tuple(inputs), tuple(results), fixed, fixed_score, settings)
    write_output(out, (json.dumps(report.to_dict(), indent=2) + "\n").encode(), "out")
    shown = [m for m in ("fixed", "swift", "fixed-tree", "swift-tree") if m in methods]
    plot_swift_stream(
        [s.domain for s in inputs], {m: report.speedups(m) for m in shown},
        {m: [r.matchness for r in report.of(m)] for m in shown if m.startswith("swift")}, plot,
    )
    return report
