"""Studies of draft plans (``study create --space plans``) and skip-mask studies made before them.

A plan study records its space, its trials' parameters hold each sub-layer's precision and read
back as the plan they measured (export writes it); a study stored without a space is a
skip-mask study and resumes exactly as it ran."""

from __future__ import annotations

from dataclasses import replace

import optuna
import pytest

from layersearch.masks.mask import SkipMask
from layersearch.strategies import mask_from_params, params_from_mask
from layersearch.strategies.space import PLANS, param_names, space_names

optuna.logging.set_verbosity(optuna.logging.WARNING)


def load(name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///studies/{name}.db")


@pytest.fixture(scope="module")
def int8_profile(tmp_path_factory, tiny_info):
    """The tiny model's made-up profile with int8 and int4 timings (what a plan study costs plans with)."""
    from layersearch.profiling.profile import LatencyProfile

    profile = LatencyProfile(
        model=tiny_info, device="cpu", dtype="float32", torch_version="test",
        attention_slope=1e-7, attention_intercept=2e-4, mlp_seconds=2e-4, base_seconds=3e-4,
        verify_ratios=(1.0, 1.1, 1.2, 1.3), int8_attention_slope=1e-7, int8_attention_intercept=6e-5,
        int8_mlp_seconds=6e-5, int8_head_saving=5e-5, int4_attention_slope=1e-7, int4_attention_intercept=4e-5,
        int4_mlp_seconds=4e-5, int4_head_saving=6e-5,
    )
    return profile.save(tmp_path_factory.mktemp("profile8") / "tiny-int8.json")


def plan_args(create_args, int8_profile, name, strategy="random", objective="expected-speedup", *extra):
    args = create_args(name, strategy, objective, "--space", "plans", *extra)
    args[args.index("--profile") + 1] = str(int8_profile)
    return args


def test_a_plan_study_round_trips_trial_params_and_plans(workdir, cli, create_args, int8_profile, tiny_info):
    status, out, err = cli(*plan_args(create_args, int8_profile, "p", "selfsd-bo"))
    assert status == 0, err
    assert "space plans" in out
    study = load("p")
    assert study.user_attrs["settings"]["space"] == PLANS
    status, out, err = cli("study", "run", "--name", "p", "--trials", "4", "--quiet")
    assert status == 0, err
    study = load("p")
    plans = []
    for trial in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        assert set(trial.params) == set(space_names(tiny_info.num_layers, PLANS))
        plan = mask_from_params(trial.params, tiny_info.num_layers)
        assert mask_from_params(params_from_mask(plan, PLANS), tiny_info.num_layers) == plan
        # the objective scored this very plan (int4 in groups of 64: the tiny model's width)
        assert trial.user_attrs["mask"] == (replace(plan, int4_group_size=64) if plan.has_int4 else plan).short_string()
        plans.append(plan)
    # selfsd-bo's plan probes come first: the all-int8 and all-int4 self-drafts, then the skip
    # probes in int8 and int4 by turns.
    assert plans[0] == SkipMask.none(tiny_info.num_layers).kept_in_int8()
    assert plans[1] == SkipMask.none(tiny_info.num_layers).kept_in_int4()
    assert all(plan.has_int8 or plan.has_int4 for plan in plans)

    status, _, err = cli("study", "export", "--name", "p", "--trial", "0", "--out", "plan.json")
    assert status == 0, err
    exported = SkipMask.load("plan.json", model=tiny_info)
    assert exported == plans[0].with_model(tiny_info) and exported.has_int8
    status, _, err = cli("generate", "--model", study.user_attrs["settings"]["model"], "--mask", "plan.json",
                         "--prompt", "Hello", "--max-new-tokens", "4")
    assert status == 0, err
    # the all-int4 probe exports in the group size it ran with (the tiny model is 64 wide), and runs
    status, _, err = cli("study", "export", "--name", "p", "--trial", "1", "--out", "plan4.json")
    assert status == 0, err
    exported = SkipMask.load("plan4.json", model=tiny_info)
    assert exported == replace(plans[1], int4_group_size=64).with_model(tiny_info)
    status, _, err = cli("generate", "--model", study.user_attrs["settings"]["model"], "--mask", "plan4.json",
                         "--prompt", "Hello", "--max-new-tokens", "4")
    assert status == 0, err


def test_a_skip_mask_study_stored_before_plans_resumes_unchanged(workdir, cli, create_args, tiny_info):
    assert cli(*create_args("old", "random", "time-per-token", "--seed", "5"))[0] == 0
    study = load("old")
    settings = dict(study.user_attrs["settings"])
    assert settings.pop("space") == "skips"
    study.set_user_attr("settings", settings)  # as a study created before the plans space stores it
    assert cli("study", "run", "--name", "old", "--trials", "3", "--quiet")[0] == 0
    study = load("old")
    assert study.user_attrs["settings"] == settings  # nothing rewritten
    masks = []
    for trial in study.trials:
        assert set(trial.params) == set(param_names(tiny_info.num_layers))  # no precision parameters
        masks.append(mask_from_params(trial.params, tiny_info.num_layers))
    assert all(mask.is_skip_only for mask in masks)
    # The same trials as a study of today's skip space with the same seed: resuming changed nothing.
    assert cli(*create_args("new", "random", "time-per-token", "--seed", "5"))[0] == 0
    assert cli("study", "run", "--name", "new", "--trials", "3", "--quiet")[0] == 0
    assert [mask_from_params(t.params, tiny_info.num_layers) for t in load("new").trials] == masks
    status, out, _ = cli(*create_args("old", "random", "time-per-token", "--seed", "5"))
    assert status == 0 and "already exists" in out  # the same settings as the stored ones


def test_the_paper_preset_keeps_the_skip_space(workdir, cli, create_args):
    args = create_args("paper", "swift", "matchness", "--preset", "paper")
    assert cli(*args)[0] == 0
    assert load("paper").user_attrs["settings"]["space"] == "skips"
    assert load("paper").user_attrs["settings"]["strategy_options"].get("space") is None


def test_a_plan_study_needs_int8_timings(workdir, cli, create_args, listing):
    before = listing(workdir)
    status, out, err = cli(*create_args("q", "random", "expected-speedup", "--space", "plans"))
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "int8 timings" in err
    assert listing(workdir) == before


def test_a_plan_trial_records_how_much_runs_in_int8():
    from layersearch.objectives.scoring import trial_attrs

    plan = SkipMask(4, attention=(3,)).with_int8((0, 1), (0, 1, 2, 3), True)
    attrs = trial_attrs(plan, None)
    assert attrs["int8_ratio"] == 6 / 8 and attrs["int8_head"] is True and attrs["skip_ratio"] == 1 / 8
    assert "int8_ratio" not in trial_attrs(plan.skips_only(), None)  # a skip mask's attributes stay as they were


def test_a_plan_study_with_a_profile_before_int4_searches_full_and_int8(workdir, cli, create_args, tiny_info,
                                                                        tmp_path):
    """A profile measured before int4 still creates a plans study: its space is full and int8."""
    from layersearch.profiling.profile import LatencyProfile

    older = LatencyProfile(
        model=tiny_info, device="cpu", dtype="float32", torch_version="test",
        attention_slope=1e-7, attention_intercept=2e-4, mlp_seconds=2e-4, base_seconds=3e-4,
        verify_ratios=(1.0, 1.1, 1.2, 1.3), int8_attention_slope=1e-7, int8_attention_intercept=6e-5,
        int8_mlp_seconds=6e-5, int8_head_saving=5e-5,
    ).save(tmp_path / "older.json")
    args = plan_args(create_args, older, "o", "random")
    status, out, err = cli(*args)
    assert status == 0 and "no int4 timings" in err, err
    assert load("o").user_attrs["settings"]["space"] == "plans-int8"
    assert cli("study", "run", "--name", "o", "--trials", "3", "--quiet")[0] == 0
    for trial in load("o").trials:
        assert not mask_from_params(trial.params, tiny_info.num_layers).has_int4
    status, out, _ = cli(*args)
    assert status == 0 and "already exists" in out  # the same settings as the stored ones


def test_a_plan_trial_records_how_much_runs_in_int4():
    from layersearch.objectives.scoring import trial_attrs

    plan = SkipMask(4, attention=(3,)).with_int4((0, 1), (0, 1, 2, 3), True)
    attrs = trial_attrs(plan, None)
    assert attrs["int4_ratio"] == 6 / 8 and attrs["int4_head"] is True and "int8_ratio" not in attrs


def test_a_plans_study_stored_before_int4_resumes_in_its_two_precisions(workdir, cli, create_args, tiny_info, tmp_path):
    """A plans study written before int4 stores space "plans" and ("full", "int8") categoricals in
    its trials; Optuna refuses other choices for them, so it resumes in that space."""
    from layersearch.profiling.profile import LatencyProfile
    from layersearch.strategies.space import PLANS_INT8, precision_names

    older = LatencyProfile(
        model=tiny_info, device="cpu", dtype="float32", torch_version="test",
        attention_slope=1e-7, attention_intercept=2e-4, mlp_seconds=2e-4, base_seconds=3e-4,
        verify_ratios=(1.0, 1.1, 1.2, 1.3), int8_attention_slope=1e-7, int8_attention_intercept=6e-5,
        int8_mlp_seconds=6e-5, int8_head_saving=5e-5,
    ).save(tmp_path / "older.json")
    assert cli(*plan_args(create_args, older, "before", "selfsd-bo"))[0] == 0
    assert cli("study", "run", "--name", "before", "--trials", "2", "--quiet")[0] == 0
    study = load("before")
    settings = {**study.user_attrs["settings"], "space": PLANS}
    study.set_user_attr("settings", settings)  # what a layersearch before int4 stored
    status, _, err = cli("study", "run", "--name", "before", "--trials", "3", "--quiet")
    assert status == 0, err
    study = load("before")
    assert study.user_attrs["settings"] == settings  # nothing rewritten
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(complete) >= 5
    for trial in complete:
        assert all(trial.distributions[name].choices == ("full", "int8") for name in precision_names(tiny_info.num_layers))
        assert not mask_from_params(trial.params, tiny_info.num_layers, PLANS_INT8).has_int4
