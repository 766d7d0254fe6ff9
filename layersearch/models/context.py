"""The one check that a prompt and the tokens asked after it fit the model's context.

Every command and the Python API call :func:`check_fits` (or :func:`check_context`) right
after the model loads and before any long work: a decode past ``max_position_embeddings``
runs for minutes (or grows the KV cache without bound) and then fails or produces garbage.
"""

from __future__ import annotations

from typing import Any, Iterable

from layersearch.common.errors import LayersearchError


def context_limit(loaded: Any) -> int | None:
    """The model's context length (``max_position_embeddings``), None when it states none."""
    limit = getattr(getattr(loaded.model, "config", None), "max_position_embeddings", None)
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None


def check_context(loaded: Any, tokens: int, what: str, fields: tuple[str, ...] = ()) -> None:
    """Raise when ``tokens`` positions do not fit the model's context length (``what`` names them;
    ``fields``: the arguments it names, for the error's fields)."""
    limit = context_limit(loaded)
    if limit is not None and tokens > limit:
        raise LayersearchError(f"{what} needs {tokens} positions but model {loaded.info.name!r} has a context length of {limit}",
                               fields=fields)


def check_fits(loaded: Any, prompt_tokens: int, new_tokens: int, where: str, option: str = "max_new_tokens") -> None:
    """Raise when a prompt of ``prompt_tokens`` tokens (``where``: which prompt) plus
    ``new_tokens`` new ones (``option``: where that number comes from) overflow the context."""
    check_context(loaded, prompt_tokens + new_tokens, f"{where} ({prompt_tokens} tokens) + {option} {new_tokens}", (option,))


def check_all_fit(loaded: Any, lengths: Iterable[tuple[str, int]], new_tokens: int, option: str = "max_new_tokens") -> None:
    """:func:`check_fits` for every ``(where, prompt_tokens)``: first ``new_tokens`` alone (after
    a one-token prompt, so a runaway ``option`` is named as such), then each prompt."""
    check_context(loaded, 1 + new_tokens, f"{option} {new_tokens} (after a prompt of at least one token)", (option,))
    for where, tokens in lengths:
        check_fits(loaded, tokens, new_tokens, where, option)


def fewest_tokens(tokenizer: Any, text: str) -> int:
    """A certain lower bound on how many tokens ``text`` encodes to, found without encoding it:
    its UTF-8 bytes over the most bytes one token covers. That is certain for a byte-level
    tokenizer without a normalizer (GPT-2-style BPE: SmolLM2, Qwen2, Llama 3), whose every token,
    added ones included, covers a known number of bytes; elsewhere (a normalizer may delete
    characters) there is no such bound and this is 0."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or backend.normalizer is not None or "ByteLevel" not in repr(backend.pre_tokenizer):
        return 0
    per_token = _bytes_per_token(tokenizer)
    return -(-len(text.encode("utf-8", "surrogatepass")) // per_token) if per_token else 0


_BYTES_PER_TOKEN: dict[int, int] = {}


def _bytes_per_token(tokenizer: Any) -> int:
    """The most bytes one token of a byte-level ``tokenizer`` covers (a byte is one character of
    its vocabulary; an added token counts its UTF-8 bytes); computed once per tokenizer."""
    key = id(tokenizer)
    if key not in _BYTES_PER_TOKEN:
        longest = max((len(token) for token in tokenizer.get_vocab()), default=0)
        added = max((len(token.encode("utf-8", "surrogatepass")) for token in tokenizer.get_added_vocab()), default=0)
        _BYTES_PER_TOKEN[key] = max(longest, added)
    return _BYTES_PER_TOKEN[key]


def check_text_fits(loaded: Any, text: str, new_tokens: int, where: str, option: str = "max_new_tokens") -> None:
    """Refuse a prompt text that certainly overflows the context with ``new_tokens`` more, before
    it is tokenized (a 10 MB prompt would take half a minute to tokenize only to be refused)."""
    fewest = fewest_tokens(loaded.tokenizer, text)
    limit = context_limit(loaded)
    if fewest and limit is not None and fewest + new_tokens > limit:
        check_context(loaded, fewest + new_tokens, f"{where} (at least {fewest} tokens) + {option} {new_tokens}", (option,))
