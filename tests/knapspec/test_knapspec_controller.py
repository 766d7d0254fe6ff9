"""KnapSpecController: lossless while it re-selects, selections recorded; the CLI entry point."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from layersearch.common.errors import LayersearchError
from layersearch.knapspec import KnapSpecConfig
from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.profiling.profile import LatencyProfile
from layersearch.experiments.knapspec import knapspec_decoder
from layersearch.runtime.step import Controller, Selection
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.draft_policy import DraftPolicy
from layersearch.runtime.sampling import SamplingConfig
from layersearch.decoder.spec import SamplingSpec
from tests.capture import assert_path, captured

INFO = ModelInfo("tiny-llama", 4, 64, "fp")


def tiny_profile(info=INFO, slope=5e-5) -> LatencyProfile:
    """Attention grows with context (1:1 with the MLP at 20 tokens, 3:1 at 60), cheap verification."""
    return LatencyProfile(info, "cpu", "float32", "x", slope, 0.0, 1e-3, 2e-4, (1.0, 1.05, 1.1, 1.15, 1.2))


def prompt_for(seed: int, length: int = 12) -> torch.Tensor:
    return torch.randint(0, 128, (1, length), generator=torch.Generator().manual_seed(seed))


def recomputed_greedy(model, prompt, new):
    ids = prompt
    with torch.no_grad():
        for _ in range(new):
            ids = torch.cat([ids, model(ids).logits[:, -1:].argmax(-1)], dim=1)
    return ids[0, prompt.shape[1] :].tolist()


@pytest.mark.parametrize("decode_path, method, bound, alpha_window", [
    *[("eager", *case) for case in (("hidden", False, None), ("hidden", False, 16), ("hidden", True, 16), ("items", False, 16))],
    ("captured", "hidden", False, 16),
])
def test_dynamic_is_lossless_and_records_selections(tiny_llama, method, bound, alpha_window, decode_path):
    prompt = prompt_for(3)
    config = KnapSpecConfig(method=method, bound=bound, max_draft=6, tau=0.0)
    decoder = knapspec_decoder(
        tiny_llama, tiny_profile(), policy=DraftPolicy(6, 0.0), interval=3, window=5, alpha_window=alpha_window,
        config=config, compile=captured(decode_path),
    )
    result = decoder.generate(prompt, 40)
    assert list(result.token_ids) == recomputed_greedy(tiny_llama, prompt, 40)
    assert_path(result, decode_path)
    selections = result.stats.selections
    steps = [s["step"] for s in selections]
    assert steps[0] == 0 and steps == list(range(0, 3 * len(steps), 3))  # right after the prefill, then every 3
    assert len(steps) == -(-result.stats.target_forwards // 3)
    contexts = [s["context"] for s in selections]
    assert contexts[0] == 12 and contexts == sorted(contexts)
    for s in selections:
        assert {"step", "context", "mask", "gamma", "tpt", "alpha", "seconds"} <= set(s)
        assert s["gamma"] == 0 if s["mask"] == "A:- M:-" else 1 <= s["gamma"] <= 6
        assert s["seconds"] > 0 and 0 <= s["alpha"] <= 1
    json.dumps(result.stats.to_dict())  # selections are JSON-ready


def test_dynamic_uses_the_chosen_gamma_as_max_draft(tiny_llama):
    decoder = knapspec_decoder(tiny_llama, tiny_profile(), policy=DraftPolicy(8, 0.0), interval=100)
    result = decoder.generate(prompt_for(5), 30)
    (selection,) = result.stats.selections
    if selection["gamma"]:
        assert max(result.stats.draft_lengths) <= selection["gamma"]
    else:
        assert result.stats.drafted == 0


def test_dynamic_sampling_runs(tiny_llama):
    sampling = SamplingSpec(do_sample=True, temperature=0.8, top_p=0.95, seed=1)
    decoder = knapspec_decoder(tiny_llama, tiny_profile(), policy=DraftPolicy(4, 0.0), sampling=sampling, interval=4)
    result = decoder.generate(prompt_for(6), 20)
    assert result.stats.new_tokens == 20 and result.stats.selections


class Alternating(Controller):
    """A controller switching masks and draft caps every 2 steps, recording what it saw."""

    def __init__(self, masks):
        self.masks, self.seen, self.observed = masks, [], []

    def select(self, view):
        if view.step % 2:
            return None
        self.seen.append((view.step, view.position, view.sequence.shape[1], view.max_draft))
        n = len(self.seen)
        return Selection(self.masks[n % 4], 1 + n % 5, {"n": n})

    def observe(self, outcome):
        self.observed.append(outcome)


def test_controller_switches_masks_losslessly(tiny_llama, decode_path):
    """The controller point alone: alternating masks and draft lengths keeps greedy output exact."""
    masks = [SkipMask(4, (0, 1), ()), SkipMask.none(4), SkipMask(4, (), (2,)), SkipMask.everything(4)]
    controller = Alternating(masks)
    prompt = prompt_for(8)
    decoder = SpeculativeDecoder(tiny_llama, policy=DraftPolicy(4, 0.0), controller=controller, compile=captured(decode_path))
    result = decoder.generate(prompt, 36)
    assert list(result.token_ids) == recomputed_greedy(tiny_llama, prompt, 36)
    assert_path(result, decode_path)
    assert all(position + 1 == length for _, position, length, _ in controller.seen)
    assert [s["n"] for s in result.stats.selections] == list(range(1, len(controller.seen) + 1))
    assert controller.observed == list(result.stats.steps)
    # Each step ran with the mask chosen at the last even step and at most its cap.
    for outcome in result.stats.steps:
        n = outcome.step // 2 + 1
        assert outcome.mask == masks[n % 4] and outcome.drafted <= 1 + n % 5
    with pytest.raises(LayersearchError):
        SpeculativeDecoder(tiny_llama, SkipMask.none(4), controller=controller)


def knapsack_decoder(loaded, profile, reselect_every, policy):
    """The decoder of the spec's ``knapsack`` mask source (what ``generate --mask knapsack`` builds)."""
    from layersearch.decoder.sources import MASK_SOURCES, SourceInputs
    from layersearch.decoder.spec import MaskSourceSpec

    source = MaskSourceSpec("knapsack", reselect_every=reselect_every)
    controller = MASK_SOURCES["knapsack"].build(SourceInputs(loaded, source, policy, profile))
    return SpeculativeDecoder(loaded.model, lookahead=policy.lookahead(), **controller)


def test_knapsack_mask_source(tiny_llama, tmp_path, capsys):
    path = tiny_profile().save(tmp_path / "profile.json")
    loaded = SimpleNamespace(model=tiny_llama, tokenizer=None, info=INFO)
    decoder = knapsack_decoder(loaded, str(path), 5, DraftPolicy(4, 0.0))
    assert decoder.controller.interval == 5 and decoder.controller.profile == LatencyProfile.load(path)
    prompt = prompt_for(9)
    assert list(decoder.generate(prompt, 12).token_ids) == recomputed_greedy(tiny_llama, prompt, 12)
    assert capsys.readouterr().err == ""
    # No profile: a quick one is measured, and stderr says so.
    decoder = knapsack_decoder(loaded, None, 64, DraftPolicy(4, 0.0))
    assert "quick latency profile" in capsys.readouterr().err
    assert decoder.controller.profile.model == INFO and decoder.controller.interval == 64
    other = LatencyProfile(ModelInfo("x", 4, 64, "other"), "cpu", "float32", "x", 0.0, 1e-3, 1e-3, 1e-3, (1.0,))
    with pytest.raises(LayersearchError, match="fingerprint"):
        knapsack_decoder(loaded, str(other.save(tmp_path / "other.json")), 5, DraftPolicy())


@pytest.mark.embedded
def test_generate_cli_dynamic_knapsack(tmp_path, capsys, tiny_with_embedded_tokenizer):
    """``layersearch generate --mask knapsack`` end to end, on a tiny model saved with a real tokenizer."""
    from layersearch.cli import main
    from layersearch.models.loading import describe_model

    model, tokenizer, folder = tiny_with_embedded_tokenizer(seed=4)
    profile = tiny_profile(describe_model(model, str(folder))).save(tmp_path / "p.json")
    argv = ["generate", "--model", str(folder), "--mask", "knapsack", "--profile", str(profile),
            "--prompt", "The quick brown fox", "--max-new-tokens", "6", "--reselect-every", "2", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    ids = tokenizer("The quick brown fox", return_tensors="pt").input_ids
    assert out["token_ids"] == recomputed_greedy(model, ids, len(out["token_ids"]))
    assert out["stats"]["selections"] and out["stats"]["selections"][0]["step"] == 0


def test_sliding_window_models_are_refused_for_re_selection_in_one_line():
    from layersearch.common.errors import LayersearchError
    from layersearch.models.tiny import build_tiny_model

    model = build_tiny_model("mistral", num_layers=4, sliding_window=3, seed=0)
    with pytest.raises(LayersearchError, match="not supported on sliding-window models") as excinfo:
        knapspec_decoder(model, tiny_profile(), policy=DraftPolicy(4, 0.0))
    assert "\n" not in str(excinfo.value)


# ----- draft plans: full, int8 or skip per sub-layer -----------------------------------------------
def int8_profile(info=INFO) -> LatencyProfile:
    """The tiny profile with int8 timings: an int8 sub-layer costs 0.3 of a full one, the int8 head saves."""
    return LatencyProfile(info, "cpu", "float32", "x", 5e-5, 0.0, 1e-3, 2e-4, (1.0, 1.05, 1.1, 1.15, 1.2),
                          int8_attention_slope=1.5e-5, int8_attention_intercept=0.0, int8_mlp_seconds=3e-4,
                          int8_head_saving=1e-4)


def test_plan_controller_is_lossless_and_selects_plans(tiny_llama):
    prompt = prompt_for(11)
    decoder = knapspec_decoder(tiny_llama, int8_profile(), policy=DraftPolicy(6, 0.0), interval=3, window=5,
                               alpha_window=16, space="plans")
    assert decoder.controller.config.method == "plans"
    result = decoder.generate(prompt, 40)
    assert list(result.token_ids) == recomputed_greedy(tiny_llama, prompt, 40)
    selections = result.stats.selections
    assert selections and all({"mask", "int8", "int8_head", "gamma"} <= set(s) for s in selections)
    drafted = {str(outcome.mask.short_string()) for outcome in result.stats.steps if outcome.drafted}
    assert drafted <= {s["mask"] for s in selections}  # each draft ran a selected plan


def test_plan_controller_chooses_int8_where_it_is_cheaper(tiny_llama):
    """int8 twins cost 0.3 of the full sub-layers and barely move the states: the knapsack's pick runs them."""
    from layersearch.knapspec.controller import KnapSpecController
    from layersearch.knapspec.sublayers import window_from_prompt
    from layersearch.knapspec.select import choose_tpt

    config = KnapSpecConfig(method="plans", max_draft=6, tau=0.0, allow_plain=False, max_alpha_candidates=None)
    controller = KnapSpecController(tiny_llama, int8_profile(), config=config, space="plans")
    windows = [window_from_prompt(tiny_llama, prompt_for(12, 30)[0], 16)]
    scored, _ = controller.selector.candidates(windows, 30)
    assert any(c.mask.num_int8 for c in scored) and any(c.mask.int8_head for c in scored)
    choice, _ = choose_tpt(controller.profile, scored, 30, max_draft=6, allow_plain=False)
    assert choice.mask.num_int8 > 0 and choice.gamma >= 1
    # Where int8 costs as much as full precision, no int8 sub-layer is worth its (small) loss.
    dear = LatencyProfile(INFO, "cpu", "float32", "x", 5e-5, 0.0, 1e-3, 2e-4, (1.0, 1.05, 1.1, 1.15, 1.2),
                          int8_attention_slope=5e-5, int8_attention_intercept=0.0, int8_mlp_seconds=1e-3,
                          int8_head_saving=0.0)
    controller = KnapSpecController(tiny_llama, dear, config=config, space="plans")
    scored, _ = controller.selector.candidates(windows, 30)
    assert not any(c.mask.num_int8 or c.mask.int8_head for c in scored)


def test_plan_controller_bad_input_is_one_line(tiny_llama):
    from layersearch.knapspec.controller import KnapSpecController

    cases = [
        (dict(profile=tiny_profile(), space="plans"), "re-run `layersearch profile`"),  # no int8 timings
        (dict(profile=int8_profile(), space="masks"), "space must be one of skips, plans"),
        (dict(profile=int8_profile(), space="plans", config=KnapSpecConfig(method="items")), "does not fit"),
        (dict(profile=int8_profile(), config=KnapSpecConfig(method="plans")), "does not fit"),
    ]
    for kwargs, message in cases:
        with pytest.raises(LayersearchError, match=message.replace("`", ".")) as excinfo:
            KnapSpecController(tiny_llama, **kwargs)
        assert "\n" not in str(excinfo.value)
