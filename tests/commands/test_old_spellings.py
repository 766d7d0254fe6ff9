"""Commands of one shape (``layersearch <method> <action>``); the old hyphenated spellings keep
their options and end with a one-line note."""

from __future__ import annotations

import pytest

from layersearch.cli import build_parser, main

OLD_AND_NEW = [(["knapspec-bench"], ["knapspec", "bench"]), (["swift-stream"], ["swift", "stream"])]


@pytest.mark.parametrize("old, new", OLD_AND_NEW)
def test_old_spelling_parses_to_the_same_options(old, new):
    parser = build_parser()
    old_args, new_args = vars(parser.parse_args(old)), vars(parser.parse_args(new))
    for key in ("command", "action"):
        old_args.pop(key, None), new_args.pop(key, None)
    assert old_args == new_args


@pytest.mark.parametrize("old, new", OLD_AND_NEW)
def test_old_spelling_runs_the_new_command_then_notes_it(old, new, monkeypatch, capsys):
    import importlib

    module = importlib.import_module(f"layersearch.commands.{new[0]}")
    seen = []
    monkeypatch.setattr(module, new[1], lambda args: seen.append(args.max_new_tokens) or 0)
    assert main([*old, "--max-new-tokens", "3"]) == 0
    assert main([*new, "--max-new-tokens", "4"]) == 0
    assert seen == [3, 4]  # both spellings reach the same action with their options
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"layersearch: note: `{old[0]}` is the old spelling of `layersearch {' '.join(new)}`"]


def test_bad_input_under_an_old_spelling_is_still_one_error_line(capsys):
    assert main(["knapspec-bench", "--contexts", "4"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["layersearch: error: --contexts must be token counts >= 8"]
