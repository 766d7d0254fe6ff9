"""The Python API: ``layersearch.load_decoder(spec_or_path)`` and the decoder it returns.

::

    import layersearch
    decoder = layersearch.load_decoder("spec.json")          # from `generate --save-spec`
    out = decoder.generate("The capital of France is", max_new_tokens=32)
    print(out.text, out.stats.mean_accepted_length)

``generate`` takes text, token ids or a chat (a list of ``{"role", "content"}`` messages,
formatted with the tokenizer's chat template) and any transformers streamer
(``TextStreamer``, ``TextIteratorStreamer``), fed the prompt first, as ``generate`` does, then
the tokens as the loop accepts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from layersearch.build import BuiltDecoder, build_decoder, read_spec_files
from layersearch.errors import LayersearchError
from layersearch.spec import DecoderSpec

__all__ = ["Decoder", "Generation", "load_decoder"]


@dataclass(frozen=True)
class Generation:
    """One generation: the new text (special tokens dropped), its token ids and the run's statistics."""

    text: str
    token_ids: tuple[int, ...]
    stats: Any  # DecodeStats


class Decoder:
    """A loaded model decoding as its spec says (see :func:`load_decoder`)."""

    def __init__(self, built: BuiltDecoder) -> None:
        self._built = built

    @property
    def spec(self) -> DecoderSpec:
        """The spec this decoder runs, bound to its model (``spec.save(path)`` writes it)."""
        return self._built.spec

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer."""
        return self._built.loaded.tokenizer

    @property
    def model(self) -> Any:
        """The verifier model."""
        return self._built.loaded.model

    def generate(
        self, prompt_or_ids: Any, max_new_tokens: int | None = None, *, do_sample: bool | None = None,
        temperature: float | None = None, top_p: float | None = None, seed: int | None = None, streamer: Any = None,
    ) -> Generation:
        """Generate after a prompt: text, token ids (a list or a ``[1, n]`` tensor) or chat messages.

        Settings left as None are the spec's (``max_new_tokens``, sampling); ``do_sample=True``
        without a temperature samples at 1.0 unless the spec samples at its own. The output is
        lossless: greedy equals the model's own greedy ``generate``, sampling follows its
        distribution."""
        import torch

        ids = self.encode(prompt_or_ids)  # [1, n]
        max_new = self.spec.max_new_tokens if max_new_tokens is None else max_new_tokens
        sampling = self._built.sampling(do_sample, temperature, top_p, seed)
        on_tokens = None
        if streamer is not None:
            streamer.put(ids.cpu())  # the prompt first, as transformers' generate does
            on_tokens = lambda tokens: streamer.put(torch.tensor(tokens, dtype=torch.long))  # noqa: E731
        try:
            result = self._built.run(ids, max_new, sampling=sampling, on_tokens=on_tokens)
        finally:
            if streamer is not None:
                streamer.end()  # also on failure, so a consuming thread is never left waiting
        text = self.tokenizer.decode(list(result.token_ids), skip_special_tokens=True)
        return Generation(text, tuple(result.token_ids), result.stats)

    def encode(self, prompt_or_ids: Any) -> Any:
        """Prompt ids ``[1, n]`` for text, ids or chat messages."""
        import torch

        if isinstance(prompt_or_ids, str):
            return self.tokenizer(prompt_or_ids, return_tensors="pt").input_ids
        if isinstance(prompt_or_ids, torch.Tensor):
            return prompt_or_ids if prompt_or_ids.dim() == 2 else prompt_or_ids.reshape(1, -1)
        if isinstance(prompt_or_ids, Sequence) and prompt_or_ids and all(isinstance(m, dict) for m in prompt_or_ids):
            return self._chat_ids(prompt_or_ids)
        if isinstance(prompt_or_ids, Sequence) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt_or_ids):
            return torch.tensor([list(prompt_or_ids)], dtype=torch.long)
        raise LayersearchError("the prompt must be text, token ids or a list of {'role', 'content'} messages")

    def _chat_ids(self, messages: Sequence[dict]) -> Any:
        for number, message in enumerate(messages, 1):
            if not isinstance(message.get("role"), str) or not isinstance(message.get("content"), str):
                raise LayersearchError(f"chat message {number}: expected {{'role': str, 'content': str}}")
        if not getattr(self.tokenizer, "chat_template", None):
            raise LayersearchError(
                f"the tokenizer of model {self.spec.model.ref.ref!r} has no chat template: pass the prompt as text"
            )
        text = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
        # The template writes the special tokens itself (a BOS included where the model has one).
        return self.tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids


def load_decoder(spec_or_path: DecoderSpec | str | Path, model: Any = None, *, kernels: str = "auto") -> Decoder:
    """The decoder a spec (or spec file) describes. ``model``: an already loaded
    :class:`~layersearch.models.loading.LoadedModel`, or a transformers ``(model, tokenizer)``
    pair, to avoid loading the spec's model again; it must be the model the spec was made for.
    ``kernels`` (auto, stock, numba): the CPU kernels; auto follows the spec's latency profile."""
    spec = spec_or_path if isinstance(spec_or_path, DecoderSpec) else DecoderSpec.load(spec_or_path)
    try:
        files = read_spec_files(spec)  # bad files fail before the model loads
        return Decoder(build_decoder(_loaded(model, spec), spec, files, kernels=kernels))
    except LayersearchError as exc:  # what a spec file names fails naming that file
        if isinstance(spec_or_path, DecoderSpec) or str(exc).startswith(f"{spec_or_path}: "):
            raise
        raise LayersearchError(f"{spec_or_path}: {exc}") from None


def _loaded(model: Any, spec: DecoderSpec) -> Any:
    """A LoadedModel: ``model`` as given, a (model, tokenizer) pair wrapped, or the spec's model loaded."""
    from layersearch.models.loading import LoadedModel, default_dtype, describe_model, load_model

    if model is None:
        return load_model(spec.model.ref.ref, device=spec.model.device, dtype=spec.model.dtype or default_dtype(spec.model.device))
    if isinstance(model, LoadedModel):
        return model
    if isinstance(model, tuple) and len(model) == 2:
        hf_model, tokenizer = model
        return LoadedModel(hf_model.eval(), tokenizer, describe_model(hf_model, spec.model.ref.ref))
    raise LayersearchError("model= takes a LoadedModel or a (model, tokenizer) pair")
