"""Steered vs unsteered drafting on held-out prompts: block efficiency, speed, steering's cost.

One setting is a temperature and a sampling seed (T = 0 once, T = 1 with several seeds). In
each, every prompt runs plain decoding (the same loop with nothing drafted: an empty mask),
then the unsteered and the steered drafter in turn (interleaved, so machine noise hits all
arms alike), same mask, same static draft length. Block efficiency M is tokens per
verification forward (accepted + 1 per step); each arm's speedup is its decode-phase tokens/s
over the plain arm's (:func:`layersearch.evaluation.measure.rate_speedup`), and each arm reports its
acceptance per draft position (:func:`layersearch.evaluation.measure.acceptance_per_position`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import torch

from layersearch.masks.mask import SkipMask
from layersearch.evaluation.measure import acceptance_per_position, rate_speedup
from layersearch.decoder.build import assemble
from layersearch.models.skipping import decoder_layers
from layersearch.runtime import MAX_DRAFT
from layersearch.runtime.drafters import LayerSkipDrafter
from layersearch.runtime.step import Drafter
from layersearch.runtime.stats import DecodeStats, combine
from layersearch.decoder.spec import LookaheadSpec, SamplingSpec
from layersearch.decoder.fragments import mask_spec
from layersearch.steer.params import SteeringParams

PLAIN = "plain"  # the arm that drafts nothing


@dataclass(frozen=True)
class ArmResult:
    """One drafter in one setting, pooled over the prompts."""

    arm: str  # "plain", "unsteered" or "steered"
    temperature: float
    seed: int
    block_efficiency: float  # tokens per verification forward (M)
    tokens_per_second: float
    draft_ms_per_forward: float
    new_tokens: int
    verifications: int
    acceptance_per_position: tuple[float, ...] = ()  # vLLM's accepted tokens per draft position / drafts

    def to_dict(self) -> dict:
        """Plain dict for JSON."""
        return asdict(self)


def settings(seeds: int) -> list[tuple[float, int]]:
    """(temperature, seed): T = 0 once, T = 1 with ``seeds`` seeds."""
    return [(0.0, 0)] + [(1.0, seed) for seed in range(seeds)]


def compare(
    verifier: torch.nn.Module, prompts: Sequence[torch.Tensor], drafters: dict[str, Callable[[], Drafter]], *,
    mask: SkipMask | None, max_new_tokens: int, max_draft: int = MAX_DRAFT, seeds: int = 3, plain: bool = True,
    progress: Callable[[int], None] | None = None,
) -> list[ArmResult]:
    """Every arm of ``drafters`` (name -> factory) on every prompt in every setting, after the
    ``"plain"`` arm (``plain``: our loop with an empty mask, so no step drafts)."""
    none = SkipMask.none(len(decoder_layers(verifier)))
    arms = {**({PLAIN: (LayerSkipDrafter, none)} if plain else {}), **{name: (make, mask) for name, make in drafters.items()}}
    results = []
    done = 0
    for temperature, seed in settings(seeds):
        pooled: dict[str, list[DecodeStats]] = {name: [] for name in arms}
        for prompt in prompts:
            for name, (make, arm_mask) in arms.items():
                sampling = SamplingSpec(temperature > 0, temperature, seed=seed)
                spec = mask_spec(arm_mask, lookahead=LookaheadSpec("static", max_draft), sampling=sampling)
                decoder = assemble(verifier, spec, drafter=make())  # the arm's own drafter in the spec's place
                pooled[name].append(decoder.generate(prompt, max_new_tokens).stats)
            done += 1
            if progress is not None:
                progress(done)
        results += [_arm(name, temperature, seed, combine(stats)) for name, stats in pooled.items()]
    return results


def _arm(name: str, temperature: float, seed: int, stats: DecodeStats) -> ArmResult:
    decode_seconds = stats.decode_seconds
    return ArmResult(
        name, temperature, seed,
        block_efficiency=stats.new_tokens / max(1, stats.target_forwards),
        tokens_per_second=stats.decode_tokens / decode_seconds if decode_seconds > 0 else 0.0,
        # 0 without draft forwards (the plain arm's empty proposals cost only loop overhead)
        draft_ms_per_forward=1000 * stats.draft_seconds / stats.draft_forwards if stats.draft_forwards else 0.0,
        new_tokens=stats.new_tokens, verifications=stats.target_forwards,
        acceptance_per_position=tuple(acceptance_per_position(stats.steps)["acceptance_per_position"]),
    )


@torch.inference_mode()
def bias_cost_ms(params: SteeringParams, repeats: int = 200) -> float:
    """Milliseconds to compute W_s g from the states once (the per-stage cost besides the hooks)."""
    states = torch.randn(len(params.layers), params.hml.in_features // len(params.layers))
    params.bias(states)
    start = time.perf_counter()
    for _ in range(repeats):
        params.bias(states)
    return 1000 * (time.perf_counter() - start) / repeats


def summary(results: Sequence[ArmResult]) -> dict:
    """Per temperature: mean M and tokens/s of each arm, each arm's speedup over plain decoding
    (``speedup_vs_plain``) and the steered / unsteered ratios."""
    out: dict[str, dict[str, Any]] = {}  # the report's JSON
    for temperature in sorted({r.temperature for r in results}):
        rows = [r for r in results if r.temperature == temperature]
        arms: dict[str, dict[str, Any]] = {}
        for arm in dict.fromkeys(r.arm for r in rows):
            mine = [r for r in rows if r.arm == arm]
            ms = [r.block_efficiency for r in mine]
            arms[arm] = {
                "block_efficiency": sum(ms) / len(ms),
                "block_efficiency_per_seed": ms,
                "tokens_per_second": sum(r.tokens_per_second for r in mine) / len(mine),
                "draft_ms_per_forward": sum(r.draft_ms_per_forward for r in mine) / len(mine),
            }
        entry: dict[str, Any] = {"arms": arms}
        if PLAIN in arms and arms[PLAIN]["tokens_per_second"]:
            base = arms[PLAIN]["tokens_per_second"]
            entry["speedup_vs_plain"] = {arm: rate_speedup(base, row["tokens_per_second"]) for arm, row in arms.items() if arm != PLAIN}
        if {"steered", "unsteered"} <= arms.keys():
            s, u = arms["steered"], arms["unsteered"]
            entry["block_efficiency_gain"] = s["block_efficiency"] / u["block_efficiency"] - 1
            entry["speedup"] = rate_speedup(u["tokens_per_second"], s["tokens_per_second"])
        out[f"T={temperature:g}"] = entry
    return out
