"""LatencyProfile: the latency model (SWIFT Eq. 6, KNN-SSD Eq. 11, KnapSpec TPT) and its JSON file."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.profiling.profile import LatencyProfile

INFO = ModelInfo("toy", 4, 64, "fp-toy")


def make_profile(
    *, slope=0.0, intercept=2.0, mlp=1.0, base=0.0, ratios=(1.0, 1.0, 1.0, 1.0), info=INFO
) -> LatencyProfile:
    """A hand-made profile; defaults: attention 2 s, MLP 1 s, no base cost, free verification."""
    return LatencyProfile(
        model=info,
        device="cpu",
        dtype="float32",
        torch_version="2.13.0",
        attention_slope=slope,
        attention_intercept=intercept,
        mlp_seconds=mlp,
        base_seconds=base,
        verify_ratios=ratios,
        contexts=(64, 256),
        created="2026-01-01T00:00:00+00:00",
    )


# Skips attention of layers 0, 1 and the MLP of layer 0: draft = 2*2 + 3*1 = 7 s, target = 4*3 = 12 s.
MASK = SkipMask(4, attention=(0, 1), mlp=(0,))


# ----- per-forward costs ---------------------------------------------------------------------------
def test_attention_cost_is_linear_in_context():
    profile = make_profile(slope=0.01, intercept=0.5)
    assert profile.attention_seconds(0) == 0.5
    assert profile.attention_seconds(100) == pytest.approx(1.5)
    assert profile.target_seconds(100) == pytest.approx(4 * (1.5 + 1.0))


def test_draft_and_target_seconds_count_executed_sublayers():
    profile = make_profile(base=0.5)
    assert profile.draft_seconds(MASK, 10) == pytest.approx(0.5 + 7.0)
    assert profile.target_seconds(10) == pytest.approx(0.5 + 12.0)
    assert profile.draft_seconds(SkipMask.everything(4), 10) == pytest.approx(0.5)
    assert profile.cost_coefficient(SkipMask.none(4), 10) == pytest.approx(1.0)


@pytest.mark.parametrize("beta", [1.0, 2.3, 0.5])
def test_cost_coefficient_is_knn_ssd_eq_11(beta):
    # 50 layers so the paper's example ratios are exact: s_mlp = 21/50 = 0.42, s_attn = 24/50 = 0.48.
    info = ModelInfo("toy50", 50, 64, "fp-50")
    profile = make_profile(intercept=beta * 1e-3, mlp=1e-3, base=0.0, info=info)
    mask = SkipMask(50, attention=tuple(range(24)), mlp=tuple(range(10, 31)))
    s_attn, s_mlp = 0.48, 0.42
    expected = ((1 - s_mlp) + (1 - s_attn) * beta) / (1 + beta)
    assert profile.cost_coefficient(mask, context=512) == pytest.approx(expected)
    if beta == 2.3:
        assert round(profile.cost_coefficient(mask, 512), 3) == 0.538  # the value KNN-SSD reports


def test_cost_coefficient_rejects_a_mask_for_another_model():
    with pytest.raises(LayersearchError, match="layers"):
        make_profile().cost_coefficient(SkipMask.none(5), 10)
    other = ModelInfo("other", 4, 64, "fp-other")
    with pytest.raises(LayersearchError, match="fingerprint"):
        make_profile().cost_coefficient(SkipMask.none(4, model=other), 10)


def test_verify_ratio_measured_and_extrapolated():
    profile = make_profile(ratios=(1.0, 1.5, 1.8))
    assert profile.verify_ratio(1) == 1.0
    assert profile.verify_ratio(3) == 1.8
    assert profile.verify_ratio(5) == pytest.approx(1.8 + 2 * 0.3)  # line through the last two points
    noisy = make_profile(ratios=(1.0, 1.6, 1.5))
    assert noisy.verify_ratio(6) == 1.5  # a falling tail is noise: flat, never below the last point
    assert make_profile(ratios=(1.0,)).verify_ratio(8) == 1.0
    with pytest.raises(LayersearchError, match="verify length"):
        profile.verify_ratio(0)


# ----- expected speedup ----------------------------------------------------------------------------
def test_expected_speedup_is_swift_eq_6_when_verification_is_free():
    profile = make_profile()
    c = 7 / 12
    # Eq. 6 by hand: M*alpha / ((M - 1)*c + alpha) = 2.4 / (2*7/12 + 0.8)
    assert profile.expected_speedup(3, 0.8, MASK, 100) == pytest.approx(1.2203389830508475)
    for M, alpha in [(5.01, 0.98), (2.0, 0.5), (8.2, 1.0), (1.5, 0.3)]:
        eq6 = M * alpha / ((M - 1) * c + alpha)
        assert profile.expected_speedup(M, alpha, MASK, 100) == pytest.approx(eq6)


def test_expected_speedup_charges_the_measured_verify_cost():
    profile = make_profile(ratios=(1.0, 1.5, 2.0))
    # M = 3 at alpha = 1: 2 drafts (7/12 each), then one forward over 3 tokens costing 2.0.
    assert profile.expected_speedup(3, 1.0, MASK, 100) == pytest.approx(3 / (2 * 7 / 12 + 2.0))
    # 2.5 drafts per cycle round to 2, so verification covers 3 tokens.
    assert profile.expected_speedup(3, 0.8, MASK, 100) == pytest.approx(3 / (2.5 * 7 / 12 + 2.0))


def test_expected_speedup_when_nothing_is_accepted():
    profile = make_profile(ratios=(1.0, 1.5))
    c = 7 / 12
    # alpha = 0: drafts were made and all rejected; assumed one per cycle, verifying 2 tokens.
    assert profile.expected_speedup(1, 0.0, MASK, 100) == pytest.approx(1 / (c + 1.5))
    # M = 1 with alpha > 0: no draft was proposed, a plain decoding step.
    assert profile.expected_speedup(1, 0.7, MASK, 100) == pytest.approx(1.0)
    # An observed draft count overrides the assumption.
    assert profile.expected_speedup(1, 0.0, MASK, 100, drafts=3) == pytest.approx(1 / (3 * c + 1.5 + 2 * 0.5))
    with pytest.raises(LayersearchError, match="contradicts"):
        profile.expected_speedup(2, 0.0, MASK, 100)


@pytest.mark.parametrize("M, alpha", [(0.5, 0.5), (2, 1.5), (2, -0.1), (math.nan, 0.5)])
def test_expected_speedup_rejects_bad_statistics(M, alpha):
    with pytest.raises(LayersearchError):
        make_profile().expected_speedup(M, alpha, MASK, 100)


# ----- TPT -----------------------------------------------------------------------------------------
def test_tpt_by_hand():
    profile = make_profile(base=0.5, ratios=(1.0, 1.2, 1.4, 1.6))
    # draft 7.5 s, target 12.5 s; alpha 0.6, gamma 3: E[tokens] = (1 - 0.6**4) / 0.4 = 2.176,
    # time = 3 * 7.5 + 12.5 * verify_ratio(4) = 22.5 + 20 = 42.5 s.
    assert profile.tpt(0.6, 3, MASK, 100) == pytest.approx(2.176 / 42.5)
    assert profile.tpt(1.0, 3, MASK, 100) == pytest.approx(4 / 42.5)
    assert profile.tpt(0.0, 3, MASK, 100) == pytest.approx(1 / 42.5)
    assert profile.tpt(0.6, 0, MASK, 100) == pytest.approx(1 / 12.5)  # plain decoding


def test_best_tpt_picks_the_argmax():
    profile = make_profile(base=0.5, ratios=(1.0, 1.1, 1.2, 1.3))
    cheap = SkipMask(4, attention=(0, 1, 2, 3), mlp=(1, 2))
    for alpha in (0.3, 0.8, 0.95):
        values = {gamma: profile.tpt(alpha, gamma, cheap, 100) for gamma in range(1, 19)}
        best, gamma = profile.best_tpt(alpha, cheap, 100)
        assert gamma == max(values, key=values.get)
        assert best == values[gamma]
    _, gamma = profile.best_tpt(0.8, cheap, 100)
    assert 1 < gamma < 18  # an interior optimum, so the search really compares lengths
    assert profile.best_tpt(0.8, cheap, 100, max_draft=2)[1] <= 2


# ----- JSON ----------------------------------------------------------------------------------------
def test_json_round_trip(tmp_path):
    profile = make_profile(slope=1e-6, intercept=2e-4, mlp=3e-4, base=5e-3, ratios=(1.0, 1.3, 1.7))
    path = profile.save(tmp_path / "profile.json")
    data = json.loads(path.read_text())
    assert data["schema_version"] == 2 and data["kind"] == "latency-profile"
    assert LatencyProfile.load(path) == profile
    assert LatencyProfile.load(path, model=INFO) == profile
    assert LatencyProfile.from_dict(profile.to_dict()) == profile


def test_version_1_files_still_read_with_empty_provenance(tmp_path):
    data = make_profile().to_dict()
    for key in ("transformers_version", "commit", "compile_mode", "random_weights", "step_overhead_seconds", "architecture"):
        del data[key]
    data["schema_version"] = 1
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = LatencyProfile.load(tmp_path / "old.json", model=INFO)
    assert old.compile_mode == "eager" and old.architecture == {} and old.commit == ""
    assert old.expected_speedup(3.0, 0.8, SkipMask(4, attention=(0,)), 0) == make_profile().expected_speedup(
        3.0, 0.8, SkipMask(4, attention=(0,)), 0)


def test_provenance_round_trips_and_predictions_name_the_device():
    from dataclasses import replace

    arch = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 64, "dtype": "bfloat16"}
    profile = replace(make_profile(), device="cuda: NVIDIA H100 80GB HBM3", transformers_version="5.0", commit="abc",
                      compile_mode="captured:inductor", random_weights=True, step_overhead_seconds=1e-5, architecture=arch)
    assert LatencyProfile.from_dict(profile.to_dict()) == profile
    assert profile.predicted_text(1.625) == "predicted 1.62x on cuda: NVIDIA H100 80GB HBM3"
    assert replace(profile, device="cuda (NVIDIA A100)").predicts_for == "cuda: NVIDIA A100"


def test_a_profile_for_another_architecture_is_refused_naming_both():
    from dataclasses import replace

    arch = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 64, "head_dim": 16, "dtype": "bfloat16"}
    profile = replace(make_profile(), architecture=arch)
    profile.check_model(INFO, {**arch, "dtype": "float32"})  # the dtype is the deployment's, not the acceptance model's
    other = ModelInfo("qwen-thing", 6, 96, "fp-other")
    with pytest.raises(LayersearchError) as info:
        profile.check_model(other, {"model_type": "qwen2", "num_hidden_layers": 6, "hidden_size": 96})
    message = str(info.value)
    assert "\n" not in message and "llama (4 layers, hidden 64" in message and "qwen2 (6 layers, hidden 96" in message
    with pytest.raises(LayersearchError, match="head dim 16.*head dim 32"):
        profile.check_model(INFO, {**arch, "head_dim": 32})


def test_atomic_save_leaves_no_temporary_files(tmp_path):
    profile = make_profile()
    profile.save(tmp_path / "p.json")
    profile.save(tmp_path / "p.json")  # overwrite
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]


def _load_error(tmp_path, text: str, model: ModelInfo | None = None) -> str:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(LayersearchError) as info:
        LatencyProfile.load(path, model=model)
    message = str(info.value)
    assert "\n" not in message and "bad.json" in message
    return message


def test_load_rejects_malformed_json(tmp_path):
    assert "malformed JSON" in _load_error(tmp_path, '{"schema_version": 1,')


def test_load_rejects_a_missing_field(tmp_path):
    data = make_profile().to_dict()
    del data["mlp_seconds"]
    assert "missing 'mlp_seconds'" in _load_error(tmp_path, json.dumps(data))


def test_load_rejects_a_profile_for_another_model(tmp_path):
    text = json.dumps(make_profile().to_dict())
    other = dataclasses.replace(INFO, fingerprint="fp-other")
    message = _load_error(tmp_path, text, model=other)
    assert "fp-toy" in message and "fp-other" in message


@pytest.mark.parametrize("field", ["attention_slope", "attention_intercept", "mlp_seconds", "base_seconds"])
def test_load_rejects_negative_times(tmp_path, field):
    data = make_profile().to_dict()
    data[field] = -0.001
    message = _load_error(tmp_path, json.dumps(data))
    assert field in message and "negative" in message


@pytest.mark.parametrize(
    "change, words",
    [
        ({"verify_ratios": [1.0, -2.0]}, "verify_ratios[1]"),
        ({"verify_ratios": [1.2, 2.0]}, "verify_ratios[0] must be 1.0"),
        ({"verify_ratios": []}, "verify_ratios is empty"),
        ({"mlp_seconds": "fast"}, "mlp_seconds must be a finite number"),
        ({"kind": "skip-mask"}, "not a latency profile"),
        ({"schema_version": 3}, "written by a newer layersearch (schema_version 3; this version reads up to 2): upgrade"),
        ({"schema_version": 1.0}, "unsupported schema_version 1.0 (expected 1, 2)"),
        ({"compile_mode": "jit"}, "compile_mode"),
        ({"architecture": [1]}, "architecture must be an object"),
        ({"model": {"name": "x"}}, "model: missing"),
        ({"mlp_seconds": True}, "mlp_seconds must be a finite number, got True"),
        ({"int4_mlp_seconds": "0.1"}, "int4_mlp_seconds must be a finite number, got '0.1'"),
        ({"step_overhead_seconds": False}, "step_overhead_seconds must be a finite number, got False"),
        ({"contexts": [64.0]}, "contexts must be integers >= 0, got 64.0"),
        ({"attention_windows": [4096.0, None, None, None]}, "attention_windows must hold integers >= 1 or null, got 4096.0"),
        ({"kernel_timings": [{"kernels": "stock", "one_token_seconds": True, "verify_ratios": [1.0]}]},
         "one_token_seconds must be a finite number, got True"),
        ({"architecture": {"hidden_size": 64.0}}, "profile architecture.hidden_size must be an integer >= 1, got 64.0"),
        ({"architecture": {"num_hidden_layers": True}}, "profile architecture.num_hidden_layers must be an integer >= 1, got True"),
        ({"architecture": {"dtype": 32}}, "profile architecture.dtype must be a string or null, got 32"),
    ],
)
def test_load_rejects_invalid_values(tmp_path, change, words):
    data = {**make_profile().to_dict(), **change}
    assert words in _load_error(tmp_path, json.dumps(data))


def test_load_reports_a_missing_file(tmp_path):
    with pytest.raises(LayersearchError, match="not found"):
        LatencyProfile.load(tmp_path / "nope.json")


def test_step_prediction_costs_each_step_as_the_loop_ran_it():
    from layersearch.runtime.step import StepOutcome

    info = ModelInfo("tiny", 4, 64, "x")
    profile = LatencyProfile(info, "cpu", "float32", "x", 1e-6, 1e-3, 2e-3, 4e-3, (1.0, 1.5, 1.8))
    mask = SkipMask(4, (0, 1), (2,))
    steps = [
        StepOutcome(0, 10, drafted=2, accepted=2, emitted=3, drafter="layer-skip", mask=mask, draft_forwards=3),
        StepOutcome(1, 13, drafted=0, accepted=0, emitted=1, drafter="layer-skip", mask=mask, draft_forwards=0),
    ]
    draft = sum(profile.draft_seconds(mask, 10 + i) for i in range(3))
    spec = draft + profile.target_seconds(10) * 1.8 + profile.target_seconds(13)
    plain = sum(profile.target_seconds(n) for n in (10, 11, 12, 13))
    assert profile.step_seconds(10, 2, 3, mask) == pytest.approx(draft + profile.target_seconds(10) * 1.8)
    assert profile.predicted_speedup_of_steps(steps) == pytest.approx(plain / spec)
    assert profile.predicted_speedup_of_steps([]) is None


# ----- sliding-window attention -------------------------------------------------------------


def windowed(windows, **overrides):
    fields = dict(
        model=ModelInfo("tiny-sliding", len(windows), 64, "fp-sliding"),
        device="cpu",
        dtype="float32",
        torch_version="2",
        attention_slope=1e-5,
        attention_intercept=1e-4,
        mlp_seconds=2e-4,
        base_seconds=1e-3,
        verify_ratios=(1.0, 1.2),
        attention_windows=tuple(windows),
    )
    fields.update(overrides)
    return LatencyProfile(**fields)


def test_sliding_attention_cost_stops_growing_at_the_window():
    profile = windowed([4096, None, 4096, None])
    assert profile.attention_seconds(100_000, 0) == profile.attention_seconds(4095, 0) < profile.attention_seconds(100_000, 1)
    assert profile.attention_seconds(1000, 0) == profile.attention_seconds(1000, 1)  # inside the window: alike
    # The whole forward keeps growing only through the full layers: 2 of 4 here.
    grow = profile.target_seconds(20_000) - profile.target_seconds(10_000)
    assert grow == pytest.approx(2 * 1e-5 * 10_000)
    all_sliding = windowed([4096] * 4)
    assert all_sliding.target_seconds(50_000) == all_sliding.target_seconds(5_000)


def test_skipping_a_full_layer_saves_more_than_a_sliding_one_at_long_context():
    profile = windowed([4096, None, 4096, None])
    skip_sliding = profile.draft_seconds(SkipMask(4, (0,), ()), 20_000)
    skip_full = profile.draft_seconds(SkipMask(4, (1,), ()), 20_000)
    assert skip_full < skip_sliding < profile.target_seconds(20_000)
    assert profile.draft_seconds(SkipMask.none(4), 20_000) == pytest.approx(profile.target_seconds(20_000))


def test_windows_round_trip_and_old_files_mean_full_attention(tmp_path):
    profile = windowed([8, None, 8, None])
    assert LatencyProfile.load(profile.save(tmp_path / "p.json")).attention_windows == (8, None, 8, None)
    data = profile.to_dict()
    del data["attention_windows"]
    old = LatencyProfile.from_dict(data)
    assert old.attention_windows == () and old.attention_seconds(10_000, 0) == old.attention_seconds(10_000, 1)


@pytest.mark.parametrize("windows, message", [([8, None], "2 entries"), ([8, 0, 8, 8], "integers >= 1"), ([8, "x", 8, 8], "integers >= 1")])
def test_bad_windows_are_refused(windows, message):
    with pytest.raises(LayersearchError, match=message):
        windowed([None] * 4, attention_windows=tuple(windows))
