"""Training steering: the training forward is the drafting forward, and training lowers the KL."""

from __future__ import annotations

import pytest
import torch

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.skipping import skipping
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.cache import new_cache
from layersearch.runtime.forward import forward_tokens
from layersearch.steer import SteeringParams, default_layers, steered
from layersearch.steer.hooks import intermediate_size
from layersearch.steer.train import TrainSettings, _self_draft_logits, collect, mean_kl, train

MASK = SkipMask(4, attention=(1, 2), mlp=(2,))


@pytest.fixture(scope="module")
def verifier():
    model = build_tiny_model("llama", num_layers=4, seed=3).requires_grad_(False)
    model.generation_config.eos_token_id = None
    return model


def params_for(verifier, drafter=None, seed=0):
    drafter = drafter or verifier
    params = SteeringParams(default_layers(4), 64, drafter.config.hidden_size, intermediate_size(drafter))
    with torch.no_grad():
        params.s.weight.normal_(generator=torch.Generator().manual_seed(seed))
    return params


def examples_for(verifier, n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, 128, (6,), generator=g) for _ in range(n)]
    return collect(verifier, prompts, default_layers(4), TrainSettings(new_tokens=10), g)


def test_training_forward_is_the_first_draft_forward(verifier):
    """Query q of the one-forward training pass == drafting token q after the verifier's cache of
    positions < q, steered by the states of position q - 1 (δ = 1)."""
    example = examples_for(verifier, n=1)[0]
    params = params_for(verifier)
    n = example.ids.shape[0]
    queries = torch.arange(example.start - 1, n - 1)
    with torch.no_grad():
        bias = params.bias(example.states[queries - 1])  # [m, intermediate]
        together = _self_draft_logits(verifier, example, MASK, queries, bias)
        for j, q in enumerate(queries.tolist()):
            cache = new_cache(verifier)
            forward_tokens(verifier, example.ids[:q].tolist(), 0, cache)  # the verifier's committed context
            with skipping(verifier, MASK), steered(verifier, bias[j]):
                alone = forward_tokens(verifier, [int(example.ids[q])], q, cache)[-1]
            torch.testing.assert_close(together[j], alone, rtol=1e-4, atol=1e-4)


def test_collected_targets_are_the_verifier_distribution(verifier):
    example = examples_for(verifier, n=1)[0]
    with torch.no_grad():
        logits = verifier(example.ids[None]).logits[0]
    torch.testing.assert_close(example.targets, torch.log_softmax(logits[example.start - 1 : -1], -1), rtol=1e-4, atol=1e-4)
    assert example.ids.shape[0] == example.start + 10


@pytest.mark.parametrize("independent", [False, True])
def test_training_lowers_the_kl(verifier, independent):
    """On its training samples (random tiny models carry no signal that generalises; held-out
    gains are measured on the embedded model by `steer eval`)."""
    drafter = build_tiny_model("llama", num_layers=1, hidden_size=48, seed=5).requires_grad_(False) if independent else None
    params = SteeringParams(default_layers(4), 64, (drafter or verifier).config.hidden_size, intermediate_size(drafter or verifier))
    data = examples_for(verifier, 6, seed=1)
    kw = dict(mask=None if independent else MASK, drafter=drafter)
    before = mean_kl(params, verifier, data, **kw)
    seen = []
    losses = train(params, verifier, data, TrainSettings(steps=60, lr=1e-2), progress=lambda s, l: seen.append(s), **kw)
    after = mean_kl(params, verifier, data, **kw)
    assert seen == list(range(1, 61)) and len(losses) == 60
    assert after < before * 0.9, (before, after)
    assert not params.hml.weight.requires_grad  # handed back frozen


def test_train_needs_exactly_one_drafter(verifier):
    params = params_for(verifier)
    with pytest.raises(LayersearchError, match="not both"):
        train(params, verifier, [], TrainSettings(steps=1))
    with pytest.raises(LayersearchError, match="steps"):
        TrainSettings(steps=0)


def test_finetuning_the_drafter_lowers_the_held_out_kl():
    """Fine-tuning distils the verifier into a pruned drafter: the KL falls on prompts never
    trained on, below what steering alone reaches; the embeddings and LM head stay as they were."""
    from layersearch.steer.shrink import shrink
    from layersearch.steer.train import tunable

    verifier = build_tiny_model("llama", num_layers=4, seed=3).requires_grad_(False)
    verifier.generation_config.eos_token_id = None
    with torch.no_grad():
        verifier.lm_head.weight.mul_(8)  # peaked next-token laws, as a trained LM has (random ones are near uniform)
    data, held_out = examples_for(verifier, 12, seed=1), examples_for(verifier, 4, seed=2)
    results = {}
    for finetune in (False, True):
        drafter, _ = shrink(verifier, 3)
        embeddings = drafter.get_input_embeddings().weight.clone()
        params = SteeringParams(default_layers(4), 64, 64, intermediate_size(drafter))
        before = mean_kl(params, verifier, held_out, drafter=drafter)
        settings = TrainSettings(steps=60, lr=1e-3, drafter_lr=3e-4 if finetune else None)
        train(params, verifier, data, settings, drafter=drafter)
        results[finetune] = mean_kl(params, verifier, held_out, drafter=drafter)
        assert all(not w.requires_grad for w in drafter.parameters())  # handed back frozen
        torch.testing.assert_close(drafter.get_input_embeddings().weight, embeddings, rtol=0, atol=0)
    assert results[True] < before * 0.85, (before, results)
    assert results[True] < results[False], results
    assert len(tunable(drafter)) == len(list(drafter.parameters())) - 2  # all but embeddings and LM head


def test_only_a_draft_model_can_be_finetuned(verifier):
    with pytest.raises(LayersearchError, match="independent"):
        train(params_for(verifier), verifier, [], TrainSettings(steps=1, drafter_lr=1e-4), mask=MASK)
    with pytest.raises(LayersearchError, match="drafter-lr"):
        TrainSettings(drafter_lr=0.0)
