"""The router: routing on a tiny model with synthetic domains, OOD fallback, lossless generation
for every route, and the router file's round trip and validation."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from layersearch.common.errors import LayersearchError
from layersearch.knn import DomainMask, DomainSamples, Router, build_router, routing_accuracy
from layersearch.knn.controller import KnnController
from layersearch.knn.represent import mean_representation, prompt_representation
from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.models.loading import describe_model
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.draft_policy import DraftPolicy
from tests.capture import assert_path, captured

# Synthetic domains: each draws its prompt tokens from its own slice of the 128-token vocabulary.
VOCAB_SLICES = {"low": (0, 8), "mid": (60, 68), "high": (120, 128)}


def synthetic_prompts(domain: str, count: int, seed: int, length: int = 32) -> list[torch.Tensor]:
    low, high = VOCAB_SLICES[domain]
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(low, high, (length,), generator=generator) for _ in range(count)]


@pytest.fixture(scope="module")
def info(tiny_llama) -> ModelInfo:
    return describe_model(tiny_llama, "tiny-llama")


@pytest.fixture(scope="module")
def masks(info):
    return {"low": SkipMask(4, (1,), (), info), "mid": SkipMask(4, (2,), (1,), info), "high": SkipMask(4, (), (2,), info)}


@pytest.fixture(scope="module")
def router(tiny_llama, info, masks) -> Router:
    samples = [
        DomainSamples(d, masks[d], np.stack([prompt_representation(tiny_llama, p) for p in synthetic_prompts(d, 12, seed=1)]))
        for d in VOCAB_SLICES
    ]
    return build_router(info, samples, clusters=2, anchors_per_cluster=3)


def test_held_out_prompts_route_to_their_domain(tiny_llama, router):
    reps, labels = [], []
    for domain in VOCAB_SLICES:
        for prompt in synthetic_prompts(domain, 10, seed=99):  # not the build prompts
            reps.append(prompt_representation(tiny_llama, prompt))
            labels.append(domain)
    assert routing_accuracy(router, np.stack(reps), labels) >= 0.9


def test_anchors_come_from_each_domain_and_the_threshold_covers_training(tiny_llama, router):
    assert router.anchors.shape == (3 * 2 * 3, 64)
    assert sorted(np.bincount(router.anchor_domains).tolist()) == [6, 6, 6]
    assert router.threshold is not None and 0 < router.threshold < 2
    routes = [(d, router.route(prompt_representation(tiny_llama, p))) for d in VOCAB_SLICES for p in synthetic_prompts(d, 12, seed=1)]
    assert all(not route.fallback for _, route in routes)  # every training prompt is within the threshold
    assert sum(route.domain == d for d, route in routes) >= 0.9 * len(routes)


def test_far_input_falls_back(router, info):
    # A random direction in 64 dimensions is nearly orthogonal to every anchor: out of distribution.
    far = np.random.default_rng(0).normal(size=64)
    route = router.route(far)
    assert route.fallback and route.domain is None and route.distance > router.threshold
    assert route.mask.is_empty  # no fallback mask: plain decoding
    fallback = SkipMask(4, (3,), (), info)
    with_fallback = Router(router.model, router.domains, router.anchors, router.anchor_domains, router.threshold, fallback)
    assert with_fallback.route(far).mask == fallback
    no_threshold = Router(router.model, router.domains, router.anchors, router.anchor_domains, None)
    assert no_threshold.route(far).domain in VOCAB_SLICES


def recomputed_greedy(model, prompt, new):
    ids = prompt.view(1, -1)
    with torch.no_grad():
        for _ in range(new):
            ids = torch.cat([ids, model(ids).logits[:, -1:].argmax(-1)], dim=1)
    return ids[0, prompt.numel():].tolist()


@pytest.mark.parametrize("decode_path, domain", [
    *[("eager", domain) for domain in (*VOCAB_SLICES, "ood")], ("captured", "low"), ("captured", "ood"),
])
def test_generation_is_lossless_and_records_the_route(tiny_llama, router, masks, domain, decode_path):
    if domain == "ood":
        # A threshold of 0 sends everything to the fallback (plain decoding).
        router = Router(router.model, router.domains, router.anchors, router.anchor_domains, 0.0)
        prompt = synthetic_prompts("low", 1, seed=7)[0]
    else:
        prompt = synthetic_prompts(domain, 1, seed=7)[0]
    controller = KnnController(router)
    decoder = SpeculativeDecoder(tiny_llama, policy=DraftPolicy(4, 0.0), controller=controller, compile=captured(decode_path))
    result = decoder.generate(prompt, 24)
    assert list(result.token_ids) == recomputed_greedy(tiny_llama, prompt, 24)
    assert_path(result, decode_path)
    (selection,) = result.stats.selections
    assert selection["step"] == 0 and selection["router"] == "knn"
    if domain == "ood":
        assert selection["domain"] is None and selection["fallback"] and result.stats.drafted == 0
    else:
        routed = router.route(prompt_representation(tiny_llama, prompt)).domain
        assert selection["domain"] == routed and selection["mask"] == masks[routed].short_string()
        assert result.stats.drafted > 0 and {s.mask for s in result.stats.steps} == {masks[routed]}
    assert json.dumps(result.stats.to_dict())  # the route is JSON-ready in the stats


def test_controller_uses_the_prefill_states_not_an_extra_forward(tiny_llama, router):
    prompt = synthetic_prompts("mid", 1, seed=3)[0]
    controller = KnnController(router)
    SpeculativeDecoder(tiny_llama, policy=DraftPolicy(4, 0.0), controller=controller).generate(prompt, 4)
    expected = router.route(prompt_representation(tiny_llama, prompt))
    assert controller.routes[0].domain == expected.domain
    assert controller.routes[0].distance == pytest.approx(expected.distance, abs=1e-5)


def test_mean_representation_averages_over_the_prompt():
    hidden = torch.tensor([[1.0, 2.0], [3.0, 6.0]])
    assert mean_representation(hidden).tolist() == [2.0, 4.0]


# ----- the file ---------------------------------------------------------------------------
def test_round_trip(tmp_path, router):
    path = router.save(tmp_path / "router.json")
    loaded = Router.load(path, router.model)
    assert loaded.domain_names == router.domain_names
    assert [d.mask for d in loaded.domains] == [d.mask for d in router.domains]
    np.testing.assert_array_equal(loaded.anchors, router.anchors)
    np.testing.assert_array_equal(loaded.anchor_domains, router.anchor_domains)
    assert loaded.threshold == router.threshold and loaded.fallback is None
    assert loaded.build["clusters"] == 2
    query = router.anchors[4] + 0.01
    assert loaded.route(query) == router.route(query)


def test_anchors_are_read_only(router):
    with pytest.raises(ValueError):
        router.anchors[0, 0] = 1.0


def test_wrong_model_is_refused(tmp_path, router):
    path = router.save(tmp_path / "router.json")
    other = ModelInfo("other", 4, 64, "another-fingerprint")
    with pytest.raises(LayersearchError, match="router was built for model 'tiny-llama'.*not 'other'"):
        Router.load(path, other)


def corrupt(router, tmp_path, change):
    data = router.to_dict()
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda d: d["anchors"][0].pop(), "anchors\\[0\\] must be a list of 64 numbers"),
        (lambda d: d["anchors"].__setitem__(1, "x"), "anchors\\[1\\] must be a list"),
        (lambda d: d["anchors"][2].__setitem__(0, "1.0"), "not a number"),
        (lambda d: d["anchors"].__setitem__(0, [0.0] * 64), "zero vector"),
        (lambda d: d.__setitem__("anchors", []), "non-empty list"),
        (lambda d: d["anchor_domains"].pop(), "entries for"),
        (lambda d: d["anchor_domains"].__setitem__(0, 7), "domain indices"),
        (lambda d: d.__setitem__("anchor_domains", [0] * len(d["anchors"])), "have no anchor"),
        (lambda d: d.__setitem__("threshold", -1), "threshold"),
        (lambda d: d.__setitem__("threshold", "far"), "threshold"),
        (lambda d: d["domains"][1].__setitem__("name", d["domains"][0]["name"]), "duplicate"),
        (lambda d: d["domains"][0]["mask"].__setitem__("num_layers", 5), "domains\\[0\\]|layers"),
        (lambda d: d["domains"][0]["mask"]["model"].__setitem__("fingerprint", "zz"), "domain 'low'.*fingerprint"),
        (lambda d: d.__setitem__("kind", "mask"), "not a KNN-SSD router file"),
        (lambda d: d.__setitem__("schema_version", 9), "schema_version"),
        (lambda d: d.pop("anchors"), "missing anchors"),
        (lambda d: d["model"].__setitem__("hidden_size", 32), "32 numbers"),
    ],
)
def test_malformed_files_are_refused_naming_the_problem(tmp_path, router, change, match):
    path = corrupt(router, tmp_path, change)
    with pytest.raises(LayersearchError, match=match) as info:
        Router.load(path)
    assert str(path) in str(info.value)


def test_nan_anchor_refused(tmp_path, router):
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(router.to_dict()).replace(str(router.to_dict()["anchors"][0][0]), "NaN", 1))
    with pytest.raises(LayersearchError):
        Router.load(path)


def test_routed_sampling_follows_the_target_distribution(exact_three_token_law):
    """With sampling, a routed mask drafts and the output still follows the target's exact law."""
    from scipy.stats import chisquare

    from layersearch.models.tiny import build_tiny_model
    from layersearch.runtime.sampling import SamplingConfig

    target = build_tiny_model("llama", num_layers=2, vocab_size=6, seed=21)
    target.generation_config.eos_token_id = None
    prompt = [1, 2, 1, 2]
    info = describe_model(target, "tiny-6")
    mask = SkipMask(2, (1,), (1,), info)
    anchor = prompt_representation(target, prompt)
    router = Router(info, (DomainMask("only", mask),), anchor[None, :], np.array([0]), 0.5)
    exact = exact_three_token_law(target, prompt)
    runs, observed, drafted = 1500, np.zeros(216), 0
    controller = KnnController(router)
    for seed in range(runs):
        decoder = SpeculativeDecoder(target, policy=DraftPolicy(2, 0.0), controller=controller,
                                     sampling=SamplingConfig(temperature=1.0, seed=seed))
        a, b, c = (result := decoder.generate(prompt, 3)).token_ids
        observed[a * 36 + b * 6 + c] += 1
        drafted += result.stats.drafted
    assert {r.domain for r in controller.routes} == {"only"} and drafted >= runs  # every run drafted
    keep = exact * runs >= 5
    expected = np.append(exact[keep], exact[~keep].sum()) * runs
    counts = np.append(observed[keep], observed[~keep].sum())
    expected = expected * counts.sum() / expected.sum()
    assert chisquare(counts, expected).pvalue > 1e-3
