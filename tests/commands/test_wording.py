"""The command line words the errors of the layers below it as its own options."""

from __future__ import annotations

import pytest

from layersearch.cli import build_parser, main
from layersearch.commands.common import check_shared_options
from layersearch.commands.wording import cli_message, option_words
from layersearch.common.errors import LayersearchError


def test_shared_options_are_checked_by_name_from_any_mapping():
    check_shared_options({"seed": 3, "max_draft": 8, "draft_threshold": 0.5, "lr": 1e-3, "threads": 1, "ratio": 2.5})
    for options, name in (({"prompt_seed": -1}, "prompt_seed"), ({"max_draft": 0}, "max_draft"),
                          ({"skip_ratio": 1.5}, "skip_ratio"), ({"drafter_lr": 2.0}, "drafter_lr"),
                          ({"budget": float("nan")}, "budget"), ({"file": "a\udcffb"}, "file")):
        with pytest.raises(LayersearchError, match=f"^{name} ") as raised:
            check_shared_options(options)
        assert raised.value.fields == (name,)


def words_of(*argv: str) -> dict[str, str]:
    parser = build_parser()
    return option_words(parser, parser.parse_args(list(argv)))


def test_fields_are_worded_as_the_running_commands_options():
    words = words_of("generate", "--prompt", "x")
    exc = LayersearchError("drafter.quant int8 quantizes a draft; plain decoding runs none (plain=True)",
                           fields=("drafter.quant", "plain"))
    assert cli_message(exc, words) == "--draft-quant int8 quantizes a draft; --baseline decoding runs none (--baseline=True)"
    assert cli_message(LayersearchError("max_draft must be >= 1", fields="max_draft"), words) == "--max-draft must be >= 1"


def test_names_inside_other_words_and_names_without_an_option_stay():
    words = words_of("generate", "--prompt", "x")
    exc = LayersearchError("max_draft_tokens and lookahead.max_draft.x and spec.max_draft and bogus", fields=("max_draft", "bogus"))
    assert cli_message(exc, words) == str(exc)
    assert cli_message(LayersearchError("seed is bad"), words) == "seed is bad"  # no fields: nothing worded


def test_subcommands_and_positionals_are_followed():
    words = words_of("study", "run", "--name", "n")
    assert words["trials"] == "--trials" and words["name"] == "--name"
    assert words_of("mask", "show", "m.json")["file"] == "FILE"


def test_an_error_from_below_names_the_option(capsys):
    assert main(["generate", "--prompt", "x", "--max-draft", "0"]) == 2
    assert "layersearch: error: --max-draft must be an integer" in capsys.readouterr().err
