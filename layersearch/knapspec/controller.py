"""Context-aware draft re-selection while decoding: KnapSpec's runtime mode, as a controller.

:class:`KnapSpecController` plugs into the decode loop's controller point
(:mod:`layersearch.runtime.control`): right after the prefill, and then every ``interval``
decoding steps (verification cycles), it:

1. takes the last ``window`` tokens (prompt and generated; at the first selection the prompt's
   last tokens) as reference tokens, their context being the target's KV cache (read-only);
2. computes integer latency weights at the current context length ``n`` from the
   :class:`~layersearch.profiling.profile.LatencyProfile` (attention grows with ``n``, MLP does not), so
   long contexts make attention sub-layers heavier and the knapsack drops more of them;
3. builds the candidate set (:func:`~layersearch.knapspec.candidates_hidden_dp`, or the cheaper
   per-item-value knapsack with ``method="items"``), estimates the alpha of an even spread of
   them (``max_alpha_candidates``, 8) by top-1 agreement with the target on the last
   ``alpha_window`` tokens, and picks ``(S*, gamma*)`` of largest predicted TPT;
4. drafts with ``S*`` and at most ``gamma*`` tokens until the next selection (plain decoding
   when no draft beats the target alone).

Why a separate, longer alpha window: KnapSpec's reference is the tokens of the last 5 steps.
Five tokens give alpha in steps of 0.2, and the TPT argmax over many candidates then picks one
that agreed on all five by chance (the winner's curse). On SmolLM2-135M with a 1k-token news
prompt, masks scoring alpha = 1.0 on 5 tokens scored 0.22-0.69 on 64 tokens and were accepted
at 0.08-0.29 when decoding. The DP itself stays on ``window`` tokens (its cost is linear in
them); only the chosen few masks run over ``alpha_window`` tokens. ``alpha_window=None``
measures alpha on the DP's own tokens, as the paper.

Draft plans (``space="plans"``): instead of skip masks, each selection's candidates are plans,
every sub-layer full, int8 or skipped by the multiple-choice knapsack at its profiled cost, and
the LM head full or int8 (:class:`~layersearch.knapspec.select.KnapSpecConfig` method
``"plans"``). The profile must hold int8 timings (``layersearch profile`` measures them where the
model can run int8 twins); the default space stays ``"skips"``, the paper's.

The policy's confidence threshold still stops drafts early. Every selection is recorded in
``stats.selections``: step, context length, mask, gamma, predicted TPT, alpha, budget, cosine,
weights and its own seconds (which count in ``stats.other_seconds``).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Cache, PreTrainedModel

from layersearch.common.errors import LayersearchError
from layersearch.knapspec.select import KnapSpecConfig, KnapSpecSelector, require_int8_profile
from layersearch.knapspec.sublayers import window_from_cache
from layersearch.runtime import MAX_DRAFT
from layersearch.runtime.step import Controller, DecodeView, Selection, StepOutcome

DEFAULT_INTERVAL = 64
DEFAULT_WINDOW = 5
DEFAULT_ALPHA_WINDOW = 32
DEFAULT_ALPHA_CANDIDATES = 8
#: What a selection chooses: skip masks (KnapSpec's) or draft plans (full, int8 or skip per sub-layer).
SPACES = ("skips", "plans")


class KnapSpecController(Controller):
    """Re-selects the draft sub-network ``(S*, gamma*)`` by KnapSpec's knapsack + TPT."""

    wants_prompt_hidden = False

    def __init__(
        self,
        model: PreTrainedModel,
        profile,
        *,
        max_draft: int = MAX_DRAFT,
        interval: int = DEFAULT_INTERVAL,
        window: int = DEFAULT_WINDOW,
        alpha_window: int | None = DEFAULT_ALPHA_WINDOW,
        config: KnapSpecConfig | None = None,
        space: str = "skips",
    ) -> None:
        _check_int(interval, "re-selection interval")
        config = _config_for_space(space, config, max_draft)
        _check_int(window, "reference window")
        if alpha_window is not None:
            _check_int(alpha_window, "alpha window", "or None")
        _refuse_evicting_windows(model, max(window, alpha_window or 0))
        _refuse_plans_without_int8(model, profile, config)
        self.model = model
        self.profile = profile
        self.interval = interval
        self.window = window
        self.alpha_window = alpha_window
        self.config = config
        self.space = space
        self.selector = KnapSpecSelector(model, profile, self.config)
        self.num_layers = self.selector.runner.num_layers

    def select(self, view: DecodeView) -> Selection | None:
        """At step 0 and every ``interval`` steps: choose ``(S*, gamma*)`` from the cache and newest tokens."""
        if view.step % self.interval:
            return None
        if view.step == 0:
            self.selector.reset()  # per-item values (method "items") are measured per generation
        cache = view.cache
        if not isinstance(cache, Cache):
            raise LayersearchError(f"the KnapSpec controller reads a transformers Cache, not a {type(cache).__name__}")
        sequence = view.sequence[0].to(self.selector.model.device)  # [position + 1]; the model the view runs
        windows = [window_from_cache(cache, sequence, self.window)]
        alpha_windows = None
        if self.alpha_window is not None and self.alpha_window > self.window:
            alpha_windows = [window_from_cache(cache, sequence, self.alpha_window)]
        choice = self.selector.select(windows, view.position, alpha_windows)
        record: dict[str, Any] = choice.record()
        record.update(self.selector.last_timing)
        gamma = choice.gamma if choice.gamma >= 1 else None  # plain decoding keeps the cap as is
        return Selection(choice.mask, gamma, record)

    def observe(self, outcome: StepOutcome) -> None:
        """KnapSpec re-selects on a schedule, not on feedback."""


def _config_for_space(space: Any, config: KnapSpecConfig | None, max_draft: int) -> KnapSpecConfig:
    """The selector's config for ``space``: ``config`` when given (its method must agree), else the
    default, whose grid over gamma goes up to the loop's max draft length (KnapSpec's D)."""
    if space not in SPACES:
        raise LayersearchError(f"KnapSpec's space must be one of {', '.join(SPACES)}, got {space!r}")
    if config is None:
        method = "plans" if space == "plans" else "hidden"
        return KnapSpecConfig(method=method, max_draft=max_draft, max_alpha_candidates=DEFAULT_ALPHA_CANDIDATES)
    if (config.method == "plans") != (space == "plans"):
        raise LayersearchError(f"KnapSpec's space {space!r} does not fit the knapsack method {config.method!r} "
                               "(plans need method 'plans'; skip masks 'hidden' or 'items')")
    return config


def _refuse_plans_without_int8(model: PreTrainedModel, profile: Any, config: KnapSpecConfig) -> None:
    """Plans are costed by the profile's int8 timings and run by int8 twins: both checked before decoding."""
    if config.method != "plans":
        return
    require_int8_profile(profile)
    from layersearch.models.precision import check_int8_device

    check_int8_device(model)


def _refuse_evicting_windows(model: PreTrainedModel, tokens: int) -> None:
    """Reference windows read the context their tokens attend to from the committed cache; a
    sliding-window layer keeps only its last ``window - 1`` positions, too few for ``tokens > 1``."""
    from layersearch.runtime.cache import sliding_windows

    if tokens > 1 and any(w is not None for w in sliding_windows(model)):
        raise LayersearchError(
            "KnapSpec re-selection while decoding is not supported on sliding-window models (their cache "
            "evicts the reference window's context); use a fixed mask, e.g. from a study with the knapsack strategy"
        )


def _check_int(value: Any, what: str, alternative: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        extra = f" {alternative}" if alternative else ""
        raise LayersearchError(f"{what} must be an integer >= 1{extra}, got {value!r}")
