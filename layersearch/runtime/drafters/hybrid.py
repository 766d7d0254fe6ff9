"""Hybrid drafting: prompt lookup, the layer-skip draft, or no draft — whichever pays here.

A lookup draft costs no forward, so it is tried first; without ``adaptive`` the masked model
drafts whenever the lookup finds nothing (the plain rule). The lookup part copies at most 4
tokens (its own cap): the lookahead's cap and confidence rule are set for the masked model's
drafts, and long copies of weak matches cost more to verify than they save.

With ``adaptive`` (the default) the drafter also learns *whether* drafting pays on this model,
device and text: each step is credited to the arm that made it (``prompt-lookup``,
``layer-skip`` or ``plain`` = no draft), and an exponential average of each arm's measured
throughput (tokens emitted per second of drafting + verification) picks the arm among those
available at a step (lookup only when its n-gram matched). Every arm is tried ``warmup`` times
first and the others once every ``explore_every`` steps, so a change of text is noticed. Why:
on a CPU, verifying k tokens costs far more than one (about 1.9x for 8 on the embedded model), so
a layer-skip draft with c ≈ 0.9 or a weak lookup match loses to plain decoding; the adaptive
hybrid then falls back to plain steps instead of paying for drafts that do not pay. The choice
reads only timings and outcomes, never the target's logits, so output stays lossless.
Each step's statistics say which arm drafted it.
"""

from __future__ import annotations

from layersearch.runtime.step import Drafter, Proposal, StepOutcome, StepRequest
from layersearch.runtime.drafters.layer_skip import LayerSkipDrafter
from layersearch.runtime.drafters.prompt_lookup import PromptLookupDrafter

PLAIN = "plain"  # the arm that drafts nothing


class ArmRates:
    """Exponential averages of tokens per second, one per arm, and the choice they imply."""

    def __init__(self, arms: tuple[str, ...], *, warmup: int = 2, explore_every: int = 16, smoothing: float = 0.2) -> None:
        self.arms = arms
        self.warmup = warmup
        self.explore_every = explore_every
        self.smoothing = smoothing
        self.rates: dict[str, float] = {}
        self.counts = dict.fromkeys(arms, 0)
        self.decisions = 0

    def choose(self, available: tuple[str, ...]) -> str:
        """The arm to use now among ``available`` (in preference order)."""
        self.decisions += 1
        untried = [a for a in available if self.counts[a] < self.warmup]
        if untried:
            return untried[0]
        best = max(available, key=lambda a: self.rates.get(a, 0.0))
        others = [a for a in available if a != best]
        if others and self.explore_every and self.decisions % self.explore_every == 0:
            return others[(self.decisions // self.explore_every) % len(others)]
        return best

    def record(self, arm: str, tokens: int, seconds: float) -> None:
        """Credit one step of ``arm``: ``tokens`` emitted in ``seconds``."""
        if arm not in self.counts or seconds <= 0:
            return
        rate = tokens / seconds
        old = self.rates.get(arm)
        self.rates[arm] = rate if old is None else (1 - self.smoothing) * old + self.smoothing * rate
        self.counts[arm] += 1


class HybridDrafter(Drafter):
    """Prompt lookup first, then the fallback drafter (the layer-skip draft with the controller's
    mask, or an independent draft model), or no draft when ``adaptive`` finds that drafting
    does not pay."""

    name = "hybrid"

    def __init__(
        self,
        lookup: PromptLookupDrafter | None = None,
        fallback: Drafter | None = None,
        *,
        adaptive: bool = True,
    ) -> None:
        self.lookup = lookup or PromptLookupDrafter(max_draft=4)
        self.fallback = fallback or LayerSkipDrafter()
        self.adaptive = adaptive
        # Rates persist across generations: they describe the model on this device.
        self.rates = ArmRates((PromptLookupDrafter.name, self.fallback.name, PLAIN))

    def begin(self, prompt) -> None:
        """A new generation for the fallback (a draft model resets its cache); the arm rates carry over."""
        self.fallback.begin(prompt)

    def check_target(self, target) -> None:
        """The fallback's own check (a draft model must share the target's vocabulary)."""
        self.fallback.check_target(target)

    def propose(self, request: StepRequest) -> Proposal:
        """The chosen arm's proposal (lookup when it matches, unless another arm pays better)."""
        lookup = self.lookup.propose(request)
        if not self.adaptive:
            return lookup if lookup.size else self.fallback.propose(request)
        fallback = self.fallback.name
        available = ((PromptLookupDrafter.name,) if lookup.size else ()) + (fallback, PLAIN)
        if isinstance(self.fallback, LayerSkipDrafter) and self.fallback.plan(request.mask).is_empty:
            available = tuple(a for a in available if a != fallback)  # an empty mask drafts with the full model
        arm = self.rates.choose(available)
        if arm == PromptLookupDrafter.name:
            return lookup
        if arm == fallback:
            return self.fallback.propose(request)
        return Proposal.empty(PLAIN)

    def observe(self, outcome: StepOutcome) -> None:
        """Credit the step's throughput to the arm that made it (and tell the fallback of its own steps)."""
        if outcome.drafter == self.fallback.name:
            self.fallback.observe(outcome)
        self.rates.record(outcome.drafter, outcome.emitted, outcome.draft_seconds + outcome.verify_seconds)
