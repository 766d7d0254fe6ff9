"""What transformers' ``generate`` hands a decoding method, read into one :class:`GenerateRequest`.

``generate(..., custom_generate=CALLABLE)`` prepares the inputs, the generation config, the logits
processors and the stopping criteria, then calls ``CALLABLE(model, input_ids, logits_processor=...,
stopping_criteria=..., generation_config=..., **model_kwargs)``. Every argument that changes the
tokens is either honoured here or refused with one LayersearchError naming it; nothing falls back
to a default silently.

transformers (5.x) passes a callable neither the ``streamer`` nor the ``assistant_model``, the
``synced_gpus`` flag or the user's own processor lists: they stay in ``generate``'s frame, which
is the callable's caller, so :func:`caller_arguments` reads them there. Without that a streamer
would get the prompt (``generate`` puts it before calling) and then wait forever for an ``end()``.
Where something else stands between ``generate`` and the method (a wrapper passed as
``custom_generate``), those arguments cannot be read: that is one LayersearchError naming them,
never a silent loss.

Sampling is the call's, as for plain ``generate``: ``do_sample``, ``temperature``, ``top_k`` and
``top_p`` come from the generation config (through the warpers it makes); a spec's ``sampling``
is not read here.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from layersearch.common.errors import LayersearchError

__all__ = ["GenerateRequest", "caller_arguments", "read_request"]

#: generate's own arguments kept in its frame (see the module docstring).
CALLER_NAMES = ("streamer", "assistant_model", "synced_gpus", "logits_processor", "stopping_criteria",
                "negative_prompt_ids", "negative_prompt_attention_mask", "prefix_allowed_tokens_fn")
#: Those that reach a decoding method only through generate's frame (the others come in its
#: prepared logits processors and stopping criteria): lost where that frame cannot be read.
FRAME_ONLY = ("streamer", "assistant_model", "synced_gpus", "logits_processor")

#: Generation-config fields that change decoding without a logits processor, and their neutral values.
REFUSED_FIELDS: dict[str, tuple[Any, ...]] = {
    "num_beams": (None, 1), "num_return_sequences": (None, 1), "num_beam_groups": (None, 1),
    "diversity_penalty": (None, 0.0), "constraints": (None,), "force_words_ids": (None,),
    "penalty_alpha": (None,), "dola_layers": (None,), "use_mtp": (None, False),
    "prompt_lookup_num_tokens": (None,), "assistant_early_exit": (None,), "max_time": (None,),
    "output_scores": (None, False), "output_logits": (None, False),
    "output_attentions": (None, False), "output_hidden_states": (None, False),
}
#: Why each refused field cannot be honoured (the end of its error line).
WHY = {
    "num_beams": "layersearch decodes one sequence (beam search is not speculative decoding's)",
    "num_return_sequences": "layersearch decodes one sequence per call",
    "num_beam_groups": "layersearch decodes one sequence (no beam groups)",
    "diversity_penalty": "it belongs to group beam search",
    "constraints": "constrained beam search is not speculative decoding's",
    "force_words_ids": "constrained beam search is not speculative decoding's",
    "penalty_alpha": "contrastive search is another decoding method",
    "dola_layers": "DoLa is another decoding method",
    "use_mtp": "multi-token prediction heads are another drafter",
    "prompt_lookup_num_tokens": "transformers' prompt lookup is another drafter (a spec's drafter can be prompt_lookup)",
    "assistant_early_exit": "transformers' early-exit assistant is another drafter",
    "max_time": "a time limit would end generation at a different token on each machine",
    "output_scores": "the loop keeps no per-token scores",
    "output_logits": "the loop keeps no per-token logits",
    "output_attentions": "the loop keeps no attentions",
    "output_hidden_states": "the loop keeps no hidden states",
}
#: The generation argument behind each logits processor transformers builds.
PROCESSOR_ARGUMENTS = {
    "MinLengthLogitsProcessor": "min_length", "MinNewTokensLengthLogitsProcessor": "min_new_tokens",
    "RepetitionPenaltyLogitsProcessor": "repetition_penalty",
    "EncoderRepetitionPenaltyLogitsProcessor": "encoder_repetition_penalty",
    "TopHLogitsWarper": "top_h", "MinPLogitsWarper": "min_p", "TypicalLogitsWarper": "typical_p",
    "EpsilonLogitsWarper": "epsilon_cutoff", "EtaLogitsWarper": "eta_cutoff",
    "NoRepeatNGramLogitsProcessor": "no_repeat_ngram_size", "EncoderNoRepeatNGramLogitsProcessor": "encoder_no_repeat_ngram_size",
    "SequenceBiasLogitsProcessor": "sequence_bias", "NoBadWordsLogitsProcessor": "bad_words_ids",
    "PrefixConstrainedLogitsProcessor": "prefix_allowed_tokens_fn", "ForcedBOSTokenLogitsProcessor": "forced_bos_token_id",
    "ForcedEOSTokenLogitsProcessor": "forced_eos_token_id", "InfNanRemoveLogitsProcessor": "remove_invalid_values",
    "SuppressTokensAtBeginLogitsProcessor": "begin_suppress_tokens", "SuppressTokensLogitsProcessor": "suppress_tokens",
    "UnbatchedClassifierFreeGuidanceLogitsProcessor": "guidance_scale", "ClassifierFreeGuidanceLogitsProcessor": "guidance_scale",
    "WatermarkLogitsProcessor": "watermarking_config", "SynthIDTextWatermarkLogitsProcessor": "watermarking_config",
    "ExponentialDecayLengthPenalty": "exponential_decay_length_penalty",
}
#: Processors the sampler applies itself (temperature, top-k, top-p) or that change no choice (renormalizing).
WARPERS = ("TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper")
HARMLESS = ("LogitNormalization",)
#: Model inputs a decoder-only prompt comes with; anything else (images, an encoder's output) is refused.
PROMPT_INPUTS = ("attention_mask", "position_ids", "logits_to_keep", "cache", "past_key_values", "use_cache", "cache_position")


@dataclass(frozen=True)
class GenerateRequest:
    """One ``generate`` call as the decode loop runs it: prompt ``[1, n]``, how many new tokens,
    the end-of-sequence ids, the sampling law (temperature 0: greedy), the stop-string criteria
    to ask after each token, the streamer, and whether a ``GenerateDecoderOnlyOutput`` is wanted."""

    input_ids: Any  # [1, n] long, on the caller's device
    max_new_tokens: int
    eos_token_ids: frozenset[int]
    do_sample: bool
    temperature: float
    top_k: int
    top_p: float
    stop_criteria: tuple[Any, ...]  # StopStringCriteria: asked with [1, n + new] after each new token
    streamer: Any
    return_dict: bool


def caller_arguments() -> dict[str, Any]:
    """``generate``'s own arguments (:data:`CALLER_NAMES`) when the function calling our decoding
    method is transformers' ``generate``; empty when no ``generate`` is running (a direct call
    passes everything itself). A ``generate`` further up, with a :data:`FRAME_ONLY` argument
    set, is one LayersearchError naming them (its streamer ended first: it has the prompt)."""
    frame: Any = sys._getframe(2)  # 0: here, 1: the decoding method, 2: its caller
    try:
        if _is_generate(frame):
            return {name: frame.f_locals.get(name) for name in CALLER_NAMES}
        caller = f"{frame.f_globals.get('__name__', '?')}.{frame.f_code.co_qualname}"
        while frame is not None and not _is_generate(frame):
            frame = frame.f_back
        if frame is None:
            return {}
        lost = {name: frame.f_locals.get(name) for name in FRAME_ONLY}
        # generate has made an empty LogitsProcessorList of a logits_processor left out
        lost = {name: value for name, value in lost.items()
                if value is not None and value is not False and not (isinstance(value, (list, tuple)) and not value)}
    finally:
        del frame  # no reference cycle through the frame
    if not lost:
        return {}  # nothing generate holds for us: nothing lost
    streamer: Any = lost.get("streamer")
    if callable(getattr(streamer, "end", None)):
        streamer.end()  # generate has put the prompt: a reading thread is not left waiting
    raise LayersearchError(f"the decoding method was called by {caller}, not by transformers' generate, so generate's "
                           f"{', '.join(lost)} cannot reach it (transformers keeps those in generate's own call): "
                           "pass layersearch.decoding(...) itself as custom_generate", fields=tuple(lost))


def _is_generate(frame: Any) -> bool:
    """Whether ``frame`` runs transformers' ``generate`` (GenerationMixin's, in transformers.generation)."""
    module = frame.f_globals.get("__name__") or ""
    return frame.f_code.co_name == "generate" and module.startswith("transformers.generation.")


def refuse(argument: str, why: str) -> LayersearchError:
    """The one error line of an argument layersearch's decoding cannot honour."""
    return LayersearchError(f"generate argument {argument} is not supported by layersearch decoding: {why} "
                            f"(leave it out, or leave out custom_generate for transformers' own decoding)")


def read_request(
    model: Any, input_ids: Any, logits_processor: Any, stopping_criteria: Any, generation_config: Any,
    model_kwargs: dict[str, Any], caller: dict[str, Any], *, streamer: Any = None, synced_gpus: Any = None,
    stop_strings_criterion: Callable[[], Any] | None = None,
) -> GenerateRequest:
    """The :class:`GenerateRequest` of a ``generate`` call, or the LayersearchError of its first
    argument layersearch cannot honour (checked in the order a user reads them)."""
    from layersearch.decoder.api import check_streamer

    config = _generation_config(model, generation_config)
    if getattr(model.config, "is_encoder_decoder", False):
        raise refuse(f"an encoder-decoder model ({type(model).__name__})", "layersearch decodes causal language models")
    streamer = streamer if streamer is not None else caller.get("streamer")
    check_streamer(streamer)
    for name, given, words in (("logits_processor", logits_processor, "logits processors (a LogitsProcessorList)"),
                               ("stopping_criteria", stopping_criteria, "stopping criteria (a StoppingCriteriaList)")):
        if given is not None and not isinstance(given, (list, tuple)):
            raise LayersearchError(f"{name} must be a list of {words}, got {type(given).__name__}")
    if caller.get("assistant_model") is not None:
        raise refuse("assistant_model", "the spec's drafter drafts (an assistant model would be a second one)")
    if synced_gpus or caller.get("synced_gpus"):
        raise refuse("synced_gpus", "layersearch decodes on one device")
    for name, neutral in REFUSED_FIELDS.items():
        value = getattr(config, name, None)
        if value not in neutral:
            raise refuse(f"{name}={value!r}", WHY[name])
    _check_prompt_inputs(model_kwargs)
    _check_input_ids(model, input_ids)
    user_processors = list(caller.get("logits_processor") or ())
    temperature, top_k, top_p = _warps(logits_processor or (), user_processors, config)
    max_length, eos, stop = _stops(config, stopping_criteria or (), input_ids.shape[1])
    if stop_strings_criterion is not None:
        stop = (*stop, stop_strings_criterion())
    max_new = max_length - input_ids.shape[1]
    if max_new < 1:
        raise refuse(f"max_length={max_length}", f"the prompt already has {input_ids.shape[1]} tokens "
                     "(give max_new_tokens instead)")
    do_sample = bool(config.do_sample)
    if not do_sample:
        temperature, top_k, top_p = 0.0, 0, 1.0
    return GenerateRequest(input_ids, max_new, eos, do_sample, temperature, top_k, top_p, stop, streamer,
                           bool(config.return_dict_in_generate))


def check_model(model: Any) -> None:
    """``model`` must be a transformers model (a config and a forward): checked before anything reads it."""
    if not (hasattr(model, "config") and callable(getattr(model, "forward", None))):
        raise LayersearchError(f"custom_generate needs a transformers model, got {type(model).__name__}")


def _generation_config(model: Any, given: Any) -> Any:
    """The call's GenerationConfig: the one given, else the model's own."""
    from transformers import GenerationConfig

    config = given if given is not None else getattr(model, "generation_config", None)
    if not isinstance(config, GenerationConfig):
        where = "generation_config" if given is not None else "the model's generation_config"
        raise LayersearchError(f"{where} must be a transformers GenerationConfig, got {type(config).__name__}")
    return config


def _check_input_ids(model: Any, input_ids: Any) -> None:
    """The prompt: one row of integer token ids ``[1, n]``, n >= 1, each inside the model's vocabulary."""
    import torch

    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise refuse("inputs", f"layersearch decodes token ids [1, n], got {type(input_ids).__name__}")
    if input_ids.dtype == torch.bool or input_ids.dtype.is_floating_point or input_ids.dtype.is_complex:
        raise LayersearchError(f"inputs must be integer token ids, got dtype {str(input_ids.dtype).removeprefix('torch.')}")
    if input_ids.shape[0] != 1:
        raise refuse(f"a batch of {input_ids.shape[0]} prompts", "layersearch decodes one prompt per call "
                     "(as transformers' assisted generation does)")
    if input_ids.shape[1] == 0:
        raise refuse("inputs", "the prompt is empty (layersearch needs at least one token)")
    embeddings = model.get_input_embeddings() if callable(getattr(model, "get_input_embeddings", None)) else None
    weight = getattr(embeddings, "weight", None)
    if isinstance(weight, torch.Tensor):  # an id past it would fail inside the embedding lookup
        rows = weight.shape[0]
        outside = ((input_ids < 0) | (input_ids >= rows)).nonzero()  # [k, 2]
        if len(outside):
            position = int(outside[0, 1])
            raise LayersearchError(f"inputs: token id {int(input_ids[0, position])} (position {position}) is outside the "
                                   f"model's vocabulary (ids 0..{rows - 1})")


def _check_prompt_inputs(model_kwargs: dict[str, Any]) -> None:
    """Only a prompt's own inputs: no padding, no cache filled already, no other modality."""
    for name, value in model_kwargs.items():
        if name not in PROMPT_INPUTS:
            raise refuse(name, "layersearch decodes text token ids alone")
    import torch

    mask = model_kwargs.get("attention_mask")
    if mask is not None and not isinstance(mask, torch.Tensor):
        raise LayersearchError(f"attention_mask must be a tensor, got {type(mask).__name__}")
    if mask is not None and not bool((mask == 1).all()):
        raise refuse("attention_mask with padding", "layersearch decodes one unpadded prompt")
    for name in ("cache", "past_key_values"):
        cache = model_kwargs.get(name)
        if cache is not None and callable(getattr(cache, "get_seq_length", None)) and cache.get_seq_length() > 0:
            raise refuse(f"{name} (filled)", "layersearch fills its own cache from the prompt")


def _warps(processors: Sequence[Any], user: list[Any], config: Any) -> tuple[float, int, float]:
    """Temperature, top-k and top-p of the prepared processors (1.0, 0, 1.0 where absent); any
    other processor, and every one the user passed, refused by its argument's name."""
    temperature, top_k, top_p = 1.0, 0, 1.0
    for processor in processors:
        name = type(processor).__name__
        if any(processor is mine for mine in user):
            raise refuse(f"logits_processor ({name})", "the loop applies only temperature, top_k and top_p")
        if name == "TemperatureLogitsWarper":
            temperature = float(processor.temperature)
        elif name == "TopKLogitsWarper":
            top_k = int(processor.top_k)
        elif name == "TopPLogitsWarper":
            if int(getattr(processor, "min_tokens_to_keep", 1)) != 1:
                raise refuse("min_tokens_to_keep", "the loop's top-p keeps at least one token")
            top_p = float(processor.top_p)
        elif name not in HARMLESS:
            argument = PROCESSOR_ARGUMENTS.get(name)
            if argument == "min_length" and getattr(config, "min_new_tokens", None):  # both make this processor
                argument = "min_new_tokens"
            raise refuse(argument if argument else f"logits_processor ({name})",
                         "the loop applies only temperature, top_k and top_p")
    return temperature, top_k, top_p


def _stops(config: Any, criteria: Sequence[Any], prompt: int) -> tuple[int, frozenset[int], tuple[Any, ...]]:
    """The length limit, end-of-sequence ids and stop-string criteria of the prepared criteria (a
    user's own MaxLength / EosToken / StopString criteria honoured as the config's). ``generate``
    sets the config's max_length; a direct call may give max_new_tokens instead (``prompt``: its length)."""
    max_length = config.max_length
    if max_length is None and config.max_new_tokens is not None:
        max_length = prompt + config.max_new_tokens
    if max_length is None:
        raise LayersearchError("generation_config sets neither max_length nor max_new_tokens: give one "
                               "(model.generate sets them from its arguments)")
    eos: set[int] = set()
    stop: list[Any] = []
    for criterion in criteria:
        name = type(criterion).__name__
        if name == "MaxLengthCriteria":
            max_length = min(max_length, int(criterion.max_length))
        elif name == "EosTokenCriteria":
            eos |= {int(t) for t in criterion.eos_token_id.reshape(-1).tolist()}
        elif name == "StopStringCriteria":
            stop.append(criterion)
        elif name == "MaxTimeCriteria":
            raise refuse("max_time", WHY["max_time"])
        elif name == "ConfidenceCriteria":
            raise refuse("assistant_confidence_threshold", "it belongs to assisted generation")
        else:
            raise refuse(f"stopping_criteria ({name})", "the loop stops at max_length, eos_token_id and stop_strings only")
    return int(max_length), frozenset(eos), tuple(stop)
