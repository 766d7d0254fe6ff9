"""Plain autoregressive decoding through transformers' own ``generate``, timed like our loop."""

from __future__ import annotations

from typing import Any

import torch
from transformers.generation.streamers import BaseStreamer

from layersearch.runtime.decoder import GenerationResult, _as_prompt
from layersearch.runtime.sampling import SamplingConfig
from layersearch.runtime.stats import DecodeStats
from layersearch.runtime.timing import Clock


@torch.inference_mode()
def hf_generate(
    model: torch.nn.Module,
    input_ids: Any,
    max_new_tokens: int,
    *,
    sampling: SamplingConfig = SamplingConfig(),
    **generate_kwargs: Any,
) -> GenerationResult:
    """``model.generate`` (greedy or sampled) with the same statistics as SpeculativeDecoder.

    ``prefill_seconds`` is the time to the first new token, as in our loop (a streamer notes
    when ``generate`` hands it over), so the decode phase compares on its own.

    Extra keyword arguments go to ``generate`` (e.g. ``prompt_lookup_num_tokens`` or
    ``assistant_early_exit`` for transformers' own speculative peers).
    """
    prompt = _as_prompt(input_ids, model.device)
    options: dict[str, Any] = dict(max_new_tokens=max_new_tokens, do_sample=not sampling.greedy)
    if not sampling.greedy:
        options.update(temperature=sampling.temperature, top_p=sampling.top_p)
        torch.manual_seed(0 if sampling.seed is None else sampling.seed)
    clock = Clock(model.device)
    first = _FirstToken(clock)
    start = clock.now()
    output = model.generate(prompt, attention_mask=torch.ones_like(prompt), streamer=first, **options, **generate_kwargs)
    total = clock.now() - start
    prefill = (first.seconds - start) if first.seconds is not None else 0.0
    tokens = tuple(output[0, prompt.shape[1] :].tolist())
    stats = DecodeStats(
        new_tokens=len(tokens),
        target_forwards=max(0, len(tokens) - 1),
        drafted=0,
        accepted=0,
        prefill_seconds=prefill,
        draft_seconds=0.0,
        verify_seconds=total - prefill,
        total_seconds=total,
    )
    return GenerationResult(tokens, stats)


class _FirstToken(BaseStreamer):
    """Notes the time ``generate`` hands over its first new token (its first ``put`` is the prompt)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.puts = 0
        self.seconds: float | None = None

    def put(self, value: torch.Tensor) -> None:
        self.puts += 1
        if self.puts == 2:
            self.seconds = self.clock.now()

    def end(self) -> None:
        """Nothing to flush."""
