"""``--kernels`` on generate / profile: the profile records what it timed and chose, ``auto``
follows it, ``stock`` turns the kernels off, and bad values are one error line."""

from __future__ import annotations

import json

import pytest

from layersearch.cli import main


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def folder(tiny_with_embedded_tokenizer):
    return tiny_with_embedded_tokenizer(0)[2]


def generated(capsys, folder, *argv):
    code, stdout, err = run_cli(capsys, "generate", "--model", folder, "--prompt", "def add(a, b):",
                                "--max-new-tokens", 16, "--threads", 1, "--json", *argv)
    assert code == 0, err
    return json.loads(stdout)


def test_speculative_equals_our_plain_loop_under_either_kernels(folder, capsys):
    for kernels in ("numba", "stock"):
        plain = generated(capsys, folder, "--mask", "uniform:0", "--kernels", kernels)
        assert plain["stats"]["kernels"] == kernels
        for extra in (("--lookahead", "static", "--max-draft", 8), ("--lookahead", "static", "--max-draft", 16)):
            result = generated(capsys, folder, "--mask", "uniform:0.25", "--kernels", kernels, *extra)
            assert result["token_ids"] == plain["token_ids"], (kernels, extra)
            assert result["stats"]["drafted"] > 0


def test_auto_follows_the_profile_and_stock_overrides_it(folder, tmp_path, capsys):
    assert generated(capsys, folder, "--baseline")["stats"]["kernels"] == "stock"  # auto, no profile
    out = tmp_path / "profile.json"
    code, stdout, err = run_cli(capsys, "profile", "--model", folder, "--threads", 1, "--contexts", "8,16",
                                "--repeats", 1, "--kernels", "auto", "--out", out)
    assert code == 0, err
    data = json.loads(out.read_text())
    assert [t["kernels"] for t in data["kernel_timings"]] == ["stock", "numba"]
    assert data["kernels"] in ("stock", "numba") and "kernels" in err  # the choice is reported
    data["kernels"] = "numba"  # whatever this noisy machine measured: auto must follow the file
    out.write_text(json.dumps(data))
    assert generated(capsys, folder, "--mask", "uniform:0.25", "--profile", out)["stats"]["kernels"] == "numba"
    assert generated(capsys, folder, "--mask", "uniform:0.25", "--profile", out, "--kernels", "stock")["stats"]["kernels"] == "stock"


def test_bad_kernels_are_one_error_line(folder, tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:  # argparse's choices, in the CLI's one-line format
        run_cli(capsys, "generate", "--model", folder, "--prompt", "x", "--kernels", "turbo")
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.startswith("layersearch: error:") and "--kernels" in err
    profile = tmp_path / "p.json"
    code, _, err = run_cli(capsys, "profile", "--model", folder, "--threads", 1, "--contexts", "8",
                           "--repeats", 1, "--kernels", "stock", "--out", profile)
    assert code == 0, err
    data = json.loads(profile.read_text())
    assert data["kernels"] == "stock" and [t["kernels"] for t in data["kernel_timings"]] == ["stock"]
    for bad, message in (("turbo", "unknown kernels"), (7, "kernels")):
        data["kernels"] = bad
        profile.write_text(json.dumps(data))
        code, _, err = run_cli(capsys, "generate", "--model", folder, "--prompt", "x", "--profile", profile)
        assert code == 2 and err.startswith("layersearch: error:") and message in err, err
        assert len(err.strip().splitlines()) == 1
