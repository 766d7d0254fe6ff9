"""The command line's words for the errors of the layers below it.

Below :mod:`layersearch.commands` an error names the API argument or spec field at fault
(``max_draft``, ``drafter.quant``, ``mask_source``) and lists those names in its ``fields``
(:class:`~layersearch.common.errors.LayersearchError`); the CLI shows each as the option of the
running command that sets it (``--max-draft``, ``--draft-quant``, ``--mask``). A name the
command has no option for stays as it is. This module must stay light (no torch, no Optuna).
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Mapping

#: API arguments and spec fields -> the option (its ``dest``) that sets them, where the two differ.
FIELD_OPTIONS = {
    "plain": "baseline",
    "model.device": "device",
    "model.dtype": "dtype",
    "drafter.name": "drafter",
    "drafter.model": "draft_model",
    "drafter.quant": "draft_quant",
    "drafter.vocab": "draft_vocab",
    "mask_source": "mask",
    "mask_source.reselect_every": "reselect_every",
    "lookahead.max_draft": "max_draft",
    "lookahead.threshold": "draft_threshold",
    "draft_threshold": "draft_threshold",
    "lookahead.name": "lookahead",
    "sampling.temperature": "temperature",
    "sampling.top_p": "top_p",
    "sampling.top_k": "top_k",
    "sampling.seed": "seed",
}


def option_words(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """``dest`` -> how the command line spells it (``max_draft`` -> ``--max-draft``, a positional
    -> its metavar), for the options of the command ``args`` ran (its subcommands followed)."""
    words: dict[str, str] = {}
    chosen: argparse.ArgumentParser | None = parser
    while chosen is not None:
        following = None
        for action in chosen._actions:
            if isinstance(action, argparse._SubParsersAction):
                following = action.choices.get(getattr(args, action.dest, None) or "")
            elif action.option_strings:
                own = "--" + action.dest.replace("_", "-")
                words[action.dest] = own if own in action.option_strings else max(action.option_strings, key=len)
            elif action.dest != argparse.SUPPRESS:
                words[action.dest] = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
        chosen = following
    return words


def option_of(name: str, words: Mapping[str, str]) -> str | None:
    """The option spelling of one argument or field name, or None where the command has none."""
    return words.get(FIELD_OPTIONS.get(name, name)) or words.get(name)


def cli_message(exc: Any, words: Mapping[str, str]) -> str:
    """``exc``'s message with each of its ``fields`` worded as the command's option."""
    text = str(exc)
    for name in getattr(exc, "fields", ()):
        option = option_of(name, words)
        if option is not None:
            text = re.sub(rf"(?<![\w.\-/]){re.escape(name)}(?![\w\-]|\.\w)", lambda _: option, text)
    return text
