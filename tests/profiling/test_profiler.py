"""measure_profile on a tiny random Llama: a valid profile, and the model left as it was."""

from __future__ import annotations

import math

import pytest
import torch
import transformers

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.profiling.profile import LatencyProfile
from layersearch.profiling.profiler import _sublayer_seconds, fit_line, measure_profile, quick_profile

CONTEXTS = (8, 32, 64)
MAX_VERIFY = 4


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    """A 4-layer random Llama small enough that one forward takes a few milliseconds."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
    )
    return transformers.AutoModelForCausalLM.from_config(cfg).eval()


@pytest.fixture(scope="module")
def info() -> ModelInfo:
    return ModelInfo("tiny-llama", 4, 64, "fp-tiny")


@pytest.fixture(scope="module")
def measured(model, info) -> tuple[LatencyProfile, list[str]]:
    """One profile measured with tiny contexts and repeats, and the progress messages it sent."""
    messages: list[str] = []
    profile = measure_profile(
        model, info, contexts=CONTEXTS, max_verify=MAX_VERIFY, repeats=2, progress=messages.append
    )
    return profile, messages


def test_profile_fields_are_valid(measured, info):
    profile, _ = measured
    assert profile.model == info
    assert profile.device.startswith("cpu: ") and profile.dtype == "float32"
    assert profile.torch_version == torch.__version__
    assert profile.contexts == CONTEXTS and profile.created
    assert profile.attention_slope >= 0 and math.isfinite(profile.attention_slope)
    for value in (profile.attention_intercept, profile.mlp_seconds, profile.base_seconds):
        assert 0 <= value < 1 and math.isfinite(value)
    assert profile.base_seconds > 0
    for n in CONTEXTS:
        assert profile.attention_seconds(n) > 0
        assert profile.target_seconds(n) > profile.base_seconds
    assert len(profile.verify_ratios) == MAX_VERIFY and profile.verify_ratios[0] == 1.0
    assert all(r > 0 and math.isfinite(r) for r in profile.verify_ratios)


def test_progress_reports_every_context(measured):
    _, messages = measured
    for n in CONTEXTS:
        assert any(message.startswith(f"context {n}:") for message in messages)


def test_json_round_trip(measured, info, tmp_path):
    profile, _ = measured
    path = profile.save(tmp_path / "profile.json")
    assert LatencyProfile.load(path, model=info) == profile


def test_model_is_left_unmodified(model, info):
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.inference_mode():
        before = model(input_ids=ids).logits
    measure_profile(model, info, contexts=(4,), max_verify=2, repeats=1)
    leftovers = [name for name, module in model.named_modules() if "forward" in module.__dict__]
    assert leftovers == []
    with torch.inference_mode():
        after = model(input_ids=ids).logits
    assert torch.equal(before, after)


def test_rejects_bad_arguments(model, info):
    with pytest.raises(LayersearchError, match="layers"):
        measure_profile(model, ModelInfo("x", 5, 64, "fp"), contexts=(4,))
    with pytest.raises(LayersearchError, match="positions"):
        measure_profile(model, info, contexts=(2048,))
    with pytest.raises(LayersearchError, match="contexts"):
        measure_profile(model, info, contexts=())
    with pytest.raises(LayersearchError, match="repeats"):
        measure_profile(model, info, contexts=(4,), repeats=0)


def test_sublayer_split_reproduces_the_full_forward():
    # L = 2: skipping attention saves 4 s, skipping MLPs 2 s, skipping all 7 s; the 1 s left
    # (norms, residuals, layer calls) is shared equally, so base + L*(attn + mlp) == full.
    times = {"full": 10.0, "no_attention": 6.0, "no_mlp": 8.0, "nothing": 3.0}
    attention, mlp = _sublayer_seconds(times, num_layers=2)
    assert (attention, mlp) == (2.25, 1.25)
    assert times["nothing"] + 2 * (attention + mlp) == times["full"]
    noisy = {"full": 10.0, "no_attention": 10.5, "no_mlp": 8.0, "nothing": 7.0}
    assert min(_sublayer_seconds(noisy, num_layers=2)) >= 0


def test_fit_line():
    assert fit_line([1, 2, 3], [3, 5, 7]) == pytest.approx((2.0, 1.0))
    assert fit_line([1, 2, 3], [5, 4, 3]) == (0.0, 4.0)  # falling: flat at the mean
    slope, intercept = fit_line([10, 20], [1, 3])  # would cross below zero: through the origin
    assert intercept == 0.0 and slope == pytest.approx((10 + 60) / (100 + 400))
    assert fit_line([64], [2.0]) == (0.0, 2.0)


@pytest.mark.parametrize("family, windows", [("mistral", (4, 4, 4, 4)), ("gemma2", (4, None, 4, None))])
def test_sliding_window_models_are_profiled_with_their_windows(family, windows):
    from layersearch.models.loading import describe_model
    from layersearch.models.tiny import build_tiny_model

    model = build_tiny_model(family, num_layers=4, sliding_window=4, seed=0)
    # Each shorter context needs a fresh prefill: sliding layers cannot be cropped back to it.
    profile = measure_profile(model, describe_model(model, family), contexts=(8, 32), max_verify=2, repeats=1)
    assert profile.attention_windows == windows
    sliding = [i for i, w in enumerate(windows) if w is not None]
    assert profile.attention_seconds(10_000, sliding[0]) == profile.attention_seconds(3, sliding[0])
    if None in windows:
        full = windows.index(None)
        assert profile.attention_seconds(10_000, full) >= profile.attention_seconds(3, full)


def test_full_attention_profiles_record_no_windows(measured):
    assert measured[0].attention_windows == ()


def test_quick_profile_keeps_the_contexts_that_fit(model, info):
    old = model.config.max_position_embeddings
    model.config.max_position_embeddings = 70
    try:
        # 64 + 4 verified tokens fit in 70 positions, 128 does not; the duplicate 8 counts once.
        profile = quick_profile(model, info, contexts=(128, 8, 64, 8), max_verify=4, repeats=1)
        assert profile.contexts == (8, 64)
        # Nothing fits: the longest context that does is measured instead.
        assert quick_profile(model, info, contexts=(128,), max_verify=4, repeats=1).contexts == (66,)
    finally:
        model.config.max_position_embeddings = old


def test_validation_compares_fresh_timings_with_the_profile(model, info):
    from layersearch.masks.mask import SkipMask
    from layersearch.profiling.profiler import validate_profile

    profile = measure_profile(model, info, contexts=CONTEXTS, max_verify=8, repeats=2)
    masks = [SkipMask.none(4), SkipMask.uniform(4, 0.5)]
    before = [p.clone() for p in model.parameters()]
    rows = validate_profile(model, profile, masks, contexts=(8, 32), verify_lengths=(1, 8), repeats=2)
    assert len(rows) == 2 * (2 + 2)  # per context: one row per mask, one per verify length
    by = {(r["kind"], r["what"], r["context"]): r for r in rows}
    half = by[("draft forward", masks[1].short_string(), 32)]
    assert half["predicted"] == profile.draft_seconds(masks[1], 32)
    assert by[("draft forward", "full (target)", 8)]["predicted"] == pytest.approx(profile.target_seconds(8))
    assert by[("verify", "8 tokens", 32)]["predicted"] == profile.target_seconds(32) * profile.verify_ratio(8)
    assert all(r["measured"] > 0 and r["ratio"] == r["measured"] / r["predicted"] for r in rows)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # masks left nothing behind


# ----- provenance, captured measurement -----------------------------------------------------------
def test_profile_names_device_versions_commit_and_architecture(measured):
    profile, _ = measured
    assert profile.device.startswith("cpu: ") and profile.predicts_for == profile.device
    assert profile.transformers_version == transformers.__version__ and profile.commit
    assert profile.compile_mode == "eager" and profile.random_weights is False
    assert profile.step_overhead_seconds is not None and profile.step_overhead_seconds >= 0
    assert profile.architecture == {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 64, "intermediate_size": 128,
                                    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 128,
                                    "dtype": "float32"}


def test_captured_profile_compiles_each_setting_and_length_once(model, info):
    """Dynamo's eager backend stands in for inductor: the same full-graph capture over a static cache."""
    from layersearch.runtime.backend import compile_with
    from layersearch.runtime.backend import dynamo_compiler

    built = []
    eager = dynamo_compiler("eager")

    def counting(device):
        built.append(device)
        return eager(device)

    setattr(counting, "backend", "eager")
    compile_with(model, counting)
    messages: list[str] = []
    profile = measure_profile(model, info, contexts=(8, 32), max_verify=3, repeats=1, compile_mode="captured:eager",
                              progress=messages.append)
    # eight settings (full, no attention, no MLP, nothing, and their int8 twins' four) + verify 2 and 3
    # (verify 1 is the full setting), then the loop's plain decode for its per-step overhead (one compiled step)
    assert 10 <= len(built) <= 12
    assert profile.compile_mode == "captured:eager" and profile.has_int8  # int8 plans run captured too
    assert len(profile.verify_ratios) == 3 and profile.verify_ratios[0] == 1.0
    assert profile.target_seconds(8) > 0 and any("captured" in m for m in messages)
    assert LatencyProfile.from_dict(profile.to_dict()) == profile
    with pytest.raises(LayersearchError, match="compile_mode"):
        measure_profile(model, info, contexts=(8,), max_verify=2, repeats=1, compile_mode="captured:tvm-ish")


def test_a_captured_profile_is_validated_captured(model, info):
    from layersearch.profiling.profiler import validate_profile
    from layersearch.runtime.backend import compile_with
    from layersearch.runtime.backend import dynamo_compiler

    compile_with(model, dynamo_compiler("eager"))
    profile = measure_profile(model, info, contexts=(8,), max_verify=2, repeats=1, compile_mode="captured:eager")
    messages: list[str] = []
    rows = validate_profile(model, profile, [SkipMask.none(4), SkipMask.uniform(4, 0.5)], verify_lengths=(1, 2), repeats=1,
                            progress=messages.append)
    assert [r["kind"] for r in rows] == ["draft forward", "draft forward", "verify", "verify"]
    assert all(r["measured"] > 0 and r["predicted"] > 0 for r in rows) and "captured, eager" in messages[-1]
