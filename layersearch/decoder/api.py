"""The Python API: ``layersearch.load_decoder(spec_or_path)`` and the decoder it returns.

::

    import layersearch
    decoder = layersearch.load_decoder("spec.json")          # a DecoderSpec file
    out = decoder.generate("The capital of France is", max_new_tokens=32)
    print(out.text, out.stats.mean_accepted_length)

``generate`` takes text, token ids or a chat (a list of ``{"role", "content"}`` messages,
formatted with the tokenizer's chat template) and any transformers streamer
(``TextStreamer``, ``TextIteratorStreamer``), fed the prompt first, as ``generate`` does, then
the tokens as the loop accepts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any, Sequence

from layersearch.decoder.build import BuiltDecoder, build_decoder, read_spec_files
from layersearch.common.checks import api_arguments, check_int, check_real, check_seed, check_text
from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DecoderSpec

__all__ = ["Decoder", "Generation", "load_decoder"]


@dataclass(frozen=True)
class Generation:
    """One generation: the new text (special tokens dropped), its token ids and the run's statistics."""

    text: str
    token_ids: tuple[int, ...]
    stats: Any  # DecodeStats


setattr(Generation, "__init__", api_arguments(Generation.__init__))  # a bad field: LayersearchError, as everywhere


class Decoder:
    """A loaded model decoding as its spec says (see :func:`load_decoder`)."""

    @api_arguments
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

    def capture_stats(self) -> Any:
        """The captured forwards so far, a :class:`~layersearch.runtime.compiling.CaptureStats`:
        compiled entries, hits, misses, evictions, ``hit_rate`` and ``compile_seconds`` (paid once
        per entry, apart from decoding). The table is shared by every decoder of this model; an
        eager decoder adds nothing to it. None for a plain spec (transformers' ``generate``)."""
        speculative = self._built.speculative
        return None if speculative is None else speculative.capture_stats()

    @api_arguments
    def generate(
        self, prompt_or_ids: Any, max_new_tokens: int | None = None, *, do_sample: bool | None = None,
        temperature: float | None = None, top_p: float | None = None, seed: int | None = None, streamer: Any = None,
        top_k: int | None = None,
    ) -> Generation:
        """Generate after a prompt: text, token ids (a list or a ``[1, n]`` tensor) or chat messages.

        Settings left as None are the spec's (``max_new_tokens``, sampling; ``top_k=0`` keeps every
        token, the spec's default, where transformers' ``generate`` keeps 50). One rule, as in spec
        files and on the command line: a ``temperature`` > 0 samples (``do_sample`` may be left out),
        ``do_sample=True`` without a temperature samples at 1.0 unless the spec samples at its own,
        and ``do_sample=True, temperature=0`` (or ``False`` with a temperature > 0) is refused. The output is
        lossless: in fp32 greedy equals the model's own greedy ``generate`` token for token and
        sampling follows its distribution; in bf16/fp16 near-ties can break differently, as under
        any change of batch shape (README.md, "Lossless: what holds"). Every argument is checked
        first (LayersearchError, as the CLI words it), the prompt and the new tokens against the
        model's context included."""
        import torch

        from layersearch.models.context import check_fits, check_text_fits

        max_new = self.spec.max_new_tokens if max_new_tokens is None else check_int(max_new_tokens, "max_new_tokens")
        sampling = self._built.sampling(*_sampling_args(do_sample, temperature, top_p, seed),
                                        top_k=None if top_k is None else check_int(top_k, "top_k", minimum=0))
        check_streamer(streamer)
        if isinstance(prompt_or_ids, str):  # certainly too long: refused before tokenizing
            check_text_fits(self._built.loaded, check_text(prompt_or_ids, "the prompt"), max_new, "the prompt")
        ids = self.encode(prompt_or_ids)  # [1, n]
        check_fits(self._built.loaded, ids.shape[1], max_new, "the prompt", "max_new_tokens")
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

    @api_arguments
    def encode(self, prompt_or_ids: Any) -> Any:
        """Prompt ids ``[1, n]`` for text, ids or chat messages (each checked: valid Unicode
        text, integer ids inside the model's vocabulary, one row of them)."""
        import torch

        if isinstance(prompt_or_ids, str):
            ids = self.tokenizer(check_text(prompt_or_ids, "the prompt"), return_tensors="pt").input_ids
        elif isinstance(prompt_or_ids, torch.Tensor):
            ids = self._tensor_ids(prompt_or_ids)
        elif isinstance(prompt_or_ids, (bytes, bytearray, memoryview)):
            raise LayersearchError("the prompt is bytes: decode it to text (str) or pass a list of token ids")
        elif isinstance(prompt_or_ids, Sequence) and prompt_or_ids and all(isinstance(m, dict) for m in prompt_or_ids):
            ids = self._chat_ids(prompt_or_ids)
        elif isinstance(prompt_or_ids, Sequence) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt_or_ids):
            ids = self._checked_ids(list(prompt_or_ids))
        else:
            raise LayersearchError("the prompt must be text, token ids or a list of {'role', 'content'} messages")
        if ids.shape[1] == 0:
            raise LayersearchError("the prompt is empty: give at least one token")
        return ids

    def _tensor_ids(self, ids: Any) -> Any:
        """A token-id tensor as ``[1, n]``: integers, one row (a batch or a 3-D tensor is refused, not flattened)."""
        import torch

        if ids.dtype == torch.bool or ids.dtype.is_floating_point or ids.dtype.is_complex:
            raise LayersearchError(f"token ids must be an integer tensor, got dtype {str(ids.dtype).removeprefix('torch.')}")
        if ids.dim() == 1:
            ids = ids.reshape(1, -1)
        if ids.dim() != 2 or ids.shape[0] != 1:
            raise LayersearchError(f"token ids must be a [n] or [1, n] tensor (one prompt), got shape {tuple(ids.shape)}")
        return self._checked_ids(ids.to(torch.long).tolist()[0]).to(ids.device)

    def _checked_ids(self, ids: list[int]) -> Any:
        """``ids`` as a ``[1, n]`` long tensor, each inside the model's vocabulary."""
        import torch

        vocab = self.model.get_input_embeddings().weight.shape[0]
        for position, token in enumerate(ids):
            if not 0 <= token < vocab:
                raise LayersearchError(f"token id {token} (position {position}) is outside the model's vocabulary "
                                       f"(ids 0..{vocab - 1})")
        return torch.tensor([ids], dtype=torch.long)

    def _chat_ids(self, messages: Sequence[dict]) -> Any:
        from layersearch.data.user import chat_messages

        pairs = chat_messages(list(messages), "the chat")  # the rules of prompt files' chat rows
        messages = [{"role": role, "content": content} for role, content in pairs]
        if not getattr(self.tokenizer, "chat_template", None):
            raise LayersearchError(
                f"the tokenizer of model {self.spec.model.ref.ref!r} has no chat template: pass the prompt as text"
            )
        text = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
        # The template writes the special tokens itself (a BOS included where the model has one).
        return self.tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids


def _sampling_args(do_sample: Any, temperature: Any, top_p: Any, seed: Any) -> tuple[Any, Any, Any, Any]:
    """generate's sampling arguments checked as a spec's ``sampling`` fields are."""
    if do_sample is not None and not isinstance(do_sample, bool):
        raise LayersearchError(f"do_sample must be True, False or None, got {do_sample!r}")
    if temperature is not None:
        temperature = check_real(temperature, "temperature", low=0.0)
    if top_p is not None:
        top_p = check_real(top_p, "top_p", low=0.0, high=1.0, low_open=True)
    if seed is not None:
        seed = check_seed(seed, "seed")
    return do_sample, temperature, top_p, seed


def check_streamer(streamer: Any) -> None:
    """A streamer has ``put`` and ``end`` (transformers' BaseStreamer), checked before any work."""
    if isinstance(streamer, type):
        raise LayersearchError(f"streamer is the class {streamer.__name__}: pass an instance of it "
                               f"(such as {streamer.__name__}(decoder.tokenizer))")
    if streamer is not None and not (callable(getattr(streamer, "put", None)) and callable(getattr(streamer, "end", None))):
        raise LayersearchError(f"streamer must have put() and end() methods (a transformers streamer), "
                               f"got {type(streamer).__name__}")


@api_arguments
def load_decoder(spec_or_path: DecoderSpec | str | Path, model: Any = None, *, kernels: str = "auto") -> Decoder:
    """The decoder a spec (or spec file) describes. ``model``: an already loaded
    :class:`~layersearch.models.loading.LoadedModel`, or a transformers ``(model, tokenizer)``
    pair, to avoid loading the spec's model again; it must be the model the spec was made for.
    ``kernels`` (auto, stock, numba): the CPU kernels; auto follows the spec's latency profile."""
    if not isinstance(spec_or_path, (DecoderSpec, str, PathLike)):
        raise LayersearchError(f"load_decoder takes a DecoderSpec or the path of a spec file (str or Path), "
                               f"got {type(spec_or_path).__name__}")
    from layersearch.kernels.select import CHOICES

    if not isinstance(kernels, str) or kernels not in CHOICES:
        raise LayersearchError(f"kernels must be one of {', '.join(CHOICES)}, got {kernels!r}")
    if isinstance(spec_or_path, str):
        check_text(spec_or_path, "the spec path")
        if not spec_or_path.strip():
            raise LayersearchError("the spec path is empty: give a spec file (as DecoderSpec.save writes)")
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
        if not (callable(getattr(hf_model, "eval", None)) and hasattr(hf_model, "config")):
            raise LayersearchError(f"model=(model, tokenizer): the model must be a transformers model, got {type(hf_model).__name__}")
        if not callable(tokenizer):
            raise LayersearchError(f"model=(model, tokenizer): the tokenizer must be a transformers tokenizer, "
                                   f"got {type(tokenizer).__name__}")
        return LoadedModel(hf_model.eval(), tokenizer, describe_model(hf_model, spec.model.ref.ref))
    raise LayersearchError(f"model= takes a LoadedModel or a (model, tokenizer) pair, got {type(model).__name__}")
