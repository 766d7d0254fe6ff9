"""The one measurement harness: configurations side by side, one definition of each figure.

Every benchmark of the project (``bench``, ``transfer``, ``knn bench``, ``swift stream``, ``steer
eval``, ``disco bench``, ``knapspec bench``, ``study compare``) takes its speedups, M, alpha and
acceptance per draft position from here, so a figure means the same thing in every table:

* **speedup** (end to end): the baseline's seconds per generated token over the configuration's,
  both pooled over the prompts of one repeat (:func:`speedup`); with identical outputs (greedy
  decoding is lossless) it is simply baseline seconds / configuration seconds. Over repeats it is
  the median of the per-repeat ratios (:func:`median_speedup`).
* **decode-phase speedup**: the same after each generation's first delivery (the phases of
  :class:`~layersearch.runtime.stats.DecodeStats`, one definition for our loop and every
  transformers peer: the time to the first delivered token(s) and those tokens excluded, and a
  draft model's own prompt forward excluded too, reported as its own column;
  :func:`decode_speedup`); on long prompts the shared prefill dilutes the end-to-end ratio
  towards 1. TTFT and TPOT (vLLM's time to first token and time per output token) come from
  the same definitions.
* **M**: decode-phase tokens per target forward, **alpha**: accepted / drafted
  (:class:`~layersearch.runtime.stats.DecodeStats` defines both).
* **acceptance per draft position** (:func:`acceptance_per_position`): as vLLM's
  ``num_accepted_tokens_per_pos``, how often the k-th drafted token was accepted, over the steps
  that drafted anything.

:func:`compare` runs configurations interleaved prompt by prompt with a rotated order, so a load
burst on a shared machine lands on every configuration rather than on whichever owned that
stretch of time, and whatever runs first in a round (slower: allocations, a GPU warming up) is
a different configuration each time.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    import torch

    from layersearch.masks.mask import SkipMask
    from layersearch.runtime.loop import GenerationResult
    from layersearch.runtime.step import StepOutcome
    from layersearch.runtime.stats import DecodeStats


@dataclass(frozen=True)
class Configuration:
    """One way of generating: a name, a function of (prompt ids ``[1, n]``, new tokens), maybe a
    mask, and the model whose weights and cache peak memory is judged against (our loop only)."""

    name: str
    generate: Callable[["torch.Tensor", int], "GenerationResult"]
    mask: "SkipMask | None" = None
    model: Any = None


@dataclass
class Measurement:
    """All repeats of one configuration (filled in repeat by repeat by :func:`compare`)."""

    totals: list[float] = field(default_factory=list)  # seconds per repeat (all prompts)
    speedups: list[float] = field(default_factory=list)  # :func:`speedup` against the baseline, same repeat
    stats: list[Any] = field(default_factory=list)  # pooled DecodeStats per repeat
    identical: bool = True
    outputs: list[tuple[int, ...]] = field(default_factory=list, repr=False)  # the latest repeat's tokens
    peak_ratio: float | None = None
    error: str | None = None


# ----- the definitions ------------------------------------------------------------------------
def speedup(base_seconds: float, base_tokens: int, seconds: float, tokens: int) -> float | None:
    """End-to-end speedup: the baseline's seconds per token over these seconds per token.

    Written as a time ratio times a token ratio, so identical outputs give exactly
    ``base_seconds / seconds``. None where either side produced nothing or took no time."""
    if seconds <= 0 or base_seconds <= 0 or tokens <= 0 or base_tokens <= 0:
        return None
    return (base_seconds / seconds) * (tokens / base_tokens)


def stats_speedup(base: "DecodeStats", run: "DecodeStats") -> float | None:
    """:func:`speedup` of two (pooled) generations' statistics."""
    return speedup(base.run_seconds, base.new_tokens, run.run_seconds, run.new_tokens)


def decode_speedup(base: "DecodeStats", run: "DecodeStats") -> float | None:
    """Decode-phase speedup: :func:`speedup` after the prefill (seconds after the first new token,
    tokens after each generation's first). None where either side lacks a timed prefill."""
    if base.prefill_seconds <= 0 or run.prefill_seconds <= 0:
        return None
    return speedup(_decode_seconds(base), _decode_tokens(base), _decode_seconds(run), _decode_tokens(run))


def decode_tokens_per_second(stats: "DecodeStats", exclude_seconds: float = 0.0) -> float:
    """Decode-phase tokens per second (the rate behind :func:`decode_speedup`), ``exclude_seconds``
    taken out of the time (e.g. an analysis run inside the loop); 0 when nothing was decoded."""
    seconds = stats.decode_seconds - exclude_seconds
    tokens = stats.decode_tokens
    return tokens / seconds if seconds > 0 and tokens > 0 else 0.0


def rate_speedup(base_rate: float, rate: float) -> float | None:
    """A speedup from two rates (tokens per second) measured the same way: ``rate / base_rate``."""
    return rate / base_rate if base_rate > 0 else None


def _decode_seconds(stats: "DecodeStats") -> float:
    """Seconds of the decode phase (all generations pooled in ``stats``)."""
    return max(stats.decode_seconds, 1e-9)


def _decode_tokens(stats: "DecodeStats") -> int:
    """Tokens of the decode phase: those delivered after each generation's first delivery."""
    return max(stats.decode_tokens, 1)


def acceptance_per_position(steps: Sequence["StepOutcome"]) -> dict[str, Any]:
    """vLLM's accepted tokens per draft position over the steps that drafted anything.

    ``accepted_per_position[k]``: how many steps had their (k+1)-th drafted token accepted (the
    accepted tokens are a prefix of the draft); ``acceptance_per_position[k]``: that count over
    ``drafts``, the number of drafting steps, as vLLM reports it; ``drafted_per_position[k]``: how
    many steps drafted a (k+1)-th token at all (a confidence rule stops drafts early)."""
    drafting = [s for s in steps if s.drafted]
    longest = max((s.drafted for s in drafting), default=0)
    accepted = [sum(1 for s in drafting if s.accepted > k) for k in range(longest)]
    drafted = [sum(1 for s in drafting if s.drafted > k) for k in range(longest)]
    return {
        "drafts": len(drafting),
        "accepted_per_position": accepted,
        "drafted_per_position": drafted,
        "acceptance_per_position": [a / len(drafting) for a in accepted] if drafting else [],
    }


def median_speedup(base: Measurement, m: Measurement, *, decode: bool = False) -> float | None:
    """Median over repeats of the per-repeat :func:`speedup` (``decode``: :func:`decode_speedup`)
    of ``m`` against ``base``; None where the two were not measured in the same repeats."""
    if base.error or m.error or len(base.stats) != len(m.stats) or not m.stats:
        return None
    ratios = [(decode_speedup if decode else stats_speedup)(b, r) for b, r in zip(base.stats, m.stats)]
    known = [r for r in ratios if r is not None]
    if len(known) != len(ratios):
        return None
    return statistics.median(known)


def figures(stats: Sequence["DecodeStats"]) -> dict[str, Any]:
    """M, alpha, tokens/s and acceptance per draft position of several generations pooled."""
    from layersearch.runtime.stats import combine

    pooled = combine(list(stats))
    return {
        "M": pooled.mean_accepted_length,
        "alpha": pooled.acceptance_rate,
        "tokens_per_second": pooled.tokens_per_second,
        **acceptance_per_position(pooled.steps),
    }


# ----- the harness ----------------------------------------------------------------------------
def compare(
    configurations: Sequence[Configuration],
    prompts: Sequence["torch.Tensor"],
    repeats: int,
    *,
    new_tokens: int,
    baseline: str | None = None,
    progress: Callable[[str], None] = lambda message: None,
    device: Any = "cpu",
    catch: bool = True,
) -> dict[str, Measurement]:
    """Measure every configuration on ``prompts`` (token ids ``[1, n]``), ``repeats`` times.

    Each prompt runs under every configuration back to back; the order rotates with the repeat
    and the prompt (repeat r, prompt p starts with configuration r + p). A configuration that
    raises is reported in its measurement's ``error`` and skipped from then on (``catch=False``:
    the exception propagates, for callers that run only our own decoders). Speedups are
    taken within a repeat against ``baseline`` (a configuration name; default the first), and
    ``identical`` compares every repeat's tokens with the baseline's first repeat."""
    from layersearch.runtime.memory import PeakMemory
    from layersearch.runtime.stats import combine

    configurations = list(configurations)
    base_name = configurations[0].name if baseline is None else baseline
    results = {c.name: Measurement() for c in configurations}
    reference: list[tuple[int, ...]] = []
    for repeat in range(repeats):
        runs: dict[str, list[Any]] = {c.name: [] for c in configurations}
        peaks: dict[str, list[float | None]] = {c.name: [] for c in configurations}
        for index, ids in enumerate(prompts):
            shift = (repeat + index) % len(configurations)
            for config in configurations[shift:] + configurations[:shift]:
                if results[config.name].error:
                    continue
                try:
                    with PeakMemory(device) as memory:
                        runs[config.name].append(config.generate(ids, new_tokens))
                except Exception as exc:  # a peer transformers cannot run on this model is reported, not fatal
                    if not catch:
                        raise
                    results[config.name].error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                    continue
                peaks[config.name].append(memory_ratio(memory.peak_bytes, config, [ids], new_tokens))
        pooled = {}
        for config in configurations:
            measurement, outputs = results[config.name], runs[config.name]
            if measurement.error:
                continue
            pooled[config.name] = combine([o.stats for o in outputs])
            tokens = [o.token_ids for o in outputs]
            if config.name == base_name:
                reference = reference or tokens
            measurement.outputs = tokens
            measurement.totals.append(pooled[config.name].run_seconds)
            measurement.stats.append(pooled[config.name])
            known = [p for p in peaks[config.name] if p is not None]
            measurement.peak_ratio = max(known) if known else None
        for name, stats in pooled.items():
            ratio = stats_speedup(pooled[base_name], stats) if base_name in pooled else None
            results[name].speedups.append(float("nan") if ratio is None else ratio)
            results[name].identical &= results[name].outputs == reference
        progress(f"repeat {repeat + 1}/{repeats} done")
    return results


def memory_ratio(peak_extra: int | None, config: Configuration, prompts, new_tokens: int) -> float | None:
    """(weights + peak growth during generation) / (weights + final KV cache); our loop only."""
    if peak_extra is None or config.model is None:
        return None
    from layersearch.runtime.memory import kv_cache_bytes, weight_bytes

    model = config.model
    longest = max(p.shape[1] for p in prompts) + new_tokens
    weights = weight_bytes(model)
    return (weights + peak_extra) / (weights + kv_cache_bytes(model, longest))


PLAIN_NAME = "plain"  # the baseline configuration of :func:`plain_and_masks`


def plain_and_masks(model: Any, masks: "dict[str, SkipMask]", *, max_draft: int, draft_threshold: float) -> list[Configuration]:
    """transformers' plain ``generate`` (named :data:`PLAIN_NAME`) and our loop with each mask
    (greedy, Self-SD's confidence rule): the rows of the transfer matrix and ``study compare``."""
    from layersearch.decoder.build import assemble
    from layersearch.runtime.baseline import hf_generate
    from layersearch.runtime.draft_policy import DraftPolicy
    from layersearch.decoder.fragments import mask_spec

    policy = DraftPolicy(max_draft, draft_threshold)
    result = [Configuration(PLAIN_NAME, lambda ids, n: hf_generate(model, ids, n))]
    for name, mask in masks.items():
        result.append(Configuration(name, assemble(model, mask_spec(mask, policy)).generate, mask, model))
    return result


def warm_up(configurations: Sequence[Configuration], prompt: "torch.Tensor") -> None:
    """Two untimed tokens under every configuration: the first forwards of a process are slow."""
    for config in configurations:
        config.generate(prompt, 2)
