"""SD² steering at inference: the bias reaches exactly the executed MLPs, only inside the context
manager, and a steered drafter keeps generation lossless (greedy and sampling)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.drafters import LayerSkipDrafter, ModelDrafter
from layersearch.runtime.lookahead import StaticLookahead
from layersearch.runtime.sampling import SamplingConfig
from layersearch.runtime.step import Drafter
from layersearch.steer import SteeredDrafter, SteeringParams, default_layers, steered
from layersearch.steer.hooks import intermediate_size
from tests.capture import assert_path, captured


def random_steering(verifier, drafter=None, scale=0.5, seed=0) -> SteeringParams:
    """Steering with a non-zero W_s, so drafts really change."""
    drafter = drafter or verifier
    params = SteeringParams(
        default_layers(verifier.config.num_hidden_layers), verifier.config.hidden_size,
        drafter.config.hidden_size, intermediate_size(drafter),
    )
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        params.s.weight.copy_(torch.randn(params.s.weight.shape, generator=g) * scale)
    return params


def plain_generate(model, prompt, new):
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new, min_new_tokens=new, do_sample=False)
    return out[0, prompt.shape[1]:].tolist()


def test_untrained_steering_is_the_sum_of_the_states_and_no_bias():
    params = SteeringParams((0, 1, 2), 8, 8, 20)
    states = torch.randn(3, 8) * torch.tensor([[1.0], [10.0], [300.0]])  # residual norms grow with depth
    unit = states / states.pow(2).mean(-1, keepdim=True).sqrt()
    torch.testing.assert_close(params.vector(states), unit.sum(0))
    assert torch.count_nonzero(params.bias(states)) == 0
    wider = SteeringParams((0, 1, 2), 8, 12, 20)  # an independent drafter of another width
    torch.testing.assert_close(wider.vector(states)[:8], unit.sum(0))
    assert default_layers(30) == (3, 15, 28)
    # each layer read once (a steering file repeating one is refused): shallow models move or drop one
    assert [default_layers(n) for n in (1, 2, 3, 4, 6)] == [(0,), (0, 1), (0, 1, 2), (0, 2, 3), (0, 3, 4)]


def test_bias_lands_on_the_up_projection_only_inside_the_block(tiny_llama):
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        before = tiny_llama(ids).logits
        bias = torch.randn(intermediate_size(tiny_llama))
        with steered(tiny_llama, bias):
            steered_logits = tiny_llama(ids).logits
        with pytest.raises(RuntimeError):
            with steered(tiny_llama, bias):
                raise RuntimeError("drafting failed")
        after = tiny_llama(ids).logits
    layer = tiny_llama.model.layers[1].mlp
    assert not torch.allclose(steered_logits, before)
    torch.testing.assert_close(after, before)  # removed on exit, also after an exception
    assert all(not p._forward_hooks for p in (l.mlp.up_proj for l in tiny_llama.model.layers))
    a = torch.randn(1, 4, tiny_llama.config.hidden_size)
    with torch.no_grad(), steered(tiny_llama, bias):
        got = layer(a)
        # Eq. 2: W_d((W_u a + W_s g) * act(W_g a)), the up projection computed without hooks.
        up = torch.nn.functional.linear(a, layer.up_proj.weight)
        expected = layer.down_proj((up + bias) * layer.act_fn(layer.gate_proj(a)))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_skipped_mlps_get_no_bias(tiny_llama):
    """With every MLP skipped, steering changes nothing; with some skipped, only executed ones are hit."""
    from layersearch.models.skipping import skipping

    ids = torch.tensor([[5, 6, 7]])
    bias = torch.randn(intermediate_size(tiny_llama)) * 3
    all_mlps = SkipMask(4, attention=(), mlp=(0, 1, 2, 3))
    with torch.no_grad(), skipping(tiny_llama, all_mlps):
        plain = tiny_llama(ids).logits
        with steered(tiny_llama, bias):
            torch.testing.assert_close(tiny_llama(ids).logits, plain)
    calls = []
    handles = [l.mlp.up_proj.register_forward_hook(lambda m, i, o, k=k: calls.append(k)) for k, l in enumerate(tiny_llama.model.layers)]
    try:
        with torch.no_grad(), skipping(tiny_llama, SkipMask(4, attention=(2,), mlp=(1, 2))), steered(tiny_llama, bias):
            tiny_llama(ids)
    finally:
        for h in handles:
            h.remove()
    assert calls == [0, 3]


def test_wrong_bias_width_is_refused(tiny_llama):
    with pytest.raises(LayersearchError, match="width"):
        with steered(tiny_llama, torch.zeros(3)):
            pass


@pytest.fixture(scope="module")
def draft_model():
    model = build_tiny_model("llama", num_layers=2, hidden_size=48, seed=11)
    model.generation_config.eos_token_id = None
    return model


def steered_drafters(verifier, draft_model):
    return {
        "layer-skip": SteeredDrafter(LayerSkipDrafter(), random_steering(verifier, seed=1)),
        "model": SteeredDrafter(ModelDrafter(draft_model), random_steering(verifier, draft_model, seed=2)),
    }


@pytest.mark.parametrize("kind", ["layer-skip", "model"])
@pytest.mark.parametrize("seed", [0, 1])
def test_steered_greedy_equals_generate(tiny_llama, draft_model, kind, seed, decode_path):
    prompt = torch.randint(0, 128, (1, 9), generator=torch.Generator().manual_seed(seed))
    mask = SkipMask.uniform(4, 0.5)
    drafter = Recording(steered_drafters(tiny_llama, draft_model)[kind])
    decoder = SpeculativeDecoder(tiny_llama, mask, drafter=drafter, lookahead=StaticLookahead(4), compile=captured(decode_path))
    result = decoder.generate(prompt, 32)
    assert list(result.token_ids) == plain_generate(tiny_llama, prompt, 32)
    assert_path(result, decode_path, blocked_by="hidden states")  # a steered drafter reads the verifier's states
    assert result.stats.drafted > 0
    # Steering really took part: unsteered, the same drafter proposes other first drafts.
    plain = Recording(drafter.inner.inner)
    SpeculativeDecoder(tiny_llama, mask, drafter=plain, lookahead=StaticLookahead(4)).generate(prompt, 32)
    assert plain.proposals[0] != drafter.proposals[0]


class Recording(Drafter):
    """Delegates to a drafter and records its proposals' tokens."""

    def __init__(self, inner):
        self.inner = inner
        self.name, self.hidden_layers = inner.name, inner.hidden_layers
        self.proposals = []

    def check_target(self, target):
        self.inner.check_target(target)

    def begin(self, prompt):
        self.inner.begin(prompt)

    def observe_hidden(self, states):
        self.inner.observe_hidden(states)

    def observe(self, outcome):
        self.inner.observe(outcome)

    def propose(self, request):
        proposal = self.inner.propose(request)
        self.proposals.append(proposal.tokens)
        return proposal


def test_steered_drafter_refuses_a_steering_of_another_width(tiny_llama, draft_model):
    with pytest.raises(LayersearchError, match="width"):
        SteeredDrafter(ModelDrafter(draft_model), random_steering(tiny_llama))  # sized for the verifier's MLPs
    wrong = SteeringParams((0, 1, 2), 64, 64, 7)
    with pytest.raises(LayersearchError, match="width"):
        SpeculativeDecoder(tiny_llama, SkipMask.uniform(4, 0.5), drafter=SteeredDrafter(LayerSkipDrafter(), wrong))


def test_steered_sampling_follows_the_target_distribution(exact_three_token_law):
    """Tokens 2 and 3 come from steered draft + verify: chi-square of (t1, t2, t3) against the exact law."""
    from scipy.stats import chisquare

    target = build_tiny_model("llama", num_layers=4, vocab_size=6, seed=21)
    target.generation_config.eos_token_id = None
    small = build_tiny_model("llama", num_layers=1, vocab_size=6, hidden_size=32, seed=22)
    prompt = [1, 2, 1, 2]
    exact = exact_three_token_law(target, prompt)
    runs = 1500
    drafters = {
        "layer-skip": (SteeredDrafter(LayerSkipDrafter(), random_steering(target, scale=2.0, seed=3)), SkipMask.uniform(4, 0.5)),
        "model": (SteeredDrafter(ModelDrafter(small), random_steering(target, small, scale=2.0, seed=4)), None),
    }
    for name, (drafter, mask) in drafters.items():
        observed = np.zeros(216)
        drafted = 0
        for seed in range(runs):
            sampling = SamplingConfig(temperature=1.0, seed=seed)
            decoder = SpeculativeDecoder(target, mask, drafter=drafter, lookahead=StaticLookahead(2), sampling=sampling)
            result = decoder.generate(prompt, 3)
            a, b, c = result.token_ids
            observed[a * 36 + b * 6 + c] += 1
            drafted += result.stats.drafted
        assert drafted > runs // 5, name
        keep = exact * runs >= 5
        expected = np.append(exact[keep], exact[~keep].sum()) * runs
        counts = np.append(observed[keep], observed[~keep].sum())
        expected = expected * counts.sum() / expected.sum()
        assert chisquare(counts, expected).pvalue > 1e-3, name
