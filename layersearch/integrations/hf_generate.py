"""``model.generate(**inputs, custom_generate=layersearch.decoding("spec.json"))``: transformers'
``generate`` runs a layersearch spec.

``generate`` prepares the prompt, the generation config, the logits processors and the stopping
criteria; :class:`Decoding` reads them (:mod:`.arguments`: honoured, or refused by name) and runs
the spec's decode loop on the caller's own model: no second load, no copy of the weights. The
decoder built for a model is kept for the model's lifetime (:data:`BUILT_ATTRIBUTE`), so the int8 twins
and the compiled-forward table are made once, not per call.

What it returns is what ``generate`` returns: the token tensor ``[1, prompt + new]``, or with
``return_dict_in_generate=True`` a :class:`LayersearchGenerateOutput` (a
``GenerateDecoderOnlyOutput``) whose ``decode_stats`` holds the run's
:class:`~layersearch.runtime.stats.DecodeStats`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence, cast

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from layersearch.common.checks import api_arguments
from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DecoderSpec
from layersearch.integrations.arguments import GenerateRequest, caller_arguments, check_model, read_request, refuse

__all__ = ["Decoding", "LayersearchGenerateOutput", "decoding", "folder_decoding"]

#: The model attribute holding its decoders: {(spec JSON, kernels, tokenizer id): BuiltDecoder}. On the
#: model, not in a module-level weak map, because a decoder refers to its model: a weak map's entry
#: would keep its own key alive, while an attribute makes a cycle the garbage collector frees.
BUILT_ATTRIBUTE = "_layersearch_decoders"


class BuiltDecoders(dict):
    """The decoders built on one model, by spec. A copy or a pickle of the model carries none
    (they hold the model itself, twins and compiled forwards): a copy builds its own on first use."""

    def __deepcopy__(self, memo: dict) -> "BuiltDecoders":
        return BuiltDecoders()

    def __reduce__(self) -> tuple:
        return (BuiltDecoders, ())
#: The exported folders' decodings, by their spec's JSON (transformers loads the folder's module per call).
_FOLDERS: dict[str, "Decoding"] = {}


@dataclass
class LayersearchGenerateOutput(GenerateDecoderOnlyOutput):
    """``generate``'s output with ``return_dict_in_generate=True``: ``sequences`` ``[1, prompt + new]``
    and ``decode_stats``, the run's DecodeStats (steps, drafted and accepted tokens, timings)."""

    decode_stats: Any = None


@api_arguments
def decoding(spec_or_path: DecoderSpec | str | os.PathLike, *, kernels: str = "auto", seed: int | None = None,
             tokenizer: Any = None) -> "Decoding":
    """A decoding method for ``model.generate(..., custom_generate=...)`` running ``spec_or_path``
    (a DecoderSpec, or a spec file as ``generate`` and ``tune`` write it).

    ``kernels`` (auto, stock, numba): the CPU kernels, as for ``load_decoder``. ``seed``: the
    sampling seed of every call; None draws each call's seed from torch's global generator, so
    ``torch.manual_seed`` makes a sampled ``generate`` repeatable as it does without layersearch.
    ``tokenizer``: the model's tokenizer, needed only for ``stop_strings`` and a spec's
    ``drafter.vocab`` (transformers hands a decoding method no tokenizer). The spec file is read
    and checked now; the spec is checked against the model on its first call.

    Which sampling wins: the call's generation config, as for plain ``generate`` (``do_sample``,
    ``temperature``, ``top_k``, ``top_p``; its ``top_k`` default is 50). The spec's ``sampling``
    (its seed included) and ``max_new_tokens`` apply only through layersearch's own entry points
    (``load_decoder(...).generate``, the ``generate`` command)."""
    from layersearch.common.checks import check_seed
    from layersearch.kernels.select import CHOICES

    if isinstance(spec_or_path, DecoderSpec):
        spec = spec_or_path
    elif isinstance(spec_or_path, (str, os.PathLike)):
        if isinstance(spec_or_path, str) and not spec_or_path.strip():
            raise LayersearchError("the spec path is empty: give a spec file (as DecoderSpec.save writes)")
        spec = DecoderSpec.load(spec_or_path if isinstance(spec_or_path, str) else Path(spec_or_path))
    else:
        raise LayersearchError(f"decoding takes a DecoderSpec or the path of a spec file (str or Path), "
                               f"got {type(spec_or_path).__name__}")
    if not isinstance(kernels, str) or kernels not in CHOICES:
        raise LayersearchError(f"kernels must be one of {', '.join(CHOICES)}, got {kernels!r}")
    if seed is not None:
        seed = check_seed(seed, "seed")
    if tokenizer is not None and not callable(getattr(tokenizer, "convert_ids_to_tokens", None)):
        raise LayersearchError(f"tokenizer must be a transformers tokenizer, got {type(tokenizer).__name__}")
    from layersearch.decoder.build import read_spec_files

    try:
        read_spec_files(spec)  # bad files fail now, not inside generate
    except LayersearchError as exc:
        where = "" if isinstance(spec_or_path, DecoderSpec) or str(exc).startswith(f"{spec_or_path}: ") else f"{spec_or_path}: "
        raise LayersearchError(f"{where}{exc}") from None
    return Decoding(spec, kernels, seed, tokenizer)


class Decoding:
    """transformers' decoding-method signature over a spec (made by :func:`decoding`).

    ``last_stats`` is the DecodeStats of the latest call (None before one)."""

    def __init__(self, spec: DecoderSpec, kernels: str = "auto", seed: int | None = None, tokenizer: Any = None) -> None:
        self.spec = spec
        self.kernels = kernels
        self.seed = seed
        self.tokenizer = tokenizer
        self.last_stats: Any = None

    def with_tokenizer(self, tokenizer: Any) -> "Decoding":
        """This decoding with ``tokenizer`` (the folder's ``generate`` gets one from its caller)."""
        return Decoding(self.spec, self.kernels, self.seed, tokenizer)

    # The parameters are those of transformers' own decoding methods (GenerationMixin._sample), so
    # generate passes the prepared ones; stop_strings is ours: transformers then hands it to us
    # instead of failing for want of the tokenizer it drops before calling a custom method.
    def __call__(self, model: Any, input_ids: Any, logits_processor: Any = None, stopping_criteria: Any = None,
                 generation_config: Any = None, synced_gpus: Any = None, streamer: Any = None,
                 stop_strings: Any = None, **model_kwargs: Any) -> Any:
        caller = caller_arguments()
        criterion = None if stop_strings is None else (lambda: self._stop_strings(stop_strings))
        try:
            check_model(model)  # before anything reads it
            request = read_request(model, input_ids, logits_processor, stopping_criteria, generation_config, model_kwargs,
                                   caller, streamer=streamer, synced_gpus=synced_gpus, stop_strings_criterion=criterion)
            built = self.built(model)  # the spec checked against the model: before any token
            if built.speculative is not None:  # the loop's caches are sized by it: the context must hold it
                from layersearch.models.context import check_fits

                check_fits(built.loaded, request.input_ids.shape[1], request.max_new_tokens, "the prompt", "max_new_tokens")
        except BaseException:
            _end(streamer if streamer is not None else caller.get("streamer"))  # generate has put the prompt
            raise
        if built.speculative is None:  # a plain spec: transformers' own decoding, every argument as generate gave it
            from transformers import StoppingCriteriaList

            criteria = StoppingCriteriaList([*(stopping_criteria or ()), *(request.stop_criteria[-1:] if stop_strings else ())])
            return type(model)._sample(model, input_ids, logits_processor, criteria, generation_config,
                                       synced_gpus=bool(synced_gpus), streamer=request.streamer, **model_kwargs)
        return self._run(built, request)

    def built(self, model: Any) -> Any:
        """The BuiltDecoder of this spec on ``model`` (made once per model, checked against it)."""
        from layersearch.decoder.build import build_decoder
        from layersearch.models.loading import LoadedModel, describe_model

        check_model(model)
        if self.spec.drafter.vocab and self.tokenizer is None:
            raise LayersearchError("the spec's drafter.vocab reduces the draft head with the tokenizer's frequencies: "
                                   "pass it as layersearch.decoding(spec, tokenizer=tokenizer)")
        key = (repr(self.spec.to_dict()), self.kernels, id(self.tokenizer) if self.spec.drafter.vocab else None)
        per_model = vars(model).setdefault(BUILT_ATTRIBUTE, BuiltDecoders())
        if key not in per_model:
            name = getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", "") or type(model).__name__
            loaded = LoadedModel(model, self.tokenizer, describe_model(model, name))
            per_model[key] = build_decoder(loaded, self.spec, kernels=self.kernels)
        return per_model[key]

    def _run(self, built: Any, request: GenerateRequest) -> Any:
        from layersearch.runtime.sampling import SamplingConfig

        ids = request.input_ids  # [1, n]
        sampling = SamplingConfig()
        if request.do_sample:
            seed = self.seed if self.seed is not None else int(torch.randint(0, 2**63 - 1, (1,)).item())
            sampling = SamplingConfig(request.temperature, request.top_p, seed, request.top_k)
        streamer = request.streamer
        on_tokens = None
        if streamer is not None:  # generate has put the prompt already
            on_tokens = lambda tokens: streamer.put(torch.tensor(tokens, dtype=torch.long))  # noqa: E731
        try:
            result = built.run(ids, request.max_new_tokens, sampling=sampling, on_tokens=on_tokens,
                               eos_token_ids=request.eos_token_ids, stop_when=_stop_when(ids, request.stop_criteria))
        finally:
            if streamer is not None:
                streamer.end()  # also on failure, so a consuming thread is never left waiting
        self.last_stats = result.stats
        new = torch.tensor([list(result.token_ids)], dtype=ids.dtype, device=ids.device)  # [1, new]
        sequences = cast(Any, torch.cat([ids, new], dim=1))  # [1, n + new] (a LongTensor to transformers' types)
        if request.return_dict:
            return LayersearchGenerateOutput(sequences=sequences, decode_stats=result.stats)
        return sequences

    def _stop_strings(self, stop_strings: Any) -> Any:
        from transformers.generation.stopping_criteria import StopStringCriteria

        if self.tokenizer is None:
            raise refuse("stop_strings without a tokenizer", "transformers hands a decoding method no tokenizer; "
                         "pass it as layersearch.decoding(spec, tokenizer=tokenizer)")
        strings = [stop_strings] if isinstance(stop_strings, str) else stop_strings
        if not isinstance(strings, (list, tuple)) or not strings or not all(isinstance(s, str) and s for s in strings):
            raise refuse(f"stop_strings={stop_strings!r}", "it must be a non-empty string or list of them")
        return StopStringCriteria(tokenizer=self.tokenizer, stop_strings=list(strings))

    def generate_from_folder(self, model: Any, *args: Any, **arguments: Any) -> Any:
        """What an exported ``custom_generate/generate.py`` runs: transformers calls it with all of
        ``generate``'s arguments; they go back to ``generate`` with this decoding as the method
        (the tokenizer, which generate would drop, kept for stop strings)."""
        from transformers.generation.utils import GenerationMixin

        tokenizer = arguments.pop("tokenizer", None)
        method = self if tokenizer is None else self.with_tokenizer(tokenizer)
        for name in ("assistant_tokenizer",):
            if arguments.get(name) is not None:
                raise refuse(name, "the spec's drafter drafts (there is no assistant)")
        result = GenerationMixin.generate(model, *args, custom_generate=method, **arguments)
        self.last_stats = method.last_stats
        return result


def _stop_when(prompt: Any, criteria: Sequence[Any]) -> Any:
    """The loop's stop rule for stop-string criteria (None without any): each asked, as generate
    asks it, with the whole sequence ``[1, n + new]`` after every new token."""
    if not criteria:
        return None
    head = prompt[0].cpu().tolist()

    def stop(tokens: Sequence[int]) -> bool:
        sequence = torch.tensor([head + list(tokens)], dtype=torch.long)  # [1, n + new]
        return any(bool(criterion(sequence, None).any()) for criterion in criteria)

    return stop


def folder_decoding(spec_data: Any) -> Decoding:
    """The decoding of an exported folder's embedded spec (a spec file's JSON object), made once."""
    import json

    key = json.dumps(spec_data, sort_keys=True)
    if key not in _FOLDERS:
        _FOLDERS[key] = Decoding(DecoderSpec.from_dict(spec_data))
    return _FOLDERS[key]


def _end(streamer: Any) -> None:
    """End a streamer of a refused call, so a thread reading it (TextIteratorStreamer) is not left waiting."""
    if streamer is not None and callable(getattr(streamer, "end", None)):
        streamer.end()
