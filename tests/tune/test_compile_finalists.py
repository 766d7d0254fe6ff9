"""A search for a GPU compiles only what it ships: trials decode eagerly and are scored by a
profile's costs (here one that says it was measured on an H100), only the finalists compile."""

from __future__ import annotations

from dataclasses import replace

import optuna
import pytest

from layersearch.common.provenance import cpu_name
from layersearch.decoder.spec import ModelRef, ModelSpec
from layersearch.models.loading import load_model
from layersearch.profiling.profiler import measure_profile
from layersearch.runtime.backend import compile_with
from layersearch.runtime.backend import dynamo_compiler
from layersearch.tune.run import prepare, tune
from layersearch.tune.settings import TuneSettings

H100 = "cuda: NVIDIA H100 80GB HBM3"


@pytest.fixture
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir))


def _gpu_profile(loaded):
    """A profile measured here, then labelled as a captured H100 profile: what a file from another device reads as."""
    profile = measure_profile(loaded.model, loaded.info, contexts=(16, 64), max_verify=4, repeats=1)
    return replace(profile, device=H100, compile_mode="captured:inductor")


@pytest.mark.parametrize("given", [True, False], ids=["a profile from an H100", "a captured profile measured first"])
def test_trials_run_eager_scored_on_the_profiles_device_and_only_finalists_compile(given, prompt_file, loaded, tmp_path):
    compiles: list[int] = []
    eager = dynamo_compiler("eager")

    def counting(device):
        compiles.append(len(compiles))
        return eager(device)

    setattr(counting, "backend", "eager")
    compile_with(loaded.model, counting)
    profile = _gpu_profile(loaded) if given else None
    device = H100 if given else f"cpu: {cpu_name()}"
    seen_at_trials: list[int] = []
    settings = TuneSettings(str(prompt_file), 3.0, "gpu", f"sqlite:///{tmp_path / 'tune.db'}", train_prompts=2,
                            test_prompts=1, max_new_tokens=6, repeats=1, finalists=2)
    prepared = prepare(settings)
    model = ModelSpec(ModelRef.given("tiny"), loaded.info, "cpu", "float32")
    result = tune(loaded, prepared, model, kernels="stock", compile="on", profile=profile,
                  on_trial=lambda progress: seen_at_trials.append(len(compiles)))

    before_trials = seen_at_trials[0] if seen_at_trials else None
    assert seen_at_trials and set(seen_at_trials) == {before_trials}  # no trial compiled anything
    assert (before_trials == 0) == given  # without a profile, a captured one was measured (and compiled) first
    assert result.scored_by == f"predicted on {device}"
    finalists = [row for row in result.selection.rows if row.spec is not None]
    assert 1 <= len(finalists) <= 2 and all(row.spec.compile == "on" for row in finalists)
    # the finalists' held-out run compiled what they needed, and nothing else did (without a profile
    # given, the profile's loop already compiled the one-token forward the finalists may share)
    assert result.compiled_forwards == len(compiles) - before_trials
    assert result.compiled_forwards > 0 or not given
    study = optuna.load_study(study_name="gpu", storage=settings.storage)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert done and all(t.user_attrs["scored_by"] == f"predicted on {device}" for t in done)
    drafting = [t for t in done if t.user_attrs.get("predicted") is not None]
    assert all(t.user_attrs["predicted_on"] == device and t.value == pytest.approx(t.user_attrs["predicted"]) for t in drafting)
    from layersearch.tune.report import scoring_text

    assert f"predicted on {device}" in scoring_text(result) and "Only the finalists were compiled" in scoring_text(result)


def test_a_profile_for_another_architecture_is_refused_naming_both(prompt_file, tiny_model_dir, tmp_path, capsys):
    from layersearch.cli import main
    from layersearch.models.tiny import build_tiny_model
    from layersearch.models.loading import describe_model

    other = build_tiny_model("qwen2", num_layers=2, seed=1)
    profile = measure_profile(other, describe_model(other, "other"), contexts=(8,), max_verify=2, repeats=1)
    path = tmp_path / "other.json"
    profile.save(path)
    code = main(["tune", "--prompts", str(prompt_file), "--model", str(tiny_model_dir), "--out", str(tmp_path / "spec.json"),
                 "--storage", str(tmp_path / "t.db"), "--budget", "1", "--profile", str(path), "--quiet", "--threads", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "qwen2 (2 layers" in err[0] and "llama (4 layers" in err[0]
    assert not (tmp_path / "spec.json").exists()
