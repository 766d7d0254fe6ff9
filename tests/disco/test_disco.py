"""DISCO on tiny models: teacher-forced rows, the classifier, the replay, the lossless
lookahead (greedy and sampling), the file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from layersearch.disco import (
    Classifier, Costs, DiscoFile, DiscoLookahead, NUM_FEATURES, PerplexityLookahead, RocConfidenceLookahead, Rows,
    collect, f1, features, prompt_rows, replay, roc_threshold, train, tune,
)
from layersearch.disco.tune import disco_rule, static_rule
from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.lookahead import StaticLookahead
from layersearch.runtime.sampling import SamplingConfig
from tests.capture import assert_path, captured

MASK = SkipMask(4, attention=(1,), mlp=(3,))  # mixed acceptance on these prompts
# Skips only the last layer's sub-layers: the draft's keys and values equal the target's, so
# teacher forcing sees exactly what the decoder's draft sees (other masks: an approximation).
EXACT = SkipMask(4, attention=(3,), mlp=(3,))
PROMPTS = [[5, 9, 3, 7, 1, 4], [8, 2, 6, 6, 1], [3, 3, 9, 12, 40, 7, 2]]
INFO = ModelInfo("tiny", 4, 64, "abc123")


def plain(model, prompt, new):
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new, do_sample=False)
    return out[0, len(prompt):].tolist()


def random_classifier(seed=0, hidden=8) -> Classifier:
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(hidden, NUM_FEATURES, generator=g)
    return Classifier(
        (0.0,) * NUM_FEATURES, (0.3,) * NUM_FEATURES, tuple(map(tuple, w1.tolist())), (0.0,) * hidden,
        tuple(torch.randn(hidden, generator=g).tolist()), 0.0,
    )


# ----- features and labels ----------------------------------------------------------------------
def test_features_are_sorted_top_k_entropy_and_log_position():
    probs = torch.softmax(torch.randn(3, 50), -1)
    x = features(probs, torch.tensor([1, 2, 10]))
    assert x.shape == (3, NUM_FEATURES)
    assert torch.allclose(x[:, :10], probs.sort(-1, descending=True).values[:, :10])
    assert torch.allclose(x[:, 10], -(probs * probs.log()).sum(-1), atol=1e-5)
    assert torch.allclose(x[:, 11], torch.log1p(torch.tensor([1.0, 2.0, 10.0])))


def test_rows_are_the_masked_forward_after_the_target_prompt_cache(tiny_llama):
    """Row j-1: the masked model over t_0..t_{j-1} after the target's prompt cache predicts t_j."""
    from layersearch.models.skipping import skipping
    from layersearch.runtime.cache import new_cache
    from layersearch.runtime.forward import forward_tokens

    prompt = PROMPTS[0]
    rows = prompt_rows(tiny_llama, MASK, prompt, 12)
    target = plain(tiny_llama, prompt, 12)
    assert len(rows) == 11 and list(rows.position) == list(range(1, 12))
    for j in range(1, 12):
        with torch.no_grad():
            cache = new_cache(tiny_llama)
            forward_tokens(tiny_llama, prompt, 0, cache)
            with skipping(tiny_llama, MASK):
                logits = forward_tokens(tiny_llama, target[:j], len(prompt), cache)[-1]
        assert bool(rows.label[j - 1]) == (int(logits.argmax()) == target[j])
        assert rows.x[j - 1, 0] == pytest.approx(float(torch.softmax(logits, -1).max()), abs=1e-5)
    assert 0 < rows.label.mean() < 1 and (rows.tv >= 0).all() and (rows.tv <= 1).all()


def test_rows_label_what_the_decoders_one_token_drafts_get(tiny_llama):
    """With one-token drafts, the step starting at position j is accepted iff row j is labelled so."""
    rows = prompt_rows(tiny_llama, EXACT, PROMPTS[0], 24)
    stats = SpeculativeDecoder(tiny_llama, EXACT, lookahead=StaticLookahead(1)).generate(PROMPTS[0], 24).stats
    start = 1
    for step in stats.steps:
        if step.drafted:
            assert bool(rows.label[start - 1]) == bool(step.accepted), start
        start += step.emitted
    assert 0 < rows.label.mean() < 1 and rows.tv[~rows.label].min() > 0


def test_the_empty_mask_is_always_accepted_with_zero_distance(tiny_llama):
    rows = prompt_rows(tiny_llama, SkipMask.none(4), PROMPTS[1], 10)
    assert rows.label.all() and np.allclose(rows.tv, 0, atol=1e-5)


def test_rows_file_round_trip_and_bad_file(tmp_path, tiny_llama):
    rows = collect(tiny_llama, MASK, PROMPTS[:2], 8)
    assert set(np.unique(rows.prompt)) == {0, 1}
    back = Rows.load(rows.save(tmp_path / "rows.npz"))
    assert np.array_equal(back.x, rows.x) and np.array_equal(back.label, rows.label)
    (tmp_path / "bad.npz").write_text("nope")
    with pytest.raises(LayersearchError, match="not a DISCO rows file"):
        Rows.load(tmp_path / "bad.npz")


# ----- classifier ---------------------------------------------------------------------------------
def synthetic(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.random((n, NUM_FEATURES)).astype(np.float32)
    label = x[:, 0] + 0.5 * x[:, 10] > 0.75  # separable by a hyperplane
    tv = np.where(label, 0.1, 0.9).astype(np.float32)
    return Rows(x, label, tv, np.arange(n) // 20, np.arange(n) % 20 + 1)


@pytest.mark.parametrize("loss", ["ce", "tv"])
def test_training_converges_on_a_separable_set(loss):
    classifier, report = train(synthetic(600, 0), synthetic(200, 1), loss=loss, epochs=300)
    test = synthetic(400, 2)
    predicted = classifier.scores(test.x).numpy() >= 0.5
    assert f1(predicted, test.label) > 0.93
    assert report.epochs > 50  # it improved well past the start
    assert Classifier.from_dict(json.loads(json.dumps(classifier.to_dict()))) == classifier


def test_f1_and_bad_weights():
    assert f1(np.array([1, 1, 0, 0]), np.array([1, 0, 1, 0])) == pytest.approx(0.5)
    with pytest.raises(LayersearchError, match="shapes"):
        Classifier.from_dict({**random_classifier().to_dict(), "w2": [1.0]})


# ----- the lookahead is lossless ------------------------------------------------------------------
def test_disco_greedy_equals_plain_and_varies_the_draft_length(tiny_llama, decode_path):
    classifier = random_classifier()
    for prompt in PROMPTS:
        rows = prompt_rows(tiny_llama, MASK, prompt, 30)
        tau = float(np.median(classifier.scores(rows.x).numpy()))  # some positions on each side
        decoder = SpeculativeDecoder(tiny_llama, MASK, lookahead=DiscoLookahead(classifier, tau, 6), compile=captured(decode_path))
        result = decoder.generate(prompt, 30)
        assert list(result.token_ids) == plain(tiny_llama, prompt, 30)
        assert_path(result, decode_path)
        lengths = set(result.stats.draft_lengths)
        assert len(lengths) > 1, lengths


@pytest.mark.parametrize("rule", [RocConfidenceLookahead(6), PerplexityLookahead(6, 1.5)])
def test_baseline_rules_are_lossless(tiny_llama, rule):
    result = SpeculativeDecoder(tiny_llama, MASK, lookahead=rule).generate(PROMPTS[2], 30)
    assert list(result.token_ids) == plain(tiny_llama, PROMPTS[2], 30)


def test_disco_sampling_follows_the_target_distribution(exact_three_token_law):
    from scipy.stats import chisquare

    target = build_tiny_model("llama", num_layers=2, vocab_size=6, seed=21)
    target.generation_config.eos_token_id = None
    prompt = [1, 2, 1, 2]
    exact = exact_three_token_law(target, prompt)
    mask = SkipMask(2, attention=(1,), mlp=(1,))
    classifier = random_classifier(3)
    # tau at the median score of the first draft position over the 6 possible first tokens,
    # so some drafts stop at once and others go on.
    from layersearch.models.skipping import skipping

    with torch.no_grad(), skipping(target, mask):
        first = torch.softmax(target(torch.tensor([prompt + [a] for a in range(6)])).logits[:, -1], -1)  # [6, 6]
    rule = DiscoLookahead(classifier, float(classifier.scores(features(first, torch.ones(6))).median()), 2)
    runs, observed, drafted, stopped = 1500, np.zeros(216), 0, 0
    for seed in range(runs):
        decoder = SpeculativeDecoder(target, mask, lookahead=rule, sampling=SamplingConfig(temperature=1.0, seed=seed))
        result = decoder.generate(prompt, 3)
        a, b, c = result.token_ids
        observed[a * 36 + b * 6 + c] += 1
        drafted += result.stats.drafted
        stopped += result.stats.draft_forwards - result.stats.drafted
    assert drafted > runs // 5 and stopped > runs // 10  # it drafted, and it stopped drafts too
    keep = exact * runs >= 5
    expected = np.append(exact[keep], exact[~keep].sum()) * runs
    counts = np.append(observed[keep], observed[~keep].sum())
    expected = expected * counts.sum() / expected.sum()
    assert chisquare(counts, expected).pvalue > 1e-3


# ----- replay and tuning --------------------------------------------------------------------------
def test_replay_reproduces_the_decoders_counts(tiny_llama):
    costs = Costs(0.01, (0.02, 0.021, 0.022, 0.023, 0.024))
    rows = collect(tiny_llama, EXACT, PROMPTS, 24)
    prompts = rows.prompts()
    for k in (1, 3, 4):
        r = replay(prompts, static_rule, k, costs)
        runs = [SpeculativeDecoder(tiny_llama, EXACT, lookahead=StaticLookahead(k)).generate(p, 24).stats for p in PROMPTS]
        assert (r.steps, r.drafted, r.accepted) == (sum(s.target_forwards for s in runs), sum(s.drafted for s in runs),
                                                    sum(s.accepted for s in runs))
    classifier = random_classifier()
    scores = classifier.scores(Rows.concat(prompts).x).numpy()
    tau = float(np.median(scores))
    r = replay(prompts, disco_rule(scores, tau), 4, costs)
    runs = [SpeculativeDecoder(tiny_llama, EXACT, lookahead=DiscoLookahead(classifier, tau, 4)).generate(p, 24).stats
            for p in PROMPTS]
    assert (r.steps, r.accepted) == (sum(s.target_forwards for s in runs), sum(s.accepted for s in runs))
    oracle = replay(prompts, None, 4, costs)
    assert oracle.drafted == oracle.accepted and oracle.steps <= r.steps and oracle.seconds < r.seconds


def test_tune_picks_the_lowest_modelled_latency(tiny_llama):
    costs = Costs(0.01, (0.02, 0.021, 0.022, 0.023, 0.024, 0.025))
    rows = collect(tiny_llama, MASK, PROMPTS, 24)
    classifier, _ = train(rows, rows, epochs=50)
    tuned = tune(classifier, rows, costs, 5)
    statics = [replay(rows.prompts(), static_rule, k, costs).seconds for k in range(1, 6)]
    assert tuned.static.seconds == min(statics) and tuned.static_length == 1 + int(np.argmin(statics))
    assert tuned.disco.seconds <= tuned.static.seconds + 1e-12 or tuned.disco.seconds <= min(statics) * 1.5
    assert 1 <= tuned.sl_max <= 5 and 0 < tuned.tau < 1


def test_roc_threshold_minimizes_fpr_plus_three_fnr():
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2])
    matched = np.array([1, 1, 0, 1, 1, 0, 0, 0], bool)
    # at 0.5: tpr 1, fpr 1/4 -> cost 0.25, the minimum (0.7: fnr 1/2 -> 1.5 + ...)
    assert roc_threshold(scores, matched) == 0.5
    assert roc_threshold(scores[:4], matched[:4]) is None  # too few samples, as transformers requires


# ----- the file -----------------------------------------------------------------------------------
def make_file() -> DiscoFile:
    return DiscoFile(INFO, MASK.with_model(INFO), random_classifier(), 0.4, 5, {"domain": "code"})


def test_file_round_trip(tmp_path):
    original = make_file()
    loaded = DiscoFile.load(original.save(tmp_path / "d.json"), model=INFO)
    assert loaded == original and loaded.lookahead() == DiscoLookahead(original.classifier, 0.4, 5)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("classifier"), "missing classifier"),
    (lambda d: d.update(kind="mask"), "not a DISCO classifier file"),
    (lambda d: d.update(features={"top_k": 5}), "feature spec"),
    (lambda d: d.update(tau=3), r"tau must be a finite number in \[0, 1\]"),
    (lambda d: d.update(sl_max=0), r"sl_max must be an integer in \[1, 64\]"),
    (lambda d: d["classifier"].update(b1=[0.0]), "shapes"),
    # non-finite values and strings where numbers belong
    (lambda d: d.update(tau=float("nan")), "tau must be a finite number"),
    (lambda d: d.update(sl_max=10**20), "sl_max must be an integer"),
    (lambda d: d["classifier"].update(b2=float("inf")), "(b2 holds inf|Infinity is not a finite number)"),
    (lambda d: d["classifier"]["w1"][0].__setitem__(0, float("nan")), r"w1\[0\] holds nan"),
    (lambda d: d["classifier"].update(b2="0.5"), "b2 holds '0.5'"),
    (lambda d: d["classifier"]["mean"].__setitem__(0, "1"), "mean holds '1'"),
    (lambda d: d["classifier"]["scale"].__setitem__(0, True), "scale holds True"),
])
def test_bad_files_are_one_error(tmp_path, change, message):
    data = make_file().to_dict()
    change(data)
    (tmp_path / "d.json").write_text(json.dumps(data))
    with pytest.raises(LayersearchError, match=message):
        DiscoFile.load(tmp_path / "d.json")


def test_a_file_for_another_model_is_refused(tmp_path):
    path = make_file().save(tmp_path / "d.json")
    with pytest.raises(LayersearchError, match="trained for model"):
        DiscoFile.load(path, model=ModelInfo("other", 4, 64, "fff"))


def test_hf_confidence_rule_refits_its_threshold_from_what_was_accepted():
    from layersearch.runtime.step import DraftPosition, StepOutcome

    def position(index, top):
        logits = torch.log(torch.tensor([top, 1 - top]))
        return DraftPosition(index, logits, SamplingConfig())

    rule = RocConfidenceLookahead(8)
    # Confident tokens get accepted, unconfident ones rejected: the threshold moves between them.
    for step in range(4):
        for index, top in enumerate((0.95, 0.9, 0.6)):
            assert rule.keep_drafting(position(index, top)) is (top >= rule.threshold)
        drafted = sum(t >= rule.threshold for t in (0.95, 0.9, 0.6))
        outcome = StepOutcome(step, 10, drafted, min(drafted, 2), min(drafted, 2) + 1, "layer-skip", None)
        rule = rule.update(outcome)
    assert rule.threshold == pytest.approx(0.9)
    assert not rule.keep_drafting(position(0, 0.6)) and rule.keep_drafting(position(0, 0.95))
