"""Issue 16 item 14: defaults give a useful search, and a search that sees no signal says so."""

from __future__ import annotations

from layersearch.study import StudySettings


def test_random_studies_skip_a_fifth_by_default_not_half():
    settings = StudySettings(model="m", domain="translation", strategy="random", objective="matchness").validated()
    assert settings.skip_ratio == 0.2
    chosen = StudySettings(model="m", domain="translation", strategy="random", objective="matchness", skip_ratio=0.4)
    assert chosen.validated().skip_ratio == 0.4


def test_a_run_whose_trials_all_score_the_same_says_what_to_change(workdir, cli, create_args):
    # Skipping every sub-layer: every trial measures the same mask, so every score is equal.
    assert cli(*create_args("flat", "random", "matchness", "--skip-ratio", "1"))[0] == 0
    status, out, err = cli("study", "run", "--name", "flat", "--trials", "5", "--quiet")
    assert status == 0, err
    assert "all 5 completed trials scored" in out and "lower the skip ratio (now 1; try 0.5)" in out


def test_a_run_with_signal_gives_no_advice(workdir, cli, create_args):
    assert cli(*create_args("varied", "random", "matchness", "--skip-ratio", "0.5"))[0] == 0
    status, out, _ = cli("study", "run", "--name", "varied", "--trials", "5", "--quiet")
    assert status == 0 and "no signal" not in out
