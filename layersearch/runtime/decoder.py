"""The self-speculative decode loop: draft with the masked model, verify with the full model.

One iteration, with ``pos`` = number of positions in the cache and ``last`` the newest token
(not yet in the cache)::

    draft   d1..dk  with the mask applied; executed layers append k entries to the cache
    cut     every cache layer back to pos (the draft's entries are not the target's)
    verify  [last, d1..dk] at positions pos..pos+k in one full forward -> k+1 logits
    accept  a draft tokens, plus the target's own token at a (greedy or speculative sampling)
    cut     the cache back to pos + a + 1

With an empty mask the draft *is* the target, so the loop degenerates to plain decoding:
one full forward per token and no verification.

Optional hook: a ``selector`` (see :class:`SelectionRequest`) is called before decoding step 0
(right after the prefill) and then every ``reselect_every`` steps; it may return a
:class:`Selection` (a new mask and max draft length) that the following steps use. It only
reads the cache, so any mask it picks keeps the loop lossless.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

import torch
from transformers import DynamicCache  # noqa: F401 (type in SelectionRequest)

from layersearch.errors import LayersearchError
from layersearch.mask import SkipMask
from layersearch.models.skipping import skipping
from layersearch.runtime.cache import new_cache, truncate_cache
from layersearch.runtime.drafting import AdaptiveThreshold, DraftPolicy, Proposal, draft
from layersearch.runtime.forward import forward_tokens
from layersearch.runtime.sampling import SamplingConfig, next_token_probs, sample
from layersearch.runtime.stats import DecodeStats
from layersearch.runtime.timing import Clock
from layersearch.runtime.verification import Verdict, verify_greedy, verify_sampling


@dataclass(frozen=True)
class GenerationResult:
    """Generated token ids (prompt excluded) and the run's statistics."""

    token_ids: tuple[int, ...]
    stats: DecodeStats


@dataclass(frozen=True)
class SelectionRequest:
    """What a selector sees: the cache (read-only) holds ``position`` entries; ``sequence`` is
    ``[1, position + 1]``, the prompt and every emitted token (the newest not yet cached)."""

    model: torch.nn.Module
    cache: DynamicCache
    sequence: torch.Tensor
    position: int
    step: int
    mask: SkipMask
    max_draft_tokens: int


@dataclass(frozen=True)
class Selection:
    """A selector's answer: the mask (and max draft length, None = unchanged) for the next steps;
    ``record`` is stored in ``stats.selections`` with the step, context length and seconds."""

    mask: SkipMask
    max_draft_tokens: int | None = None
    record: Mapping[str, Any] = field(default_factory=dict)


def eos_ids(model: torch.nn.Module) -> frozenset[int]:
    """End-of-sequence ids from the model's generation config (may be empty)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        return frozenset()
    return frozenset([eos] if isinstance(eos, int) else eos)


class SpeculativeDecoder:
    """Lossless self-speculative generation for one model and one skip mask."""

    def __init__(
        self,
        model: torch.nn.Module,
        mask: SkipMask,
        *,
        policy: DraftPolicy = DraftPolicy(),
        sampling: SamplingConfig = SamplingConfig(),
        selector: Callable[[SelectionRequest], Selection | None] | None = None,
        reselect_every: int = 64,
    ) -> None:
        if reselect_every < 1:
            raise LayersearchError(f"reselect interval must be >= 1, got {reselect_every}")
        self.model = model
        self.mask = mask
        self.policy = policy
        self.sampling = sampling
        self.selector = selector
        self.reselect_every = reselect_every
        with skipping(model, mask):  # validates the mask against the model's layers up front
            pass

    @torch.inference_mode()
    def generate(
        self, input_ids: torch.Tensor | Iterable[int], max_new_tokens: int, *, eos_token_ids: Iterable[int] | None = None
    ) -> GenerationResult:
        """Generate up to ``max_new_tokens`` tokens after ``input_ids`` (batch size 1)."""
        prompt = _as_prompt(input_ids, self.model.device)
        stop = eos_ids(self.model) if eos_token_ids is None else frozenset(eos_token_ids)
        run = _Run(self, prompt, max_new_tokens, stop)
        return run.execute()


class _Run:
    """State of one generation; ``execute`` is the loop described in the module docstring."""

    def __init__(self, decoder: SpeculativeDecoder, prompt: torch.Tensor, max_new: int, stop: frozenset[int]):
        if max_new < 1:
            raise LayersearchError(f"max new tokens must be >= 1, got {max_new}")
        self.model = decoder.model
        self.mask = decoder.mask
        self.policy = decoder.policy
        self.sampling = decoder.sampling
        self.prompt = prompt
        self.max_new = max_new
        self.stop = stop
        self.clock = Clock(self.model.device)
        self.generator = self.sampling.generator(self.model.device)
        self.cache = new_cache(self.model)
        self.threshold = AdaptiveThreshold.start(self.policy.confidence_threshold)
        self.tokens: list[int] = []
        self.counts = dict(target_forwards=0, drafted=0, accepted=0)
        self.seconds = dict(prefill=0.0, draft=0.0, verify=0.0, forward=0.0)
        self.forward_calls = 0
        self.draft_forwards = 0
        self.draft_lengths: list[int] = []
        self.stop_now = False
        self.selector, self.reselect_every = decoder.selector, decoder.reselect_every
        self.steps = 0
        self.selections: list[dict[str, Any]] = []

    def execute(self) -> GenerationResult:
        start = self.clock.now()
        self._prefill()
        while not self._finished():
            if self.selector is not None and self.steps % self.reselect_every == 0:
                self._reselect()
            step = self._plain_step if self.mask.is_empty else self._speculative_step
            step()
            self.steps += 1
        total = self.clock.now() - start
        del self.tokens[self.max_new :]
        stats = DecodeStats(
            new_tokens=len(self.tokens),
            prefill_seconds=self.seconds["prefill"],
            draft_seconds=self.seconds["draft"],
            verify_seconds=self.seconds["verify"],
            total_seconds=total,
            draft_forwards=self.draft_forwards,
            forward_seconds=self.seconds["forward"],
            draft_lengths=tuple(self.draft_lengths),
            selections=tuple(self.selections),
            **self.counts,
        )
        return GenerationResult(tuple(self.tokens), stats)

    # ----- steps ------------------------------------------------------------------------
    def _prefill(self) -> None:
        t0 = self.clock.now()
        logits = self._forward(self.prompt, 0, keep=1)[-1]  # [vocab]
        self._emit([self._choose(logits)])
        self.seconds["prefill"] += self.clock.now() - t0

    def _plain_step(self) -> None:
        # Empty mask: a "draft" forward is a target forward, so its token needs no verification.
        t0 = self.clock.now()
        logits = self._forward([self.tokens[-1]], self._position())[-1]
        self._emit([self._choose(logits)])
        self.counts["target_forwards"] += 1
        self.seconds["verify"] += self.clock.now() - t0

    def _speculative_step(self) -> None:
        position = self._position()
        last = self.tokens[-1]
        t0 = self.clock.now()
        calls = self.forward_calls
        proposal = self._draft(last, position)
        self.draft_forwards += self.forward_calls - calls
        truncate_cache(self.cache, position)
        t1 = self.clock.now()
        logits = self._forward([last, *proposal.tokens], position)  # [k+1, vocab]
        verdict = self._verify(proposal, logits)
        truncate_cache(self.cache, position + verdict.num_accepted + 1)
        t2 = self.clock.now()
        self._emit([*proposal.tokens[: verdict.num_accepted], verdict.next_token])
        self._record(proposal, verdict, t1 - t0, t2 - t1)

    def _reselect(self) -> None:
        t0 = self.clock.now()
        sequence = torch.cat([self.prompt, self.prompt.new_tensor([self.tokens])], dim=1)
        request = SelectionRequest(
            self.model, self.cache, sequence, self._position(), self.steps, self.mask, self.policy.max_draft_tokens
        )
        chosen = self.selector(request)
        if chosen is not None:
            self.mask = chosen.mask
            if chosen.max_draft_tokens is not None:
                self.policy = replace(self.policy, max_draft_tokens=chosen.max_draft_tokens)
            seconds = self.clock.now() - t0
            self.selections.append({"step": self.steps, "context": request.position, **chosen.record, "seconds": seconds})

    # ----- helpers ----------------------------------------------------------------------
    def _draft(self, last: int, position: int) -> Proposal:
        # Never draft past max_new: the verify step always adds one token of its own.
        room = self.max_new - len(self.tokens) - 1
        limit = min(self.policy.max_draft_tokens, room)
        if limit <= 0:
            return Proposal((), None)
        threshold = self.threshold.value if self.policy.adaptive_threshold else self.policy.confidence_threshold
        with skipping(self.model, self.mask):
            return draft(
                self.model, self.cache, last, position,
                max_tokens=limit, threshold=threshold, sampling=self.sampling, generator=self.generator,
                forward=self._forward_in_cache,
            )

    def _forward(self, tokens, start: int, keep: int | None = None) -> torch.Tensor:
        # Every model forward goes through here, so time outside them is measurable bookkeeping.
        t0 = self.clock.now()
        logits = forward_tokens(self.model, tokens, start, self.cache, keep)
        self.seconds["forward"] += self.clock.now() - t0
        self.forward_calls += 1
        return logits

    def _forward_in_cache(self, model, tokens, start: int, cache) -> torch.Tensor:
        return self._forward(tokens, start)

    def _verify(self, proposal: Proposal, logits: torch.Tensor) -> Verdict:
        if self.sampling.greedy:
            return verify_greedy(list(proposal.tokens), logits)
        target_probs = next_token_probs(logits, self.sampling)  # [k+1, vocab]
        draft_probs = proposal.probs if proposal.probs is not None else target_probs[:0]
        return verify_sampling(list(proposal.tokens), draft_probs, target_probs, self.generator)

    def _record(self, proposal: Proposal, verdict: Verdict, draft_s: float, verify_s: float) -> None:
        k = len(proposal.tokens)
        self.counts["target_forwards"] += 1
        self.counts["drafted"] += k
        self.counts["accepted"] += verdict.num_accepted
        self.seconds["draft"] += draft_s
        self.seconds["verify"] += verify_s
        self.draft_lengths.append(k)
        if self.policy.adaptive_threshold:
            self.threshold = self.threshold.update(verdict.num_accepted, k)

    def _choose(self, logits: torch.Tensor) -> int:
        if self.sampling.greedy:
            return int(logits.argmax())
        return sample(next_token_probs(logits, self.sampling), self.generator)

    def _emit(self, new_tokens: list[int]) -> None:
        # Stop right after the first end-of-sequence token, as generate() does.
        for token in new_tokens:
            self.tokens.append(token)
            if token in self.stop:
                self.stop_now = True
                return

    def _position(self) -> int:
        # Every emitted token but the newest is in the cache.
        return self.prompt.shape[1] + len(self.tokens) - 1

    def _finished(self) -> bool:
        return self.stop_now or len(self.tokens) >= self.max_new


def _as_prompt(input_ids: torch.Tensor | Iterable[int], device: torch.device) -> torch.Tensor:
    ids = torch.as_tensor(input_ids if isinstance(input_ids, torch.Tensor) else list(input_ids))
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise LayersearchError(f"batch size must be 1, got input of shape {tuple(ids.shape)}")
    if ids.shape[1] == 0:
        raise LayersearchError("the prompt is empty")
    return ids.to(device)
