"""Context-aware draft re-selection while decoding: KnapSpec's runtime mode.

:class:`DynamicKnapsackDecoder` runs the ordinary lossless loop of
:class:`~layersearch.runtime.decoder.SpeculativeDecoder` with its ``selector`` hook: right after
the prefill, and then every ``interval`` decoding steps (verification cycles), it

1. takes the last ``window`` tokens (prompt and generated; at the first selection the prompt's
   last tokens) as reference tokens, their context being the target's KV cache (read-only);
2. computes integer latency weights at the current context length ``n`` from the
   :class:`~layersearch.profile.LatencyProfile` (attention grows with ``n``, MLP does not), so
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

The policy's confidence threshold still stops drafts early. Every selection is recorded in
``stats.selections``: step, context length, mask, gamma, predicted TPT, alpha, budget, cosine,
weights and its own seconds (which count in ``stats.other_seconds``).
"""

from __future__ import annotations

import sys
from typing import Any, Iterable

import torch

from layersearch.errors import LayersearchError
from layersearch.knapspec import KnapSpecConfig, KnapSpecSelector, window_from_cache
from layersearch.mask import SkipMask
from layersearch.runtime.decoder import GenerationResult, Selection, SelectionRequest, SpeculativeDecoder
from layersearch.runtime.drafting import DraftPolicy
from layersearch.runtime.sampling import SamplingConfig

DEFAULT_INTERVAL = 64
DEFAULT_WINDOW = 5
DEFAULT_ALPHA_WINDOW = 32
DEFAULT_ALPHA_CANDIDATES = 8


class DynamicKnapsackDecoder:
    """Self-speculative decoding that re-selects the draft sub-network by KnapSpec's knapsack + TPT."""

    def __init__(
        self,
        model: torch.nn.Module,
        profile,
        *,
        policy: DraftPolicy = DraftPolicy(),
        sampling: SamplingConfig = SamplingConfig(),
        interval: int = DEFAULT_INTERVAL,
        window: int = DEFAULT_WINDOW,
        alpha_window: int | None = DEFAULT_ALPHA_WINDOW,
        config: KnapSpecConfig | None = None,
    ) -> None:
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise LayersearchError(f"re-selection interval must be an integer >= 1, got {interval!r}")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise LayersearchError(f"reference window must be an integer >= 1, got {window!r}")
        if alpha_window is not None and (isinstance(alpha_window, bool) or not isinstance(alpha_window, int) or alpha_window < 1):
            raise LayersearchError(f"alpha window must be an integer >= 1 or None, got {alpha_window!r}")
        self.model = model
        self.profile = profile
        self.policy = policy
        self.sampling = sampling
        self.interval = interval
        self.window = window
        self.alpha_window = alpha_window
        # The grid over gamma goes up to the policy's max draft length (KnapSpec's D).
        self.config = config or KnapSpecConfig(
            max_gamma=policy.max_draft_tokens, max_alpha_candidates=DEFAULT_ALPHA_CANDIDATES
        )
        self.selector = KnapSpecSelector(model, profile, self.config)
        self.num_layers = self.selector.runner.num_layers

    def select(self, request: SelectionRequest) -> Selection:
        """The hook: choose ``(S*, gamma*)`` from the request's cache and newest tokens."""
        windows = [window_from_cache(request.cache, request.sequence[0], self.window)]
        alpha_windows = None
        if self.alpha_window is not None and self.alpha_window > self.window:
            alpha_windows = [window_from_cache(request.cache, request.sequence[0], self.alpha_window)]
        choice = self.selector.select(windows, request.position, alpha_windows)
        record: dict[str, Any] = choice.record()
        record.update(self.selector.last_timing)
        gamma = choice.gamma if choice.gamma >= 1 else None  # plain decoding keeps the policy as is
        return Selection(choice.mask, gamma, record)

    @torch.inference_mode()
    def generate(
        self, input_ids: torch.Tensor | Iterable[int], max_new_tokens: int, *, eos_token_ids: Iterable[int] | None = None
    ) -> GenerationResult:
        """Generate up to ``max_new_tokens`` tokens after ``input_ids`` (batch size 1), re-selecting as it goes."""
        self.selector.reset()  # per-item values (method "items") are measured per generation
        decoder = SpeculativeDecoder(
            self.model,
            SkipMask.none(self.num_layers),
            policy=self.policy,
            sampling=self.sampling,
            selector=self.select,
            reselect_every=self.interval,
        )
        return decoder.generate(input_ids, max_new_tokens, eos_token_ids=eos_token_ids)


def quick_profile(model: torch.nn.Module, info, *, max_verify: int = 12, progress=None):
    """A fast, rough latency profile (few contexts, 2 repeats) for when none was given."""
    from layersearch.runtime.profiler import measure_profile

    limit = getattr(model.config, "max_position_embeddings", None) or 4096
    contexts = tuple(n for n in (64, 256, 1024) if n + max_verify <= limit) or (max(1, limit - max_verify),)
    return measure_profile(model, info, contexts=contexts, max_verify=max_verify, repeats=2, progress=progress)


def load_or_measure_profile(path: str | None, loaded, *, max_verify: int = 12, stream=None):
    """The profile at ``path`` (checked against the model), or a quick one measured now (said on ``stream``)."""
    from layersearch.profile import LatencyProfile

    stream = stream or sys.stderr
    if path:
        return LatencyProfile.load(path, model=loaded.info)
    print(
        "layersearch: no --profile given; measuring a quick latency profile "
        "(save one with `layersearch profile --out FILE` for better numbers)",
        file=stream,
        flush=True,
    )
    return quick_profile(loaded.model, loaded.info, max_verify=max_verify)


def dynamic_decoder(args: Any, loaded, *, policy: DraftPolicy, sampling: SamplingConfig) -> DynamicKnapsackDecoder:
    """The decoder of ``layersearch generate --dynamic knapsack`` (uses ``args.profile``, ``args.reselect_every``)."""
    kind = getattr(args, "dynamic", "knapsack") or "knapsack"
    if kind != "knapsack":
        raise LayersearchError(f"unknown dynamic mode {kind!r} (only 'knapsack')")
    interval = getattr(args, "reselect_every", DEFAULT_INTERVAL)
    if interval is None or interval < 1:
        raise LayersearchError(f"--reselect-every must be >= 1, got {interval}")
    profile = load_or_measure_profile(getattr(args, "profile", None), loaded, max_verify=policy.max_draft_tokens + 1)
    return DynamicKnapsackDecoder(loaded.model, profile, policy=policy, sampling=sampling, interval=interval)
