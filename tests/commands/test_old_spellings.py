"""Spellings layersearch no longer takes (no compatibility layer in a 0.x package).
Each one, as a script may still have it, is exactly one error line naming its replacement,
exit status 2, before any work: the parse itself stops (the model never loads)."""

from __future__ import annotations

import pytest

from layersearch.cli import main

#: (argv, the one line it gets): every removed command and option.
OLD_SPELLINGS = [
    (["knapspec-bench", "--contexts", "16"], "`knapspec-bench` is now `layersearch knapspec bench`"),
    (["swift-stream", "--help"], "`swift-stream` is now `layersearch swift stream`"),
    (["generate", "--prompt", "x", "--skip-ratio", "0.2"],
     "generate: --skip-ratio 0.2 is now --mask uniform:0.2 (SWIFT's skip ratio: --mask swift:0.2)"),
    (["generate", "--prompt", "x", "--dynamic", "knapsack"], "generate: --dynamic knapsack is now --mask knapsack"),
    (["generate", "--prompt", "x", "--router", "r.json"], "generate: --router r.json is now --mask router:r.json"),
    (["generate", "--prompt", "x", "--on-the-fly", "swift"],
     "generate: --on-the-fly swift is now --mask swift (with a skip ratio: --mask swift:R)"),
    (["generate", "--prompt", "x", "--verification", "tree"], "generate: --verification tree is now --verifier tree"),
    (["generate", "--prompt", "x", "--verification"], "generate: --verification NAME is now --verifier NAME"),
    (["generate", "--prompt", "x", "--adaptive-threshold"], "generate: --adaptive-threshold is now --lookahead adaptive"),
    (["bench", "--no-peers"], 'bench: --no-peers is now --peers ""'),
    (["bench", "--adaptive-threshold"], "bench: --adaptive-threshold is now --lookaheads adaptive"),
    (["steer", "eval", "--steering", "s.safetensors", "--domain", "code", "--draft-length", "4"],
     "steer eval: --draft-length 4 is now --max-draft 4"),
    (["transfer", "--mask", "code=m.json", "--adaptive-threshold"],
     "transfer: --adaptive-threshold was removed: transfer measures each mask with the confidence rule "
     "(--max-draft, --draft-threshold); it never read this flag"),
]


@pytest.mark.parametrize("argv, line", OLD_SPELLINGS, ids=[" ".join(argv) for argv, _ in OLD_SPELLINGS])
def test_an_old_spelling_is_one_line_naming_the_new_one(argv, line, capsys):
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        status = exc.code
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    assert captured.err.splitlines() == [f"layersearch: error: {line}"]


def test_the_new_spellings_parse():
    """Each replacement the lines name is a spelling the parser takes."""
    from layersearch.cli import build_parser

    parser = build_parser()
    generate = parser.parse_args(["generate", "--prompt", "x", "--mask", "uniform:0.2", "--verifier", "tree",
                                  "--lookahead", "adaptive"])
    assert (generate.mask, generate.verifier, generate.lookahead) == ("uniform:0.2", "tree", "adaptive")
    bench = parser.parse_args(["bench", "--peers", "", "--lookaheads", "adaptive"])
    assert (bench.peers, bench.lookaheads) == ("", "adaptive")
    assert parser.parse_args(["knapspec", "bench"]).action == "bench"
    assert parser.parse_args(["swift", "stream"]).action == "stream"
