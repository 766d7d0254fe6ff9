"""Choosing the draft: acceptance estimates for the candidates and KnapSpec's TPT grid search.

For each candidate ``S`` the acceptance rate ``alpha_S`` is its top-1 agreement with the full
model on the reference tokens (greedy next token from the candidate's final hidden state vs
the target's). Then ``(S*, gamma*)`` maximizes tokens-per-time

    TPT(S, gamma) = [(1 - alpha^(gamma+1)) / (1 - alpha)] / [gamma * t_draft(S) + t_verify(gamma + 1)]

with the times of a :class:`~layersearch.profiling.profile.LatencyProfile` at the current context length
(:meth:`LatencyProfile.best_tpt`, ``gamma = 1..max_draft``). Plain decoding (empty mask, no
drafts, ``TPT = 1 / t_target``) is always a contender -- KnapSpec's code never considers its
candidate 0; here, when no draft beats the target alone, the choice is to stop speculating.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np
import torch
from transformers import PreTrainedModel

from layersearch.common.checks import check_int
from layersearch.common.errors import LayersearchError
from layersearch.knapspec.dp import (
    TAU, Candidate, DPResult, candidates_hidden_dp, candidates_item_values, candidates_plans, int4_importance,
    int8_importance, item_importance, plan_costs,
)
from layersearch.knapspec.sublayers import ReferenceWindow, SubLayerRunner, mean_cosine, window_from_prompt
from layersearch.knapspec.weights import Group, build_groups, profile_weights
from layersearch.masks.mask import SkipMask

PAPER_MAX_DRAFT = 10  # KnapSpec's maximum draft length D (the paper's setting)


@dataclass(frozen=True)
class Choice:
    """The selected sub-network and draft length, with what predicted them."""

    mask: SkipMask
    gamma: int  # 0 = plain decoding (empty mask)
    tpt: float  # predicted tokens per second
    alpha: float
    budget: int
    cosine: float
    context: int
    weights: tuple[Any, int]  # (w_attn: int, or per layer with sliding windows; w_mlp)
    candidates: int  # how many candidates had their alpha estimated

    def record(self) -> dict[str, Any]:
        """JSON-ready summary (the entry of ``DecodeStats.selections``)."""
        return {
            "context": self.context,
            "mask": self.mask.short_string(),
            "skipped": self.mask.num_skipped,
            "int8": self.mask.num_int8,
            "int8_head": self.mask.int8_head,
            "gamma": self.gamma,
            "tpt": self.tpt,
            "alpha": self.alpha,
            "budget": self.budget,
            "cosine": self.cosine,
            "w_attn": self.weights[0] if isinstance(self.weights[0], int) else list(self.weights[0]),
            "w_mlp": self.weights[1],
            "candidates": self.candidates,
        }


def spread_indices(count: int, limit: int | None) -> list[int]:
    """Indices of at most ``limit`` of ``count`` candidates spread evenly, always the first and last.

    KnapSpec estimates alpha for every surviving candidate (cheap on a GPU, where the batch is
    parallel). On a CPU the LM head over ``candidates x r`` states dominates, so the grid search
    may be limited to an even spread over the budget range; ``None`` keeps all.
    """
    if limit is not None:
        check_int(limit, "the candidate limit")
    if limit is None or count <= limit:
        return list(range(count))
    if limit == 1:
        return [count - 1]
    return sorted({int(round(i * (count - 1) / (limit - 1))) for i in range(limit)})


def alphas_from_states(
    runner: SubLayerRunner, states: torch.Tensor, reference: torch.Tensor, int8_head: bool | str = False
) -> list[float]:
    """Top-1 agreement of each state ``[B, R, d]`` with the reference ``[R, d]`` (share of the R tokens);
    with ``int8_head`` (True or ``"int8"``; ``"int4"``) the states' tokens come from that low-bit
    head (the reference's from the full one)."""
    with torch.inference_mode():
        target = runner.top1(reference.unsqueeze(0))[0]
        drafts = runner.top1(states, int8_head=int8_head)
    return (drafts == target.unsqueeze(0)).float().mean(dim=1).tolist()


def choose_tpt(
    profile, candidates: Sequence[Candidate], context: int, *, max_draft: int = PAPER_MAX_DRAFT, allow_plain: bool = True
) -> tuple[Choice, list[dict]]:
    """``(S*, gamma*)`` of largest predicted TPT among ``candidates`` (alpha set) and plain decoding.

    Returns the choice and one row per contender (mask, budget, alpha, best gamma, tpt) for
    reports. Ties keep the earlier contender (plain decoding first, then by budget). With
    ``allow_plain=False`` the best *draft* is chosen even when plain decoding predicts more
    (for experiments); plain decoding remains the answer only when there is no draft at all.
    """
    num_layers = profile.num_layers
    plain = SkipMask.none(num_layers)
    weights = profile_weights(profile, context)
    plain_tpt = profile.tpt(1.0, 0, plain, context)  # 1 / t_target: no drafting
    best = Choice(plain, 0, plain_tpt, 1.0, 0, 1.0, context, weights, len(candidates))
    rows = [{"mask": plain.short_string(), "budget": 0, "alpha": 1.0, "gamma": 0, "tpt": plain_tpt}]
    drafted = False
    for cand in candidates:
        if cand.mask.is_empty:
            continue
        if cand.alpha is None:
            raise LayersearchError("every candidate needs an alpha estimate before the TPT choice")
        tpt, gamma = profile.best_tpt(float(cand.alpha), cand.mask, context, max_draft=max_draft)
        rows.append({"mask": cand.mask.short_string(), "budget": cand.budget, "alpha": cand.alpha, "gamma": gamma, "tpt": tpt})
        if tpt > best.tpt or (not allow_plain and not drafted):
            drafted = True
            best = Choice(cand.mask, gamma, tpt, float(cand.alpha), cand.budget, cand.cosine, context, weights, len(candidates))
    return best, rows


def require_int8_profile(profile) -> None:
    """One error line where ``profile`` has no int8 timings (plans are costed by them)."""
    if not profile.has_int8:
        raise LayersearchError("KnapSpec's plans need a latency profile with int8 timings; this one has none: "
                               "re-run `layersearch profile` and pass the new file")


@dataclass(frozen=True)
class KnapSpecConfig:
    """Knobs of one selection (defaults from the paper unless said otherwise).

    ``method``: ``"hidden"`` (KnapSpec's hidden-state DP at every selection), ``"items"``
    (per-item cosine drops measured once per run, then :func:`solve_all_budgets` per selection
    and one batched pass over the chosen masks for alpha) or ``"plans"`` (draft plans: the
    per-item drops of skipping and of int8 measured once, the multiple-choice knapsack of
    :func:`~layersearch.knapspec.dp.candidates_plans` per selection, each plan scored with the
    full and the int8 LM head; needs a profile with int8 timings; decoupled sub-layers only). ``bound`` makes whole layers the
    items (CLaSp's binding) instead of separate attention and MLP sub-layers.
    ``max_alpha_candidates`` limits the alpha/TPT grid to an even spread of budgets (None: all,
    as the paper); ``max_skip_fraction`` is the K/2 cap on the skipped weight. ``allow_plain``
    lets plain decoding win the TPT choice (KnapSpec's candidate 0, which their code misses);
    False forces a draft, for experiments comparing drafts.
    """

    method: str = "hidden"
    bound: bool = False
    tau: float = TAU
    max_draft: int = PAPER_MAX_DRAFT
    keep_last_layers: int = 1
    max_skip_fraction: float = 0.5
    max_alpha_candidates: int | None = 16
    allow_plain: bool = True

    def __post_init__(self) -> None:
        if self.method not in ("hidden", "items", "plans"):
            raise LayersearchError(f"knapsack method must be 'hidden', 'items' or 'plans', got {self.method!r}")
        if self.method == "plans" and self.bound:
            raise LayersearchError("knapsack method 'plans' gives each sub-layer its own precision: it cannot bind layers")
        check_int(self.max_draft, "max_draft")
        if not -1.0 <= self.tau <= 1.0:
            raise LayersearchError(f"tau must be a cosine in [-1, 1], got {self.tau!r}")


class KnapSpecSelector:
    """Selects ``(S*, gamma*)`` for reference windows at a context length; reusable across calls.

    Holds the per-item values of ``method="items"`` once measured (:meth:`reset` forgets them).
    """

    def __init__(self, model: PreTrainedModel, profile, config: KnapSpecConfig = KnapSpecConfig()) -> None:
        self.model = model
        self.profile = profile
        self.config = config
        self.runner = SubLayerRunner(model)
        if profile.num_layers != self.runner.num_layers:
            raise LayersearchError(
                f"profile is for {profile.num_layers} layers but the model has {self.runner.num_layers}"
            )
        self.item_values: np.ndarray | None = None
        self.int8_values: np.ndarray | None = None
        self.int4_values: np.ndarray | None = None
        self.last_rows: list[dict] = []
        self.last_timing: dict[str, float] = {}

    def reset(self) -> None:
        """Forget the measured per-item values (methods ``"items"`` and ``"plans"``)."""
        self.item_values = None
        self.int8_values = None
        self.int4_values = None

    def candidates(
        self, windows: Sequence[ReferenceWindow], context: int, alpha_windows: Sequence[ReferenceWindow] | None = None
    ) -> tuple[list[Candidate], dict[str, float]]:
        """Candidates with alpha estimated (an even spread of at most ``max_alpha_candidates``).

        Alpha is measured on ``windows`` (the DP's own final states, as KnapSpec) or, when
        ``alpha_windows`` is given, by running the picked masks over those (usually longer)
        windows: a handful of masks over many tokens is cheaper than a DP over many tokens, and
        a 5-token agreement is too coarse an estimate of alpha (see the runtime's docstring).
        """
        cfg = self.config
        w_attn, w_mlp = profile_weights(self.profile, context)
        groups = build_groups(self.runner.num_layers, w_attn, w_mlp, bound=cfg.bound, keep_last_layers=cfg.keep_last_layers)
        cap = int(math.floor(cfg.max_skip_fraction * sum(g.weight for g in groups if g.skippable)))
        info = self.profile.model
        t0 = time.perf_counter()
        if cfg.method == "hidden":
            result: DPResult = candidates_hidden_dp(
                self.model, windows, groups, tau=cfg.tau, max_budget=cap, runner=self.runner, info=info
            )
            t1 = time.perf_counter()
            rows = spread_indices(len(result.candidates), cfg.max_alpha_candidates)
            picked = [result.candidates[i] for i in rows]
            if alpha_windows is None:
                alphas = alphas_from_states(self.runner, result.final_states[rows], result.reference)
                scored = [replace(c, alpha=a) for c, a in zip(picked, alphas)]
            else:
                scored = self._score(picked, alpha_windows, keep_cosine=True)
        else:
            scored, t1 = self._knapsack(windows, context, alpha_windows, groups, cap)
        t2 = time.perf_counter()
        return scored, {"dp_seconds": t1 - t0, "alpha_seconds": t2 - t1}

    def _knapsack(
        self, windows: Sequence[ReferenceWindow], context: int, alpha_windows: Sequence[ReferenceWindow] | None,
        groups: Sequence[Group], cap: int,
    ) -> tuple[list[Candidate], float]:
        """Candidates of methods ``"items"`` (masks) and ``"plans"``: per-item cosine drops measured
        once, the knapsack for every budget, and an even spread of its candidates with alpha and
        cosine measured (plans with the full and each cheaper low-bit head); and the time the
        knapsack was done."""
        cfg = self.config
        plans = cfg.method == "plans"
        if plans:
            require_int8_profile(self.profile)
            groups = build_groups(self.runner.num_layers, 1, 1, keep_last_layers=cfg.keep_last_layers)
        # Importance is a per-item cosine drop: it does not depend on the latency weights, so it
        # is measured once (on the first windows seen) and reused until reset().
        if self.item_values is None:
            self.item_values = item_importance(self.model, windows, groups, runner=self.runner)
            if plans:  # and the drops of each sub-layer's int8 (int4 where the profile can cost it) twin
                self.int8_values = int8_importance(self.model, windows, runner=self.runner)
                if self.profile.has_int4:
                    self.int4_values = int4_importance(self.model, windows, runner=self.runner)
        found = self._plan_candidates(context) if plans else candidates_item_values(
            groups, self.item_values, self.runner.num_layers, max_budget=cap, info=self.profile.model)
        t1 = time.perf_counter()
        picked = [found[i] for i in spread_indices(len(found), cfg.max_alpha_candidates)]
        return self._score(picked, alpha_windows or windows, keep_cosine=False, heads=self._heads() if plans else ("full",)), t1

    def _plan_candidates(self, context: int) -> list[Candidate]:
        """The multiple-choice knapsack's plans at ``context`` from the measured drops."""
        assert self.item_values is not None and self.int8_values is not None
        return candidates_plans(plan_costs(self.profile, context), self.item_values, self.int8_values,
                                self.runner.num_layers, keep_last_layers=self.config.keep_last_layers, tau=self.config.tau,
                                info=self.profile.model, int4_values=self.int4_values,
                                int4_group_size=self.runner.int4_group_size())

    def _heads(self) -> tuple[str, ...]:
        """The LM head precisions a plan is scored with: full, and each low-bit one the profile makes cheaper."""
        return ("full",) + tuple(quant for quant in ("int8", "int4") if getattr(self.profile, f"has_{quant}")
                                 and (getattr(self.profile, f"{quant}_head_saving") or 0) > 0)

    def _score(
        self, picked: list[Candidate], windows: Sequence[ReferenceWindow], keep_cosine: bool, heads: tuple[str, ...] = ("full",)
    ) -> list[Candidate]:
        """Alpha (and, unless ``keep_cosine``, the final cosine) of each candidate's mask on ``windows``;
        each plan once per head precision of ``heads`` (``"full"``, ``"int8"``, ``"int4"``: same states)."""
        masks = [SkipMask.none(self.runner.num_layers), *[c.mask for c in picked]]
        with torch.inference_mode():
            final = self.runner.run_masks(masks, windows)
            cos = mean_cosine(final[1:], final[0]).tolist()
        out = []
        for head in heads:
            alphas = alphas_from_states(self.runner, final[1:], final[0], int8_head=head)
            for c, a, cs in zip(picked, alphas, cos):
                cand = c if head == "full" else replace(c, mask=getattr(c.mask, f"with_{head}")(
                    c.mask.quantized(head, "attention"), c.mask.quantized(head, "mlp"), True))
                out.append(replace(cand, alpha=a) if keep_cosine else replace(cand, alpha=a, cosine=float(cs)))
        return out

    def select(
        self, windows: Sequence[ReferenceWindow], context: int, alpha_windows: Sequence[ReferenceWindow] | None = None
    ) -> Choice:
        """The TPT-optimal ``(S*, gamma*)`` at ``context`` tokens for these reference windows."""
        scored, timing = self.candidates(windows, context, alpha_windows)
        t0 = time.perf_counter()
        choice, rows = choose_tpt(
            self.profile, scored, context, max_draft=self.config.max_draft, allow_plain=self.config.allow_plain
        )
        timing["tpt_seconds"] = time.perf_counter() - t0
        self.last_rows, self.last_timing = rows, timing
        return choice


def knapsack_masks(
    model: PreTrainedModel,
    profile,
    prompts_ids: Sequence[torch.Tensor | Sequence[int]],
    *,
    context: int,
    max_candidates: int = 8,
    window: int = 16,
    config: KnapSpecConfig = KnapSpecConfig(max_alpha_candidates=None),
) -> list[tuple[SkipMask, float, int, float]]:
    """KnapSpec's candidates for a study: ``(mask, tpt, gamma, alpha)``, best predicted TPT first.

    Each prompt's last ``window`` tokens are reference tokens (its earlier tokens are prefilled
    as their context); latency weights and TPT use the profile at ``context`` tokens, which may
    differ from the prompts' lengths (e.g. to tune for long generations). Plain decoding (the
    empty mask) is not a skip mask and is left out; at most ``max_candidates`` are returned.
    Masks carry the profile's model and provenance (strategy ``knapsack``, objective ``tpt``).
    """
    if not prompts_ids:
        raise LayersearchError("knapsack_masks needs at least one prompt")
    check_int(context, "context", minimum=0)
    selector = KnapSpecSelector(model, profile, config)
    windows = [window_from_prompt(model, ids, window) for ids in prompts_ids]
    scored, _ = selector.candidates(windows, context)
    rows = []
    for cand in scored:
        if cand.mask.is_empty:
            continue
        assert cand.alpha is not None  # candidates() measures every returned candidate's alpha
        tpt, gamma = profile.best_tpt(float(cand.alpha), cand.mask, context, max_draft=config.max_draft)
        mask = cand.mask.with_provenance(strategy="knapsack", objective="tpt", score=tpt)
        rows.append((mask, tpt, gamma, float(cand.alpha)))
    rows.sort(key=lambda row: (-row[1], row[0].num_skipped))
    return rows[:max_candidates]


def knapsack_plans(
    model: PreTrainedModel,
    profile,
    prompts_ids: Sequence[torch.Tensor | Sequence[int]],
    *,
    context: int,
    max_candidates: int = 8,
    window: int = 16,
    config: KnapSpecConfig = KnapSpecConfig(method="plans", max_alpha_candidates=32),
) -> list[tuple[SkipMask, float, int, float]]:
    """:func:`knapsack_masks` for draft plans: the multiple-choice knapsack's candidates (each
    sub-layer skipped, int8 or full; the head full or int8), ``(plan, tpt, gamma, alpha)``, best
    predicted TPT first. ``config.method`` must be ``"plans"``; the profile needs int8 timings."""
    if config.method != "plans":
        raise LayersearchError(f"knapsack_plans needs a config of method 'plans', got {config.method!r}")
    return knapsack_masks(model, profile, prompts_ids, context=context, max_candidates=max_candidates, window=window,
                          config=config)
