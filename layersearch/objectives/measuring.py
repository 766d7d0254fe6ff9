"""Measuring a model for the objectives: the :class:`Runtime` interface and its real
implementation, :class:`ModelRuntime`, on a loaded model and a fixed list of prompts.

Two measurements: ``decode(mask)`` runs the speculative decoder over the prompts and returns
their pooled :class:`~layersearch.runtime.stats.DecodeStats`; ``matchness(mask, gamma)`` is
SWIFT's parallel draft check (:class:`MatchMeasurement`). The scoring rules
(:mod:`.scoring`) import this module, never the reverse.
Tests can pass a fake runtime.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from layersearch.common.checks import check_int
from layersearch.common.errors import LayersearchError
from layersearch.runtime import DRAFT_THRESHOLD, MAX_DRAFT
from layersearch.masks.mask import ModelInfo, SkipMask

if TYPE_CHECKING:
    from layersearch.runtime.stats import DecodeStats

DEFAULT_MAX_NEW_TOKENS = 32


@dataclass(frozen=True)
class MatchMeasurement:
    """SWIFT matchness counts: draft argmaxes equal to the target's next token, out of compared."""

    matched: int
    compared: int

    @property
    def matchness(self) -> float:
        """Exact-match ratio (0 when nothing was compared)."""
        return self.matched / self.compared if self.compared else 0.0


class Runtime(Protocol):
    """The measurements an objective may ask for; :class:`ModelRuntime` is the real one."""

    @property
    def info(self) -> ModelInfo:
        """The model the masks are for."""

    @property
    def context_length(self) -> int:
        """Typical context (prompt + half the new tokens) for latency-model predictions."""

    def decode(self, mask: SkipMask) -> "DecodeStats":
        """Speculative decoding with ``mask`` over the prompts, pooled (:func:`~layersearch.runtime.stats.combine`)."""

    def matchness(self, mask: SkipMask, gamma: int) -> MatchMeasurement:
        """SWIFT matchness of ``mask`` over ``gamma`` target tokens per prompt."""


class ModelRuntime:
    """:class:`Runtime` over a loaded model and a fixed list of tokenized prompts.

    ``decode`` runs :class:`~layersearch.runtime.loop.SpeculativeDecoder` (greedy) with the
    given draft policy; ``baseline`` runs transformers' plain ``generate`` on the same prompts.
    ``matchness`` keeps, per prompt, the target's prompt KV cache and its greedy continuation
    (neither depends on the mask), so each later call costs one masked forward per prompt.
    """

    def __init__(
        self,
        model: Any,
        info: ModelInfo,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        max_draft: int = MAX_DRAFT,
        draft_threshold: float = DRAFT_THRESHOLD,
        warm_up: bool = True,
    ) -> None:
        from layersearch.runtime.draft_policy import DraftPolicy

        if not prompts or any(len(p) == 0 for p in prompts):
            raise LayersearchError("the runtime needs at least one non-empty prompt")
        check_int(max_new_tokens, "max new tokens")
        self.model = model
        self._info = info
        self.prompts = [list(map(int, p)) for p in prompts]
        self.max_new_tokens = max_new_tokens
        self.policy = DraftPolicy(max_draft, draft_threshold)
        self._needs_warm_up = warm_up
        self._targets: dict[tuple[int, int], Any] = {}

    @classmethod
    def from_texts(cls, loaded: Any, texts: Sequence[str], **kwargs: Any) -> "ModelRuntime":
        """A runtime for a LoadedModel (model, tokenizer, info) and prompt texts."""
        prompts = [loaded.tokenizer(text, return_tensors="pt").input_ids[0].tolist() for text in texts]
        return cls(loaded.model, loaded.info, prompts, **kwargs)

    @property
    def info(self) -> ModelInfo:
        """The model the masks are for."""
        return self._info

    @property
    def context_length(self) -> int:
        """Mean prompt length plus half the new tokens."""
        return int(statistics.fmean(len(p) for p in self.prompts) + self.max_new_tokens / 2)

    # ----- measurements ------------------------------------------------------------------------
    def decode(self, mask: SkipMask) -> "DecodeStats":
        """Greedy speculative decoding of every prompt with ``mask``; counts and seconds pooled."""
        from layersearch.decoder.build import assemble
        from layersearch.runtime.stats import combine
        from layersearch.decoder.fragments import mask_spec

        self._warm_up()
        decoder = assemble(self.model, mask_spec(mask, self.policy))
        return combine([decoder.generate(p, self.max_new_tokens).stats for p in self.prompts])

    def baseline(self) -> "DecodeStats":
        """Plain ``model.generate`` (greedy) over the same prompts."""
        from layersearch.runtime.baseline import hf_generate
        from layersearch.runtime.stats import combine

        self._warm_up()
        return combine([hf_generate(self.model, p, self.max_new_tokens).stats for p in self.prompts])

    def matchness(self, mask: SkipMask, gamma: int) -> MatchMeasurement:
        """SWIFT matchness: one teacher-forced masked forward per prompt over gamma target tokens."""
        from layersearch.runtime.teacher import draft_logits, matched_tokens

        matched = compared = 0
        for index in range(len(self.prompts)):
            run = self._target(index, gamma)
            if len(run.tokens) < 2:
                continue  # the target ended at once (end of sequence): nothing to predict
            # Rows predict t_1..t_gamma from the target's own prefix.
            matched += matched_tokens(draft_logits(self.model, mask, run), run.tokens[1:])
            compared += len(run.tokens) - 1
        return MatchMeasurement(matched, compared)

    # ----- helpers -----------------------------------------------------------------------------
    def _target(self, index: int, gamma: int) -> Any:
        """The target's greedy tokens t_1..t_{gamma+1} with the prompt cache (a TargetRun, cached)."""
        key = (index, gamma)
        if key not in self._targets:
            from layersearch.runtime.loop import eos_ids
            from layersearch.runtime.teacher import target_continuation

            self._targets[key] = target_continuation(self.model, self.prompts[index], gamma + 1, eos_ids(self.model))
        return self._targets[key]

    def _warm_up(self) -> None:
        """One short untimed generation, so the first measured mask does not pay start-up costs."""
        if self._needs_warm_up:
            from layersearch.decoder.build import assemble
            from layersearch.decoder.fragments import mask_spec

            self._needs_warm_up = False
            mask = SkipMask.none(self._info.num_layers)
            assemble(self.model, mask_spec(mask, self.policy)).generate(self.prompts[0], 2)
