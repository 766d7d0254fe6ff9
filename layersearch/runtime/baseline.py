"""Plain autoregressive decoding through transformers' own ``generate``, timed like our loop."""

from __future__ import annotations

from typing import Any

import torch
from transformers.generation.streamers import BaseStreamer

from layersearch.runtime.loop import GenerationResult, _as_prompt
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

    The phases are :class:`DecodeStats`'s, as for our loop: a streamer notes when ``generate``
    hands over its first new tokens and how many (assisted generation and prompt lookup hand
    over a whole verification step at once: ``first_tokens``), and an assistant model's own
    prompt forward is timed by a hook and reported as ``draft_prefill_seconds``, not as prefill.

    Extra keyword arguments go to ``generate`` (e.g. ``prompt_lookup_num_tokens`` or
    ``assistant_early_exit`` for transformers' own speculative peers).
    """
    lm: Any = model  # a transformers model: generate and device are not in torch's Module type
    prompt = _as_prompt(input_ids, lm.device)
    options: dict[str, Any] = dict(max_new_tokens=max_new_tokens, do_sample=not sampling.greedy)
    if not sampling.greedy:
        # top_k always: 0 keeps every token, where generate left alone would keep its default 50
        options.update(temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p)
        torch.manual_seed(0 if sampling.seed is None else sampling.seed)
    clock = Clock(lm.device)
    first = _FirstToken(clock)
    assistant = _PrefillTimer(generate_kwargs.get("assistant_model"), clock)
    start = clock.now()
    with assistant:
        output = lm.generate(prompt, attention_mask=torch.ones_like(prompt), streamer=first, **options, **generate_kwargs)
    total = clock.now() - start
    tokens = tuple(output[0, prompt.shape[1] :].tolist())
    # The assistant's prompt forward runs before the first delivery: its own phase, not the prefill's.
    prefill = max((first.seconds - start) - assistant.seconds, 0.0) if first.seconds is not None else 0.0
    stats = DecodeStats(
        new_tokens=len(tokens),
        target_forwards=max(0, len(tokens) - 1),
        drafted=0,
        accepted=0,
        prefill_seconds=prefill,
        draft_seconds=0.0,
        verify_seconds=max(total - prefill - assistant.seconds, 0.0),
        total_seconds=total,
        first_tokens=min(first.tokens, len(tokens)) if first.seconds is not None else 1,
        draft_prefill_seconds=assistant.seconds,
        path="captured" if generate_kwargs.get("cache_implementation") == "static" else "eager",
    )
    return GenerationResult(tokens, stats)


class _FirstToken(BaseStreamer):
    """Notes when ``generate`` hands over its first new tokens, and how many (its first ``put``
    is the prompt; assisted generation puts every token of a verification step at once)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.puts = 0
        self.seconds: float | None = None
        self.tokens = 0

    def put(self, value: torch.Tensor) -> None:
        self.puts += 1
        if self.puts == 2:
            self.seconds = self.clock.now()
            self.tokens = int(value.numel())

    def end(self) -> None:
        """Nothing to flush."""


class _PrefillTimer:
    """Inside the block, times ``model``'s first forward (an assistant's prompt forward); a no-op
    for None. The hooks are removed on exit."""

    def __init__(self, model: torch.nn.Module | None, clock: Clock) -> None:
        self.model = model
        self.clock = clock
        self.seconds = 0.0
        self._calls = 0
        self._start = 0.0
        self._hooks: list[Any] = []

    def __enter__(self) -> "_PrefillTimer":
        if self.model is not None:
            self._hooks = [self.model.register_forward_pre_hook(self._before),
                           self.model.register_forward_hook(self._after)]
        return self

    def __exit__(self, *exc: Any) -> None:
        for hook in self._hooks:
            hook.remove()

    def _before(self, module: Any, args: Any) -> None:
        self._calls += 1
        if self._calls == 1:
            self._start = self.clock.now()

    def _after(self, module: Any, args: Any, output: Any) -> None:
        if self._calls == 1:
            self.seconds = self.clock.now() - self._start
