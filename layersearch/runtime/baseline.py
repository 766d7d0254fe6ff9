"""Plain autoregressive decoding through transformers' own ``generate``, timed like our loop."""

from __future__ import annotations

from typing import Any

import torch

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

    Extra keyword arguments go to ``generate`` (e.g. ``prompt_lookup_num_tokens`` or
    ``assistant_early_exit`` for transformers' own speculative peers).
    """
    prompt = _as_prompt(input_ids, model.device)
    options: dict[str, Any] = dict(max_new_tokens=max_new_tokens, do_sample=not sampling.greedy)
    if not sampling.greedy:
        options.update(temperature=sampling.temperature, top_p=sampling.top_p)
        torch.manual_seed(0 if sampling.seed is None else sampling.seed)
    clock = Clock(model.device)
    start = clock.now()
    output = model.generate(prompt, attention_mask=torch.ones_like(prompt), **options, **generate_kwargs)
    total = clock.now() - start
    tokens = tuple(output[0, prompt.shape[1] :].tolist())
    stats = DecodeStats(
        new_tokens=len(tokens),
        target_forwards=max(0, len(tokens) - 1),
        drafted=0,
        accepted=0,
        prefill_seconds=0.0,
        draft_seconds=0.0,
        verify_seconds=total,
        total_seconds=total,
    )
    return GenerationResult(tokens, stats)
