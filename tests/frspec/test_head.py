"""The reduced-vocabulary draft head (FR-Spec): its logits, and drafters using it stay lossless —
greedy output equals plain ``generate`` for any subset, sampled output follows the target's law
even when the subset leaves out tokens the target samples."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.cache import new_cache
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.drafters import HybridDrafter, LayerSkipDrafter, ModelDrafter, make_drafter
from layersearch.runtime.step import Drafter
from layersearch.runtime.forward import forward_tokens
from layersearch.runtime.lookahead import ConfidenceLookahead, StaticLookahead
from layersearch.runtime.sampling import SamplingConfig
from layersearch.frspec.head import DraftHeads, SubsetHead, VocabSubset
from tests.capture import assert_path, captured

NEW = 24


def subset(*ids: int) -> VocabSubset:
    return VocabSubset(tuple(sorted(ids)), "test", len(ids))


def plain_generate(model, prompt, new=NEW):
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new, min_new_tokens=new, do_sample=False)
    return out[0, prompt.shape[1]:].tolist()


class Recording(Drafter):
    """Delegates to a drafter and keeps every token it proposed."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.proposed: list[int] = []

    def begin(self, prompt):
        self.inner.begin(prompt)

    def propose(self, request):
        proposal = self.inner.propose(request)
        self.proposed.extend(proposal.tokens)
        return proposal

    def observe(self, outcome):
        self.inner.observe(outcome)

    def check_target(self, target):
        self.inner.check_target(target)


@pytest.fixture(scope="module")
def draft_model():
    model = build_tiny_model("llama", num_layers=2, seed=11)
    model.generation_config.eos_token_id = None
    return model


def test_subset_value_is_checked():
    assert subset(5, 1, 3).token_ids == (1, 3, 5) and subset(5, 1, 3).size == 3
    for bad in ((), (3, 1), (1, 1), (-1, 2)):
        with pytest.raises(LayersearchError):
            VocabSubset(bad, "test", 2)


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma2"])  # gemma2: the logit softcap
def test_subset_head_gives_the_models_logits_on_the_subset_and_minus_inf_elsewhere(family):
    model = build_tiny_model(family, num_layers=2, seed=3)
    ids = [4, 9, 17, 30, 2]
    full = forward_tokens(model, ids, 0, new_cache(model))  # [5, vocab]
    chosen = subset(0, 7, 9, 100, 127)
    head = SubsetHead(model, chosen)
    assert head.weight.shape == (5, model.config.hidden_size) and head.weight.is_contiguous()
    reduced = forward_tokens(model, ids, 0, new_cache(model), keep=2, head=head)  # [2, vocab]
    columns = list(chosen.token_ids)
    torch.testing.assert_close(reduced[:, columns], full[-2:, columns], rtol=1e-5, atol=1e-5)
    outside = torch.ones(reduced.shape[1], dtype=torch.bool)
    outside[columns] = False
    assert torch.isneginf(reduced[:, outside]).all()
    # The whole vocabulary as the subset gives the model's own logits.
    everything = SubsetHead(model, subset(*range(model.config.vocab_size)))
    torch.testing.assert_close(forward_tokens(model, ids, 0, new_cache(model), head=everything), full)


def test_the_head_is_sliced_once_per_model_and_checked_against_its_vocabulary(tiny_llama, tiny_qwen2):
    heads = DraftHeads(subset(1, 2, 3))
    first = heads.for_model(tiny_llama)
    assert heads.for_model(tiny_llama) is first
    assert heads.for_model(tiny_qwen2) is not first and heads.for_model(tiny_qwen2).fits(tiny_qwen2)
    with pytest.raises(LayersearchError, match="another tokenizer"):
        SubsetHead(tiny_llama, subset(3, 128))  # the tiny vocabulary has ids 0..127


def repetitive_prompt(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    chunk = torch.randint(0, 128, (5,), generator=g)
    return torch.cat([chunk, torch.randint(0, 128, (3,), generator=g), chunk]).unsqueeze(0)


@pytest.mark.parametrize("decode_path, kind, size", [
    *[("eager", kind, size) for kind in ("layer-skip", "hybrid", "model") for size in (1, 8, 64)],
    *[("captured", kind, 8) for kind in ("layer-skip", "hybrid", "model")],  # each reduced head: its own compiled drafts
])
def test_greedy_output_equals_generate_for_any_subset(tiny_llama, draft_model, size, kind, decode_path):
    """Drafts come only from the subset; the full verifier keeps the output exact."""
    plain = plain_generate(tiny_llama, repetitive_prompt(size))
    # The subset: the first tokens of the plain output (so drafts can be accepted) and others.
    chosen = subset(*sorted(set(plain[: max(1, size // 2)]) | set(range(0, 128, max(1, 128 // size)))))
    inner = {
        "layer-skip": LayerSkipDrafter(head=DraftHeads(chosen)),
        "hybrid": HybridDrafter(fallback=LayerSkipDrafter(head=DraftHeads(chosen)), adaptive=False),
        "model": ModelDrafter(draft_model, head=DraftHeads(chosen)),
    }[kind]
    drafter = Recording(inner)
    for lookahead in (StaticLookahead(4), ConfidenceLookahead(6, 0.05)):
        decoder = SpeculativeDecoder(tiny_llama, SkipMask.uniform(4, 0.5), drafter=drafter, lookahead=lookahead,
                                     compile=captured(decode_path))
        result = decoder.generate(repetitive_prompt(size), NEW)
        assert list(result.token_ids) == plain
        assert_path(result, decode_path)
    assert drafter.proposed
    if kind != "hybrid":  # the hybrid's lookup arm copies tokens from the text, which may lie outside
        assert set(drafter.proposed) <= set(chosen.token_ids)


def test_prompt_lookup_takes_no_reduced_head():
    with pytest.raises(LayersearchError, match="'prompt-lookup' runs no model head"):
        make_drafter("prompt-lookup", head=DraftHeads(subset(1, 2)))
    heads = DraftHeads(subset(1, 2))
    assert make_drafter("layer-skip", head=heads).head is heads


def test_sampled_drafts_from_a_subset_follow_the_target_distribution(exact_three_token_law):
    """Chi-square of (t1, t2, t3) against the exact law, for a layer-skip and a model draft whose
    head scores only tokens {0, 2, 3}: the target still emits 1, 4 and 5 at their own rates."""
    from scipy.stats import chisquare

    target = build_tiny_model("llama", num_layers=2, vocab_size=6, seed=21)
    target.generation_config.eos_token_id = None
    small = build_tiny_model("llama", num_layers=1, vocab_size=6, seed=22)
    prompt = [1, 2, 1, 2]
    exact = exact_three_token_law(target, prompt)
    chosen = subset(0, 2, 3)
    runs = 1500
    for make in (lambda: LayerSkipDrafter(head=DraftHeads(chosen)), lambda: ModelDrafter(small, head=DraftHeads(chosen))):
        drafter = Recording(make())
        observed = np.zeros(216)
        for seed in range(runs):
            sampling = SamplingConfig(temperature=1.0, seed=seed)
            decoder = SpeculativeDecoder(
                target, SkipMask(2, (1,), (0,)), drafter=drafter, lookahead=StaticLookahead(2), sampling=sampling
            )
            a, b, c = decoder.generate(prompt, 3).token_ids
            observed[a * 36 + b * 6 + c] += 1
        name = drafter.name
        assert len(drafter.proposed) >= runs and set(drafter.proposed) <= {0, 2, 3}, name  # drafts, all in the subset
        later = observed.reshape(6, 6, 6).sum(0)  # (t2, t3): both come through draft + verification
        assert later[[1, 4, 5]].sum() > 0 and later[:, [1, 4, 5]].sum() > 0, name  # tokens outside were emitted
        keep = exact * runs >= 5
        expected = np.append(exact[keep], exact[~keep].sum()) * runs
        counts = np.append(observed[keep], observed[~keep].sum())
        assert chisquare(counts, expected * counts.sum() / expected.sum()).pvalue > 1e-3, name


def test_an_int4_plan_head_runs_its_int4_rows_and_keeps_greedy_output(tiny_llama):
    """A reduced head under a plan with the int4 head: its rows are the int4 head's rows (each
    row's groups are its own), and the draft stays lossless."""
    from layersearch.models.precision import int4_twins
    from tests.runtime.test_plugins import NEW, plain_generate, repetitive_prompt

    subset = VocabSubset(tuple(range(0, 128, 2)), "t", 64)
    heads = DraftHeads(subset)
    head = heads.for_model(tiny_llama, int4_group=32)
    hidden = torch.randn(3, 64)
    full_int4 = int4_twins(tiny_llama, 32).head.logits(hidden)  # [3, vocab]
    reduced = head.logits(hidden)
    ids = torch.tensor(subset.token_ids)
    assert torch.equal(reduced[:, ids], full_int4[:, ids]) and torch.isinf(reduced[:, 1]).all()
    assert heads.for_model(tiny_llama, int4_group=32) is head and heads.for_model(tiny_llama) is not head
    plan = SkipMask(4, (1,), (), int4_mlp=(0, 1, 2, 3), int4_head=True, int4_group_size=32)
    prompt = repetitive_prompt(3)
    decoder = SpeculativeDecoder(tiny_llama, plan, drafter=LayerSkipDrafter(head=heads), lookahead=StaticLookahead(3))
    assert list(decoder.generate(prompt, NEW).token_ids) == plain_generate(tiny_llama, prompt)
