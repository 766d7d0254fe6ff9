"""``study create --objective tpt --profile gpu.json``: a profile measured on another device costs
the study's plans (acceptance is measured here), and every stored prediction names that device;
a profile for another architecture is refused, naming both."""

from __future__ import annotations

import json
from dataclasses import replace

import optuna

from layersearch.profiling.profile import LatencyProfile

H100 = "cuda: NVIDIA H100 80GB HBM3"


def test_a_gpu_profile_costs_the_study_and_names_its_device(workdir, cli, create_args, tiny_profile):
    profile = LatencyProfile.load(tiny_profile)
    gpu = replace(profile, device=H100, dtype="bfloat16", compile_mode="captured:inductor", random_weights=True)
    gpu.save(workdir / "gpu.json")
    args = create_args("gpu", "random", "tpt")
    args[args.index("--profile") + 1] = str(workdir / "gpu.json")
    status, out, err = cli(*args)
    assert status == 0, err
    assert f"costs predicted for {H100}" in out
    status, out, err = cli("study", "run", "--name", "gpu", "--trials", "2", "--quiet")
    assert status == 0, err
    study = optuna.load_study(study_name="gpu", storage="sqlite:///studies/gpu.db")
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert done and all(t.user_attrs["predicted_on"] == H100 for t in done)
    status, out, err = cli("study", "show", "--name", "gpu")
    assert status == 0 and f"predicted on {H100}" in out


def test_a_profile_for_another_architecture_is_refused_naming_both(workdir, cli, create_args, tiny_profile, listing):
    data = LatencyProfile.load(tiny_profile).to_dict()
    data["model"].update(num_layers=2, hidden_size=96, fingerprint="0123456789abcdef")
    data["architecture"] = {"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 96}
    (workdir / "qwen.json").write_text(json.dumps(data))
    before = listing(workdir)
    args = create_args("other", "random", "tpt")
    args[args.index("--profile") + 1] = str(workdir / "qwen.json")
    status, out, err = cli(*args)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1
    assert "qwen2 (2 layers, hidden 96" in lines[0] and "llama (4 layers" in lines[0]
    assert listing(workdir) == before  # no storage made
