"""Contract every search strategy honours, in the spirit of Optuna's own sampler test suite.

Each test runs against every strategy (and the skip-ratio variants that change behaviour):
proposals are valid masks for the model, fixed-count strategies keep their count, a seed
reproduces the sequence, a study survives sqlite storage and resumes with a fresh sampler,
starting masks are valid, and bad names or ratios raise LayersearchError. The tests that
propose run in both search spaces (``skips`` and ``plans``, :mod:`layersearch.strategies.space`).
"""

from __future__ import annotations

import functools
import math

import optuna
import pytest

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.strategies import (
    REGISTRY,
    STRATEGIES,
    StrategyInputs,
    default_skip_ratio,
    fixed_ratio,
    initial_masks,
    make_sampler,
    mask_from_params,
    param_names,
    params_from_mask,
    should_stop,
    skip_count,
    stop_reason,
    suggest_mask,
)
from layersearch.strategies.space import PLANS, SKIPS, SPACES, plan_bits, space_names

optuna.logging.set_verbosity(optuna.logging.WARNING)

# (strategy, skip_ratio): every registered strategy with its default, plus the ratios that change behaviour.
VARIANTS = [(name, None) for name in STRATEGIES] + [("swift", 0.3), ("random", 0.25), ("uniform", 0.3)]
VARIANT_IDS = [f"{name}-{ratio}" for name, ratio in VARIANTS]
# Strategies whose resumed study continues the uninterrupted sequence. Optuna's TPE restarts
# its startup stream on a new sampler instead (documented in layersearch.strategies.tpe).
RESUMABLE = tuple(name for name in STRATEGIES if name != "tpe")


def weighted_objective(num_layers: int, space: str = SKIPS):
    """A deterministic synthetic objective: a fixed weighted sum of the flat mask (maximized);
    for plans a weighted sum of the plan's bits (skips, int8 sub-layers, int8 head)."""
    weights = [((7 * j) % 5) - 2 + 0.01 * j for j in range(4 * num_layers + 1)]

    def objective(trial: optuna.trial.Trial) -> float:
        mask = suggest_mask(trial, num_layers, space)
        bits = plan_bits(mask) if space == PLANS else mask.to_flat()
        return sum(w for w, on in zip(weights, bits) if on)

    return objective


@functools.lru_cache(maxsize=None)
def model_inputs(num_layers: int) -> StrategyInputs:
    """The model, prompts and latency profile a study gives strategies that need them (a tiny Llama)."""
    from layersearch.models.loading import LoadedModel, describe_model
    from layersearch.models.tiny import build_tiny_model, char_tokenizer
    from layersearch.profiling.profile import LatencyProfile

    model = build_tiny_model("llama", num_layers=num_layers, seed=0)
    info = describe_model(model, "tiny")
    profile = LatencyProfile(
        model=info, device="cpu", dtype="float32", torch_version="test",
        attention_slope=1e-7, attention_intercept=2e-4, mlp_seconds=2e-4, base_seconds=3e-4,
        verify_ratios=(1.0, 1.1, 1.2, 1.3), int8_attention_slope=1e-7, int8_attention_intercept=6e-5,
        int8_mlp_seconds=6e-5, int8_head_saving=5e-5,
    )
    texts = ("The quick brown fox jumps over the lazy dog. " * 2, "SELECT name FROM users WHERE id = 3;")
    return StrategyInputs(
        num_layers=num_layers, loaded=LoadedModel(model, char_tokenizer(), info), texts=texts, profile=profile,
        max_new_tokens=8,
    )


def run(name, skip_ratio, num_layers, n_trials, *, seed=0, storage=None, study_name=None, space=SKIPS):
    """A new study of ``name`` in ``space`` with its starting masks enqueued, after ``n_trials`` trials."""
    sampler = make_sampler(name, num_layers=num_layers, skip_ratio=skip_ratio, seed=seed, space=space)
    study = optuna.create_study(direction="maximize", sampler=sampler, storage=storage, study_name=study_name)
    inputs = model_inputs(num_layers) if REGISTRY[name].needs_model else None
    for mask in initial_masks(name, num_layers=num_layers, skip_ratio=skip_ratio, inputs=inputs, space=space):
        study.enqueue_trial(params_from_mask(mask, space))
    study.optimize(weighted_objective(num_layers, space), n_trials=n_trials)
    return study


def masks_of(study, num_layers) -> list[SkipMask]:
    """The mask of every trial, in trial order."""
    return [mask_from_params(t.params, num_layers) for t in sorted(study.trials, key=lambda t: t.number)]


def check_mask(mask: SkipMask, name: str, skip_ratio, num_layers: int, space: str = SKIPS) -> None:
    """Assert that ``mask`` is one that strategy ``name`` may propose in ``space``."""
    assert isinstance(mask, SkipMask)
    assert mask.num_layers == num_layers
    if space == SKIPS:
        assert mask.is_skip_only
    elif name == "uniform":  # the uniform int8 self-draft: everything it keeps in int8
        assert mask == mask.skips_only().kept_in_int8(head=True)
    count = skip_count(name, num_layers=num_layers, skip_ratio=skip_ratio)
    assert (count is not None) == fixed_ratio(name, skip_ratio)
    if count is not None:
        assert mask.num_skipped == count
    if name == "swift":
        for kept in (0, num_layers - 1):
            assert kept not in mask.attention and kept not in mask.mlp


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize("num_layers", [6, 8])
@pytest.mark.parametrize(("name", "skip_ratio"), VARIANTS, ids=VARIANT_IDS)
def test_proposals_are_valid_masks(name, skip_ratio, num_layers, space):
    study = run(name, skip_ratio, num_layers, n_trials=8, space=space)
    assert len(study.trials) == 8
    for trial in study.trials:
        assert trial.state == optuna.trial.TrialState.COMPLETE
        assert set(trial.params) == set(space_names(num_layers, space))
        assert all(trial.params[p] in (0, 1) for p in param_names(num_layers))
        mask = mask_from_params(trial.params, num_layers)
        check_mask(mask, name, skip_ratio, num_layers, space)
        # The plan reads back as the trial's own parameters (up to a skipped sub-layer's precision, which it lacks).
        assert mask_from_params(params_from_mask(mask, space), num_layers) == mask
    if space == PLANS:  # the search does use the precisions
        assert any(mask.has_int8 for mask in masks_of(study, num_layers))


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize("num_layers", [6, 8])
@pytest.mark.parametrize(("name", "skip_ratio"), VARIANTS, ids=VARIANT_IDS)
def test_initial_masks_are_valid(name, skip_ratio, num_layers, space):
    inputs = model_inputs(num_layers) if REGISTRY[name].needs_model else None
    masks = initial_masks(name, num_layers=num_layers, skip_ratio=skip_ratio, inputs=inputs, space=space)
    assert isinstance(masks, tuple)
    assert len(set(masks)) == len(masks)
    for mask in masks:
        check_mask(mask, name, skip_ratio, num_layers, space)
        assert not mask.is_empty


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize(("name", "skip_ratio"), VARIANTS, ids=VARIANT_IDS)
def test_same_seed_same_masks(name, skip_ratio, space):
    # 13 trials: selfsd-bo's GP takes over after 10 completed trials, so its BO steps are covered.
    first = masks_of(run(name, skip_ratio, 6, n_trials=13, seed=7, space=space), 6)
    second = masks_of(run(name, skip_ratio, 6, n_trials=13, seed=7, space=space), 6)
    assert first == second


@pytest.mark.parametrize(("name", "skip_ratio"), [v for v in VARIANTS if v[0] != "uniform"])
def test_other_seed_other_masks(name, skip_ratio):
    first = masks_of(run(name, skip_ratio, 8, n_trials=8, seed=1), 8)
    second = masks_of(run(name, skip_ratio, 8, n_trials=8, seed=2), 8)
    assert first != second


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize("name", STRATEGIES)
def test_sqlite_storage_and_resume(tmp_path, name, space):
    # One variant per strategy: the ratio does not touch storage, and sqlite commits are slow.
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    run(name, None, 6, n_trials=5, seed=3, storage=storage, study_name="s", space=space)
    sampler = make_sampler(name, num_layers=6, seed=3, space=space)
    resumed = optuna.load_study(study_name="s", storage=storage, sampler=sampler)
    resumed.optimize(weighted_objective(6, space), n_trials=5)
    reloaded = optuna.load_study(study_name="s", storage=storage)
    assert len(reloaded.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) == 10
    masks = masks_of(reloaded, 6)
    for mask in masks:
        check_mask(mask, name, None, 6, space)
    if name in RESUMABLE:
        # Proposals depend only on (seed, trial number, history): resuming changes nothing.
        assert masks == masks_of(run(name, None, 6, n_trials=10, seed=3, space=space), 6)


@pytest.mark.parametrize(("name", "skip_ratio"), VARIANTS, ids=VARIANT_IDS)
def test_objective_may_suggest_other_parameters(name, skip_ratio):
    sampler = make_sampler(name, num_layers=6, skip_ratio=skip_ratio, seed=0)
    study = optuna.create_study(sampler=sampler)
    mask_objective = weighted_objective(6)

    def objective(trial):
        return mask_objective(trial) + trial.suggest_float("temperature", 0.0, 1.0)

    study.optimize(objective, n_trials=4)
    for trial in study.trials:
        assert 0.0 <= trial.params["temperature"] <= 1.0
        check_mask(mask_from_params(trial.params, 6), name, skip_ratio, 6)


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize(("name", "skip_ratio"), VARIANTS, ids=VARIANT_IDS)
def test_parallel_workers_propose_valid_masks(name, skip_ratio, space):
    sampler = make_sampler(name, num_layers=6, skip_ratio=skip_ratio, seed=0, space=space)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(weighted_objective(6, space), n_trials=6, n_jobs=2)
    assert len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) == 6
    for mask in masks_of(study, 6):
        check_mask(mask, name, skip_ratio, 6, space)


@pytest.mark.parametrize("name", STRATEGIES)
def test_settings_are_consistent(name):
    ratio = default_skip_ratio(name)
    assert ratio is None or 0.0 < ratio < 1.0
    if fixed_ratio(name):
        assert ratio is not None
    assert isinstance(should_stop(name, optuna.create_study()), bool)


def test_documented_defaults():
    assert default_skip_ratio("swift") == 0.45
    assert default_skip_ratio("uniform") == 0.45
    assert [default_skip_ratio(n) for n in ("selfsd-bo", "random", "tpe")] == [None, None, None]
    assert [fixed_ratio(n) for n in STRATEGIES] == [False, True, False, False, True, False]
    assert fixed_ratio("random", 0.25)


@pytest.mark.parametrize(
    "call",
    [
        lambda: make_sampler("bayes", num_layers=6),
        lambda: initial_masks("bayes", num_layers=6),
        lambda: default_skip_ratio("bayes"),
        lambda: fixed_ratio("bayes"),
        lambda: skip_count("bayes", num_layers=6),
        lambda: should_stop("bayes", optuna.create_study()),
        lambda: stop_reason("bayes", optuna.create_study()),
    ],
)
def test_unknown_name_lists_the_known_strategies(call):
    with pytest.raises(LayersearchError) as info:
        call()
    assert "bayes" in str(info.value)
    for name in STRATEGIES:
        assert name in str(info.value)


@pytest.mark.parametrize("ratio", [-0.1, 1.5, math.nan, True, "0.4"])
@pytest.mark.parametrize("name", ["swift", "random", "uniform"])
def test_bad_skip_ratio_raises(name, ratio):
    with pytest.raises(LayersearchError):
        make_sampler(name, num_layers=6, skip_ratio=ratio)


@pytest.mark.parametrize("name", ["selfsd-bo", "tpe", "knapsack"])
def test_free_count_strategies_refuse_a_ratio(name):
    with pytest.raises(LayersearchError, match="no skip ratio"):
        make_sampler(name, num_layers=6, skip_ratio=0.4)


@pytest.mark.parametrize("space", ["Plans", "int8", 1])
@pytest.mark.parametrize("name", STRATEGIES)
def test_unknown_space_raises(name, space):
    with pytest.raises(LayersearchError, match="search space"):
        make_sampler(name, num_layers=6, space=space)
    with pytest.raises(LayersearchError, match="search space"):
        initial_masks(name, num_layers=6, space=space, inputs=model_inputs(6) if REGISTRY[name].needs_model else None)


@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("num_layers", [0, -3, 2.5, True])
def test_bad_layer_count_raises(name, num_layers):
    with pytest.raises(LayersearchError):
        make_sampler(name, num_layers=num_layers)
    with pytest.raises(LayersearchError):
        initial_masks(name, num_layers=num_layers)


@pytest.mark.parametrize("name", [name for name, strategy in REGISTRY.items() if strategy.needs_model])
def test_model_strategies_refuse_to_start_without_a_model(name):
    with pytest.raises(LayersearchError, match="needs the model"):
        initial_masks(name, num_layers=6)
