"""Plug-in points of the decode loop: every drafter, lookahead rule, verifier and controller
keeps greedy output identical to plain ``generate``; each one's own behaviour."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.control import FixedMask
from layersearch.runtime.step import Controller, Drafter, Selection, StepOutcome
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.drafters import (
    DRAFTERS,
    HybridDrafter,
    LayerSkipDrafter,
    ModelDrafter,
    PromptLookupDrafter,
    make_drafter,
    lookup_continuation,
)
from layersearch.runtime import MAX_DRAFT, DraftPolicy
from layersearch.runtime.lookahead import ConfidenceLookahead, HeuristicLookahead, StaticLookahead
from layersearch.runtime.registry import LOOKAHEAD_NAMES, lookahead_named
from layersearch.runtime.sampling import SamplingConfig
from layersearch.runtime.verification import ChainVerifier
from tests.capture import assert_path, captured

NEW = 32


def plain_generate(model, prompt, new=NEW):
    attention = torch.ones_like(prompt)
    out = model.generate(prompt, attention_mask=attention, max_new_tokens=new, min_new_tokens=new, do_sample=False)
    return out[0, prompt.shape[1] :].tolist()


def repetitive_prompt(seed: int) -> torch.Tensor:
    """A prompt with repeated n-grams, so prompt lookup finds matches."""
    g = torch.Generator().manual_seed(seed)
    chunk = torch.randint(0, 128, (5,), generator=g)
    noise = torch.randint(0, 128, (3,), generator=g)
    return torch.cat([chunk, noise, chunk, noise[:1], chunk]).unsqueeze(0)


@pytest.fixture(scope="module")
def draft_model():
    """A 2-layer random Llama with the tiny models' vocabulary: an independent drafter."""
    model = build_tiny_model("llama", num_layers=2, seed=11)
    model.generation_config.eos_token_id = None
    return model


def all_drafters(draft_model):
    return {
        "layer-skip": LayerSkipDrafter(),
        "prompt-lookup": PromptLookupDrafter(),
        "hybrid": HybridDrafter(),
        "model": ModelDrafter(draft_model),
    }


class EveryStepController(Controller):
    """Switches between two masks every step (stress for the controller point)."""

    wants_prompt_hidden = True

    def __init__(self, a: SkipMask, b: SkipMask):
        self.masks = (a, b)
        self.hidden_shapes = []

    def select(self, view):
        if view.step == 0:
            self.hidden_shapes.append(tuple(view.prompt_hidden.shape))
        return Selection(self.masks[view.step % 2])

    def observe(self, outcome):
        pass


LOOKAHEADS = [
    StaticLookahead(4),
    ConfidenceLookahead(6, 0.05),
    lookahead_named("adaptive", DraftPolicy(5, 0.02)),
    HeuristicLookahead(2, ceiling=7),
    lookahead_named("roc", DraftPolicy(6, 0.3)),
]


DRAFTER_NAMES = ["layer-skip", "prompt-lookup", "hybrid", "model"]
# Captured: every drafter under the static and the confidence rule (the compiled shapes are the
# draft lengths; test_captured.py runs the other rules compiled by inductor).
CAPTURED_CASES = [("captured", 0, lookahead, name) for lookahead in LOOKAHEADS[:2] for name in DRAFTER_NAMES]


@pytest.mark.parametrize("decode_path, seed, lookahead, drafter_name", [
    *[("eager", seed, lookahead, name) for seed in (0, 1) for lookahead in LOOKAHEADS for name in DRAFTER_NAMES],
    *CAPTURED_CASES,
], ids=lambda v: type(v).__name__ if hasattr(v, "max_draft") else str(v))
def test_every_drafter_and_lookahead_is_lossless(tiny_llama, draft_model, drafter_name, lookahead, seed, decode_path):
    prompt = repetitive_prompt(seed)
    drafter = all_drafters(draft_model)[drafter_name]
    decoder = SpeculativeDecoder(tiny_llama, SkipMask.uniform(4, 0.5), drafter=drafter, lookahead=lookahead,
                                 compile=captured(decode_path))
    result = decoder.generate(prompt, NEW)
    assert list(result.token_ids) == plain_generate(tiny_llama, prompt)
    assert_path(result, decode_path)
    stats = result.stats
    assert sum(stats.accept_lengths) == NEW - 1  # every token but the prefill's came from a step
    assert stats.drafted == sum(s.drafted for s in stats.steps) and stats.target_forwards == len(stats.steps)
    assert {s.drafter for s in stats.steps if s.drafted} <= {drafter_name, "layer-skip", "prompt-lookup"}


@pytest.mark.parametrize("drafter_name", ["layer-skip", "hybrid", "model"])
def test_controller_switching_every_step_is_lossless(tiny_llama, draft_model, drafter_name, decode_path):
    controller = EveryStepController(SkipMask(4, (1, 2), ()), SkipMask(4, (), (0, 3)))
    drafter = all_drafters(draft_model)[drafter_name]
    prompt = repetitive_prompt(3)
    result = SpeculativeDecoder(tiny_llama, drafter=drafter, controller=controller, lookahead=StaticLookahead(3),
                                compile=captured(decode_path)).generate(prompt, NEW)
    assert list(result.token_ids) == plain_generate(tiny_llama, prompt)
    assert_path(result, decode_path)
    assert controller.hidden_shapes == [(prompt.shape[1], tiny_llama.config.hidden_size)]
    masks = [s.mask for s in result.stats.steps]
    assert masks[:4] == [controller.masks[0], controller.masks[1]] * 2


def test_explicit_verifier_and_fixed_controller_match_the_shorthand(tiny_llama):
    prompt = repetitive_prompt(4)
    mask = SkipMask(4, (0, 2), (1,))
    short = SpeculativeDecoder(tiny_llama, mask).generate(prompt, NEW)
    explicit = SpeculativeDecoder(
        tiny_llama, controller=FixedMask(mask), verifier=ChainVerifier(), drafter=LayerSkipDrafter()
    ).generate(prompt, NEW)
    assert short.token_ids == explicit.token_ids
    assert short.stats.draft_lengths == explicit.stats.draft_lengths


def test_prompt_lookup_drafts_what_followed_the_latest_match(tiny_llama):
    seq = torch.tensor([1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3])
    assert lookup_continuation(seq, 4) == (7, 8, 5, 1)  # latest earlier "1 2 3" is at 4..6
    assert lookup_continuation(seq, 4, max_ngram=3, min_ngram=3) == (7, 8, 5, 1)
    assert lookup_continuation(torch.tensor([4, 5, 6]), 3) == ()
    assert lookup_continuation(torch.tensor([4, 5, 4]), 3) == (5, 4)  # 1-gram fallback
    # Spend no forward: a lookup-only run on a prompt with repetition drafts with no draft forwards.
    result = SpeculativeDecoder(tiny_llama, drafter=PromptLookupDrafter()).generate(repetitive_prompt(0), NEW)
    assert result.stats.draft_forwards == 0 and result.stats.drafted > 0
    with pytest.raises(LayersearchError):
        PromptLookupDrafter(max_ngram=1, min_ngram=2)
    # Its own cap holds below the lookahead's.
    capped = SpeculativeDecoder(tiny_llama, drafter=PromptLookupDrafter(max_draft=2), lookahead=StaticLookahead(8))
    assert max(capped.generate(repetitive_prompt(0), NEW).stats.draft_lengths) <= 2


class DuckDrafter:
    """Has a drafter's methods but not its base: the capabilities the loop reads are undeclared."""

    name = "duck"

    def begin(self, prompt):
        pass

    def propose(self, request):
        return PromptLookupDrafter().propose(request)

    def observe(self, outcome):
        pass


class DuckVerifier:
    name = "duck"

    def verify(self, request, proposal):
        return ChainVerifier().verify(request, proposal)


def test_a_plug_in_must_subclass_its_base(tiny_llama):
    for given, point in ((dict(drafter=DuckDrafter()), "drafter"), (dict(verifier=DuckVerifier()), "verifier"),
                         (dict(controller=object()), "controller"), (dict(lookahead=object()), "lookahead")):
        with pytest.raises(LayersearchError, match=f"{point} must subclass layersearch.runtime.step"):
            SpeculativeDecoder(tiny_llama, **given)
    # The base's defaults are all a plug-in needs beyond its one method.
    class Lookup(Drafter):
        name = "lookup"

        def propose(self, request):
            return PromptLookupDrafter().propose(request)

    prompt = repetitive_prompt(0)
    result = SpeculativeDecoder(tiny_llama, drafter=Lookup()).generate(prompt, NEW)
    assert list(result.token_ids) == plain_generate(tiny_llama, prompt) and result.stats.drafted > 0


def test_hybrid_uses_lookup_when_it_matches_and_layer_skip_otherwise(tiny_llama):
    drafter = HybridDrafter(adaptive=False)
    result = SpeculativeDecoder(tiny_llama, SkipMask.uniform(4, 0.5), drafter=drafter, lookahead=StaticLookahead(3)).generate(
        repetitive_prompt(2), NEW
    )
    counts = result.stats.drafter_counts()
    assert counts.get("prompt-lookup", 0) > 0 and counts.get("layer-skip", 0) > 0


def test_steps_record_the_lookahead_in_force(tiny_llama):
    result = SpeculativeDecoder(tiny_llama, SkipMask.uniform(4, 0.5), lookahead=HeuristicLookahead(3, ceiling=6)).generate(
        repetitive_prompt(1), NEW
    )
    caps = [int(s.lookahead.split(":")[1]) for s in result.stats.steps]
    assert all(s.lookahead.startswith("heuristic:") for s in result.stats.steps) and caps[0] == 3
    assert all(s.drafted <= cap for s, cap in zip(result.stats.steps, caps))


def test_adaptive_hybrid_keeps_to_the_arm_that_pays():
    from layersearch.runtime.drafters.hybrid import PLAIN, ArmRates

    rates = ArmRates(("prompt-lookup", "layer-skip", PLAIN), warmup=2, explore_every=10)
    speed = {"prompt-lookup": 30.0, "layer-skip": 8.0, PLAIN: 12.0}  # tokens per second of each arm
    chosen = []
    for _ in range(60):
        arm = rates.choose(("layer-skip", PLAIN))  # no n-gram matched: lookup is not available
        chosen.append(arm)
        rates.record(arm, 3, 3 / speed[arm])
    assert chosen[:4] == ["layer-skip", "layer-skip", PLAIN, PLAIN]  # warm-up: each arm twice
    later = chosen[10:]
    assert later.count(PLAIN) >= len(later) - 6 and "layer-skip" in later  # plain wins, layer skip still explored
    assert rates.choose(("prompt-lookup", "layer-skip", PLAIN)) == "prompt-lookup"  # untried arm first
    rates.record("prompt-lookup", 3, 0.1)
    rates.record("prompt-lookup", 3, 0.1)
    assert rates.choose(("prompt-lookup", "layer-skip", PLAIN)) == "prompt-lookup"


def test_adaptive_hybrid_credits_steps_to_arms_and_stays_lossless(tiny_llama, decode_path):
    drafter = HybridDrafter()
    prompt = repetitive_prompt(2)
    result = SpeculativeDecoder(tiny_llama, SkipMask.uniform(4, 0.5), drafter=drafter, lookahead=StaticLookahead(3),
                                compile=captured(decode_path)).generate(prompt, NEW)
    assert list(result.token_ids) == plain_generate(tiny_llama, prompt)
    assert_path(result, decode_path)
    counts = drafter.rates.counts
    assert sum(counts.values()) == len(result.stats.steps)
    assert counts["layer-skip"] >= 2 and counts["plain"] >= 2  # every arm was tried


def test_heuristic_schedule_is_hfs():
    rule = HeuristicLookahead(4, ceiling=9)

    def outcome(drafted, accepted):
        return StepOutcome(0, 0, drafted, accepted, accepted + 1, "x", None)

    assert rule.update(outcome(4, 4)).max_draft == 6  # all accepted: +2
    assert rule.update(outcome(4, 3)).max_draft == 3  # otherwise: -1
    assert HeuristicLookahead(1).update(outcome(1, 0)).max_draft == 1  # never below 1
    assert HeuristicLookahead(8, ceiling=9).update(outcome(8, 8)).max_draft == 9
    assert rule.update(outcome(0, 0)) == rule  # nothing drafted: no evidence


def test_lookahead_caps_and_names(tiny_llama):
    prompt = repetitive_prompt(5)
    result = SpeculativeDecoder(tiny_llama, SkipMask.uniform(4, 0.5), lookahead=StaticLookahead(3)).generate(prompt, NEW)
    assert max(result.stats.draft_lengths) == 3
    assert all(d == 3 for d in result.stats.draft_lengths[:-2])  # static: always the cap (room allowing)
    assert {type(DraftPolicy().lookahead(n)).__name__ for n in LOOKAHEAD_NAMES} == {
        "StaticLookahead", "ConfidenceLookahead", "AdaptiveLookahead", "HeuristicLookahead", "ROCLookahead"
    }
    with pytest.raises(LayersearchError, match="unknown lookahead"):
        DraftPolicy().lookahead("sometimes")
    with pytest.raises(LayersearchError):
        StaticLookahead(0)
    assert set(DRAFTERS) == {"layer-skip", "prompt-lookup", "hybrid"}
    with pytest.raises(LayersearchError, match="unknown drafter"):
        make_drafter("oracle")


def test_every_registered_rule_is_configured_by_its_settings():
    for name in LOOKAHEAD_NAMES:
        assert DraftPolicy().lookahead(name).max_draft == MAX_DRAFT  # one default for every rule
        assert lookahead_named(name, DraftPolicy(max_draft=5, threshold=0.3)).max_draft == 5
    assert lookahead_named("confidence", DraftPolicy(5, 0.3)).threshold == 0.3
    assert lookahead_named("adaptive", DraftPolicy(5, 0.3)).state.value == 0.3
    assert StaticLookahead(5).with_max_draft(2) == StaticLookahead(2)
    with pytest.raises(LayersearchError, match="max_draft"):
        lookahead_named("static", DraftPolicy(max_draft=0))


def test_model_drafter_keeps_its_cache_across_steps(tiny_llama, draft_model):
    drafter = ModelDrafter(draft_model)
    result = SpeculativeDecoder(tiny_llama, drafter=drafter, lookahead=StaticLookahead(4)).generate(repetitive_prompt(1), NEW)
    # The drafter's cache holds the emitted sequence (minus rejected drafts), never re-read from scratch.
    assert result.stats.drafted > 0 and len(drafter._ids) >= 13 + NEW - 5


def test_model_drafter_with_another_vocabulary_is_refused(tiny_llama):
    other = build_tiny_model("llama", num_layers=1, vocab_size=64, seed=2)
    with pytest.raises(LayersearchError, match="vocabulary"):
        SpeculativeDecoder(tiny_llama, drafter=ModelDrafter(other))


def test_stats_json_has_per_step_records(tiny_llama):
    result = SpeculativeDecoder(tiny_llama, SkipMask.uniform(4, 0.5), drafter=HybridDrafter()).generate(repetitive_prompt(0), 20)
    data = result.stats.to_dict()
    assert data["accept_lengths"] == [s.emitted for s in result.stats.steps]
    assert sum(data["drafters"].values()) == len(result.stats.steps)
    records = result.stats.step_records()
    assert records[0]["step"] == 0 and {"drafted", "accepted", "drafter", "mask", "lookahead"} <= set(records[0])
    assert records[0]["lookahead"] == "confidence:8"


# ----- sampling: deterministic (point-mass) drafts and an independent model stay exact -----

def test_point_mass_and_model_drafts_follow_the_target_distribution(exact_three_token_law):
    """Tokens 2 and 3 come from draft + verify: chi-square of (t1, t2, t3) against the exact law."""
    from scipy.stats import chisquare

    target = build_tiny_model("llama", num_layers=2, vocab_size=6, seed=21)
    target.generation_config.eos_token_id = None
    drafter_model = build_tiny_model("llama", num_layers=1, vocab_size=6, seed=22)
    prompt = [1, 2, 1, 2]
    exact = exact_three_token_law(target, prompt)
    runs = 1500
    for drafter in (PromptLookupDrafter(min_ngram=1), ModelDrafter(drafter_model)):
        observed = np.zeros(216)
        drafted = 0
        for seed in range(runs):
            sampling = SamplingConfig(temperature=1.0, seed=seed)
            decoder = SpeculativeDecoder(target, drafter=drafter, lookahead=StaticLookahead(2), sampling=sampling)
            result = decoder.generate(prompt, 3)
            a, b, c = result.token_ids
            observed[a * 36 + b * 6 + c] += 1
            drafted += result.stats.drafted
        assert drafted > runs // 5, type(drafter).__name__  # the draft really took part
        keep = exact * runs >= 5
        expected = np.append(exact[keep], exact[~keep].sum()) * runs
        counts = np.append(observed[keep], observed[~keep].sum())
        expected = expected * counts.sum() / expected.sum()  # float32 softmax: rescale to the exact total
        assert chisquare(counts, expected).pvalue > 1e-3, type(drafter).__name__


class HiddenRecorder(LayerSkipDrafter):
    """A layer-skip drafter that asks for verifier hidden states and keeps them."""

    hidden_layers = (0, 2)

    def __init__(self, branching=None):
        super().__init__(branching)
        self.received = []

    def observe_hidden(self, states):
        self.received.append(states.clone())


@pytest.mark.parametrize("tree", [False, True])
def test_verifier_hidden_states_reach_the_drafter(tiny_llama, tree, decode_path):
    """After the prefill and every verification the drafter gets the target's layer outputs at the
    input whose output gave the newest token: the same as a plain forward over the final text."""
    from layersearch.runtime.tree import TopKBranching, TreeVerifier

    prompt = repetitive_prompt(6)
    drafter = HiddenRecorder(TopKBranching(levels=((1.0, 4),)) if tree else None)
    verifier = TreeVerifier() if tree else ChainVerifier()
    result = SpeculativeDecoder(tiny_llama, SkipMask.uniform(4, 0.5), drafter=drafter, verifier=verifier,
                                lookahead=StaticLookahead(3), compile=captured(decode_path)).generate(prompt, NEW)
    assert list(result.token_ids) == plain_generate(tiny_llama, prompt)
    assert_path(result, decode_path, "tree" if tree else "hidden states")  # the tree blocks first
    full = torch.cat([prompt[0], torch.tensor(result.token_ids)])
    with torch.no_grad():
        states = tiny_llama(full[None], output_hidden_states=True).hidden_states
    expected = torch.stack([states[1][0], states[3][0]], dim=1)  # [n, 2, d]: outputs of layers 0 and 2
    # The newest token after the prefill and after each step was produced at input position len - 2.
    lengths = [prompt.shape[1] + 1]
    for step in result.stats.steps:
        lengths.append(lengths[-1] + step.emitted)
    assert len(drafter.received) == len(lengths)
    for got, length in zip(drafter.received, lengths):
        torch.testing.assert_close(got, expected[length - 2], rtol=1e-4, atol=1e-4)


def test_a_draft_models_forwards_count_as_model_time(tiny_llama, draft_model, monkeypatch):
    """The loop's forward clock times the draft model's forwards too, so bookkeeping (time
    outside model forwards) does not absorb them."""
    from layersearch.runtime import timing

    entered = []
    region = timing.RegionTimer.region

    def counted(self):
        entered.append(1)
        return region(self)

    monkeypatch.setattr(timing.RegionTimer, "region", counted)
    result = SpeculativeDecoder(tiny_llama, drafter=ModelDrafter(draft_model), lookahead=StaticLookahead(3)).generate(
        repetitive_prompt(1), 12)
    draft_forwards = sum(s.draft_forwards for s in result.stats.steps)
    assert draft_forwards > 0
    assert len(entered) >= result.stats.target_forwards + draft_forwards
