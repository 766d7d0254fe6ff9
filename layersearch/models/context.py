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
