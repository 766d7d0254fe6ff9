"""Self-SD's GP-BO: probe masks, the random start, and that the GP beats random search."""

from __future__ import annotations

import optuna
import pytest

from layersearch.masks.mask import SkipMask
from layersearch.strategies import (
    PROPOSAL_ATTR,
    initial_masks,
    make_sampler,
    mask_from_params,
    params_from_mask,
    suggest_mask,
)
from layersearch.strategies import selfsd_bo

optuna.logging.set_verbosity(optuna.logging.WARNING)

NUM_LAYERS = 8
N_TRIALS = 24


def structured_objective(trial: optuna.trial.Trial) -> float:
    """+1 per skipped sub-layer in a checkerboard (attention of even layers, MLP of odd), -1 elsewhere.

    Clear structure, optimum 8, and none of the probe masks is close to it.
    """
    flat = suggest_mask(trial, NUM_LAYERS).to_flat()
    return sum((1.0 if (j // 2) % 2 == j % 2 else -1.0) for j, skipped in enumerate(flat) if skipped)


def run(name: str, seed: int) -> optuna.Study:
    study = optuna.create_study(direction="maximize", sampler=make_sampler(name, num_layers=NUM_LAYERS, seed=seed))
    for mask in initial_masks(name, num_layers=NUM_LAYERS):
        study.enqueue_trial(params_from_mask(mask))
    study.optimize(structured_objective, n_trials=N_TRIALS)
    return study


@pytest.fixture(scope="module")
def bo_study() -> optuna.Study:
    return run("selfsd-bo", seed=0)


def test_gp_beats_random_search(bo_study):
    random_best = max(run("random", seed=seed).best_value for seed in range(3))
    assert bo_study.best_value >= random_best + 2
    assert bo_study.best_value >= 7


def test_probes_then_random_start_then_gp(bo_study):
    probes = selfsd_bo.probe_masks(NUM_LAYERS)
    trials = sorted(bo_study.trials, key=lambda t: t.number)
    origins = [t.system_attrs.get(PROPOSAL_ATTR) for t in trials]
    assert [mask_from_params(t.params, NUM_LAYERS) for t in trials[: len(probes)]] == list(probes)
    assert origins[: len(probes)] == [None] * len(probes)
    assert origins[len(probes) : selfsd_bo.N_STARTUP_TRIALS] == ["startup"] * (selfsd_bo.N_STARTUP_TRIALS - len(probes))
    assert origins[selfsd_bo.N_STARTUP_TRIALS :] == ["bo"] * (N_TRIALS - selfsd_bo.N_STARTUP_TRIALS)


def test_gp_does_not_repeat_measured_masks(bo_study):
    seen = set()
    for trial in sorted(bo_study.trials, key=lambda t: t.number):
        mask = mask_from_params(trial.params, NUM_LAYERS)
        if trial.system_attrs.get(PROPOSAL_ATTR) == "bo":
            assert mask not in seen
        seen.add(mask)


def test_minimized_objective_is_searched_the_right_way():
    study = optuna.create_study(
        direction="minimize", sampler=selfsd_bo.SelfSDBOSampler(num_layers=4, seed=0, n_startup_trials=4)
    )
    study.optimize(lambda t: float(suggest_mask(t, 4).num_skipped), n_trials=9)
    gp_values = [t.value for t in study.trials if t.system_attrs.get(PROPOSAL_ATTR) == "bo"]
    assert min(gp_values) <= 1


@pytest.mark.parametrize("num_layers", [1, 2, 6, 12, 32, 40, 80])
def test_probe_masks_scale_with_the_model(num_layers):
    probes = selfsd_bo.probe_masks(num_layers)
    assert probes and len(set(probes)) == len(probes)
    assert all(p.num_layers == num_layers and not p.is_empty for p in probes)
    later_half = SkipMask(num_layers, attention=tuple(range((num_layers + 1) // 2, num_layers)))
    if num_layers > 1:
        assert later_half in probes
    for ratio in selfsd_bo.PROBE_RATIOS:
        uniform = SkipMask.uniform(num_layers, ratio)
        assert uniform.is_empty or uniform in probes


def test_probes_for_40_layers():
    probes = selfsd_bo.probe_masks(40)
    assert [p.num_skipped for p in probes] == [16, 28, 40, 20]
    assert probes[-1].attention == tuple(range(20, 40)) and probes[-1].mlp == ()
