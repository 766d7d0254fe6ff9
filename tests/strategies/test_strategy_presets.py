"""Strategy options and ``--preset paper``: Self-SD's published search (UCB, probes only,
Matern 2.5) and SWIFT's settings, from the CLI arguments to the rebuilt sampler and stop rule."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from layersearch.commands.study_common import search_args, strategy_option_args
from layersearch.commands.study_options import settings_from_options
from layersearch.commands.args import model_args
from layersearch.common.errors import LayersearchError
from layersearch.strategies import check_options, make_sampler, stop_rule
from layersearch.swift import proposals as _gp
from layersearch.strategies import selfsd_bo
from layersearch.study.rebuild import strategy_plan


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    model_args(parser)
    parser.add_argument("--domain", default="translation")
    parser.add_argument("--strategy", required=True)
    parser.add_argument("--objective")
    search_args(parser)
    strategy_option_args(parser)
    return parser.parse_args(list(argv))


def test_selfsd_paper_preset_is_selfsds_code():
    settings = settings_from_options(parse("--strategy", "selfsd-bo", "--preset", "paper")).validated()
    assert settings.objective == "time-per-token" and settings.samples == 8 and settings.max_new_tokens == 32
    assert settings.strategy_options == {"acquisition": "ucb", "kappa": 2.576, "n_startup_trials": 0, "kernel": "matern-2.5"}
    sampler = strategy_plan(settings, 6, n_finished=0).sampler
    assert (sampler._acquisition, sampler._kernel, sampler._n_startup_trials) == ("ucb", "matern-2.5", 0)


def test_swift_paper_preset_and_explicit_flags_win():
    settings = settings_from_options(parse("--strategy", "swift", "--preset", "paper", "--patience", "7", "--gamma", "16")).validated()
    assert settings.objective == "matchness" and settings.skip_ratio == 0.45 and settings.gamma == 16
    assert settings.strategy_options == {"bo_interval": 25, "kappa": 2.5, "target": 0.95, "patience": 7, "max_trials": 1000}
    plan = strategy_plan(settings, 6, n_finished=0)
    assert plan.sampler._bo_interval == 25 and plan.sampler._kappa == 2.5


def test_stop_rule_options_reach_the_rule():
    assert stop_rule({"patience": 3, "max_trials": 9, "target": 0.5}).reason_for([0.1, 0.2, 0.2, 0.2, 0.2], maximize=True) == (
        "no improvement in the last 3 trials"
    )
    assert stop_rule({"target": 0.5}, objective_is_matchness=False).target is None


def test_without_startup_trials_the_gp_proposes_from_the_probes_on():
    rng = np.random.default_rng(0)
    probes = selfsd_bo.probe_masks(6)
    x = np.array([[int(b) for b in m.to_flat()] for m in probes], dtype=np.int8)
    y = np.array([1.0, 2.0, 1.5, 0.5][: len(x)])
    _, origin = selfsd_bo.propose(x, y, num_layers=6, rng=rng, n_startup_trials=0, acquisition="ucb", kernel="matern-2.5")
    assert origin == "bo"
    _, origin = selfsd_bo.propose(x, y, num_layers=6, rng=rng)  # the default: random until 10 trials
    assert origin == "startup"


def test_matern_kernel_is_used_and_deterministic():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 2, size=(8, 12)).astype(np.int8)
    y = x[:, :4].sum(1) + 0.1 * rng.standard_normal(8)
    first = _gp.propose_bits(x, y, acquisition="ucb", seed=3, kernel="matern-2.5")
    assert np.array_equal(first, _gp.propose_bits(x, y, acquisition="ucb", seed=3, kernel="matern-2.5"))
    import torch
    from gpytorch.kernels import MaternKernel

    model = _gp.fit_gp(torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(_gp.standardize(y)).unsqueeze(-1), "matern-2.5")
    assert isinstance(model.covar_module, MaternKernel) and model.covar_module.nu == 2.5


@pytest.mark.parametrize(
    "strategy, options, message",
    [
        ("random", {"kappa": 1.0}, "has no option kappa"),
        ("swift", {"kernel": "rbf"}, "has no option kernel"),
        ("selfsd-bo", {"kernel": "cubic"}, "kernel must be one of"),
        ("selfsd-bo", {"kappa": -1.0}, "kappa must be a number >= 0"),
        ("selfsd-bo", {"n_startup_trials": -1}, "n_startup_trials must be an integer >= 0"),
        ("swift", {"target": 2.0}, r"target must be in \[0, 1\]"),
        ("swift", {"patience": 0}, "patience must be an integer >= 1"),
        ("swift", {"bo_interval": 0}, "bo_interval must be an integer >= 1"),
    ],
)
def test_bad_options_are_refused(strategy, options, message):
    with pytest.raises(LayersearchError, match=message):
        make_sampler(strategy, num_layers=6, options=check_options(strategy, options))


def test_preset_of_a_strategy_without_one_and_missing_objective_are_refused():
    with pytest.raises(LayersearchError, match="has no preset 'paper'"):
        settings_from_options(parse("--strategy", "random", "--preset", "paper"))
    with pytest.raises(LayersearchError, match="needs --objective"):
        settings_from_options(parse("--strategy", "random"))


@pytest.mark.parametrize("strategy", ["selfsd-bo", "swift"])
def test_the_paper_presets_search_skip_masks_unless_told_otherwise(strategy):
    settings = settings_from_options(parse("--strategy", strategy, "--preset", "paper")).validated()
    assert settings.space == "skips" and "space" not in settings.strategy_options
    told = settings_from_options(parse("--strategy", strategy, "--preset", "paper", "--space", "plans")).validated()
    assert told.space == "plans"  # an explicit flag wins over the preset, as for every setting
    assert strategy_plan(told, 6, n_finished=0).sampler.space == "plans"
