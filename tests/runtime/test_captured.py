"""Captured decoding: a static KV cache, plan views and compiled forwards give the eager loop's
output token for token, with one host read per step for the static rule; what cannot run
captured runs eagerly and says why.

Compiling takes tens of seconds per shape on a CPU, so the compiled tests share one model per
family (decoders of one model share its compiled forwards) and are marked slow; the plan views
and the compiled-forward table are tested without compiling."""

from __future__ import annotations

import pytest
import torch

from layersearch.frspec.head import DraftHeads
from layersearch.frspec.vocab import VocabSubset
from layersearch.masks.mask import SkipMask
from layersearch.models.plan_view import plan_view
from layersearch.models.skipping import skipping
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.backend import CapturedForwards, captured_forwards, compile_with
from layersearch.runtime.backend import _forward
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.drafters import LayerSkipDrafter, make_drafter
from layersearch.runtime.lookahead import ConfidenceLookahead, HeuristicLookahead, StaticLookahead
from layersearch.runtime.sampling import SamplingConfig
from layersearch.runtime.tree import TopKBranching, TreeVerifier
from tests.runtime.test_draft_plans import random_plan
from tests.runtime.test_plugins import NEW, plain_generate, repetitive_prompt


@pytest.fixture(scope="module")
def llama():
    """A tiny Llama of its own: its compiled forwards are shared by this module's tests only."""
    model = build_tiny_model("llama", num_layers=4, seed=0)
    model.generation_config.eos_token_id = None
    return model


@pytest.fixture(scope="module")
def qwen2():
    model = build_tiny_model("qwen2", num_layers=4, seed=1)
    model.generation_config.eos_token_id = None
    return model


# ----- without compiling ----------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_a_plan_view_computes_what_the_plan_applied_in_place_computes(tiny_llama, seed):
    plan = random_plan(4, seed)
    ids = repetitive_prompt(seed)
    with torch.inference_mode():
        with skipping(tiny_llama, plan):
            expected = tiny_llama(ids).logits
        got = plan_view(tiny_llama, plan)(ids).logits
        plain = tiny_llama(ids).logits
    assert torch.equal(got, expected)
    assert torch.equal(plain, tiny_llama(ids).logits)  # the view left the model as it was


def test_a_plan_view_shares_every_tensor_and_never_changes_the_model(tiny_llama):
    plan = SkipMask.uniform(4, 0.5)
    view = plan_view(tiny_llama, plan)
    params = {p.data_ptr() for p in tiny_llama.parameters()}
    assert {p.data_ptr() for p in view.parameters()} <= params
    assert not any("forward" in vars(m) for m in tiny_llama.modules())
    assert plan_view(tiny_llama, SkipMask.none(4)) is tiny_llama


def test_the_compiled_forward_table_is_bounded_and_counts_hits(tiny_llama):
    built = []

    def compiler(device):  # the eager forward stands in for a compiled one: the table is under test
        built.append(device)
        return _forward

    table = CapturedForwards(tiny_llama, max_entries=2, compiler=compiler)
    cache = table.static_cache(40)
    ids = torch.tensor([5])
    with torch.inference_mode():
        for key in ("a", "b", "a", "c", "a", "b"):
            table.forward(tiny_llama, key, cache, ids, 3, 1, None)
    stats = table.stats()
    assert (stats.entries, stats.hits, stats.misses, stats.evictions) == (2, 2, 4, 2)  # b went first, then c
    assert len(built) == 4 and stats.hit_rate == pytest.approx(2 / 6)


def test_a_model_given_a_compiler_compiles_its_decoders_forwards_with_it():
    """``compile_with``: the seam the lossless suites use to trace with a cheap dynamo backend."""
    model = build_tiny_model("llama", num_layers=2, seed=6)
    model.generation_config.eos_token_id = None
    built = []

    def compiler(device):
        built.append(device)
        return _forward

    table = compile_with(model, compiler)
    assert captured_forwards(model) is table
    result = SpeculativeDecoder(model, SkipMask.uniform(2, 0.5), lookahead=StaticLookahead(2), compile=True).generate(
        repetitive_prompt(1), 8)
    assert result.stats.path == "captured" and len(built) == table.stats().misses > 0


# ----- compiled (slow) --------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_captured_decoding_equals_eager_under_random_plans(llama, seed):
    """Random plans (int8 sub-layers and heads among them), static drafts: captured == eager == plain."""
    plan = random_plan(4, seed)
    prompt = repetitive_prompt(seed)
    eager = SpeculativeDecoder(llama, plan, lookahead=StaticLookahead(3)).generate(prompt, NEW)
    captured = SpeculativeDecoder(llama, plan, lookahead=StaticLookahead(3), compile=True).generate(prompt, NEW)
    assert captured.stats.path == "captured", captured.stats.path_reason
    assert captured.token_ids == eager.token_ids
    assert list(captured.token_ids) == plain_generate(llama, prompt)
    assert [s.host_reads for s in captured.stats.steps] == [1] * len(captured.stats.steps)  # the verdict, nothing else


@pytest.mark.slow
def test_the_reduced_head_runs_captured(llama):
    heads = DraftHeads(VocabSubset(tuple(range(0, 128, 2)), "test", 64))
    plan = SkipMask.uniform(4, 0.25)
    prompt = repetitive_prompt(5)
    decoders = [SpeculativeDecoder(llama, plan, drafter=LayerSkipDrafter(head=heads), lookahead=StaticLookahead(3), compile=c)
                for c in (False, True)]
    eager, captured = (d.generate(prompt, NEW) for d in decoders)
    assert captured.stats.path == "captured" and captured.token_ids == eager.token_ids


@pytest.mark.slow
@pytest.mark.parametrize("lookahead", [ConfidenceLookahead(4, 0.3), HeuristicLookahead(2, ceiling=4)], ids=["confidence", "heuristic"])
@pytest.mark.parametrize("drafter", ["layer-skip", "prompt-lookup", "hybrid"])
def test_every_drafter_and_rule_runs_captured_with_the_eager_output(llama, drafter, lookahead):
    plan = SkipMask.uniform(4, 0.5)
    prompt = repetitive_prompt(11)
    decoders = [SpeculativeDecoder(llama, plan, drafter=make_drafter(drafter), lookahead=lookahead, compile=c) for c in (False, True)]
    eager, captured = (d.generate(prompt, NEW) for d in decoders)
    assert captured.stats.path == "captured"
    assert captured.token_ids == eager.token_ids
    # A rule that reads the draft's confidence reads once per drafted token, plus the verdict.
    reads = [s.host_reads - s.draft_forwards * lookahead.reads_confidence for s in captured.stats.steps]
    assert max(reads) <= 1 + (drafter != "layer-skip")  # prompt lookup reads the sequence's host copy only


@pytest.mark.slow
def test_a_draft_model_runs_beside_the_captured_target(llama):
    draft = build_tiny_model("llama", num_layers=1, seed=9)
    prompt = repetitive_prompt(4)
    decoders = [SpeculativeDecoder(llama, drafter=_model_drafter(draft),
                                   lookahead=StaticLookahead(3), compile=c) for c in (False, True)]
    eager, captured = (d.generate(prompt, NEW) for d in decoders)
    assert captured.stats.path == "captured" and captured.token_ids == eager.token_ids
    assert max(s.host_reads for s in captured.stats.steps) == 1  # the draft model's cache follows the verdict, not a read


def _model_drafter(model):
    from layersearch.runtime.drafters.model import ModelDrafter

    return ModelDrafter(model)


@pytest.mark.slow
def test_sampled_output_is_the_same_captured_or_not(llama):
    plan = SkipMask.uniform(4, 0.5)
    prompt = repetitive_prompt(2)
    sampling = SamplingConfig(temperature=0.8, top_p=0.9, seed=3)
    runs = [SpeculativeDecoder(llama, plan, lookahead=StaticLookahead(3), sampling=sampling, compile=c).generate(prompt, NEW)
            for c in (False, True)]
    assert runs[0].token_ids == runs[1].token_ids and runs[1].stats.path == "captured"


@pytest.mark.slow
def test_sampling_captured_follows_the_exact_law(three_token_chi_square):
    target = build_tiny_model("llama", num_layers=2, vocab_size=6, seed=21)
    target.generation_config.eos_token_id = None
    plan = SkipMask(2, (), (1,), None, {}, (0,), (0,), True)
    runs = 1500
    pvalue, drafted = three_token_chi_square(target, [1, 2, 1, 2], lambda seed: SpeculativeDecoder(
        target, plan, lookahead=StaticLookahead(2), sampling=SamplingConfig(temperature=1.0, seed=seed), compile=True), runs)
    assert drafted > runs // 5
    assert pvalue > 1e-3


@pytest.mark.slow
def test_qwen2_compiles_without_a_graph_break_and_keeps_its_output(qwen2):
    plan = random_plan(4, 4)
    prompt = repetitive_prompt(3)
    decoder = SpeculativeDecoder(qwen2, plan, lookahead=StaticLookahead(2), compile=True)
    first = decoder.generate(prompt, NEW)  # fullgraph=True: a graph break would raise here
    again = decoder.generate(prompt, NEW)
    assert first.stats.path == "captured" and first.token_ids == again.token_ids
    assert list(first.token_ids) == plain_generate(qwen2, prompt)
    assert first.stats.compile_seconds > 0 and again.stats.compile_seconds == 0  # compiled once, reused
    assert decoder.capture_stats().hits > decoder.capture_stats().misses


@pytest.mark.slow
def test_a_token_tree_runs_eagerly_and_says_why(llama):
    plan = SkipMask.uniform(4, 0.5)
    prompt = repetitive_prompt(6)
    decoder = SpeculativeDecoder(llama, plan, drafter=LayerSkipDrafter(TopKBranching()), verifier=TreeVerifier(),
                                 lookahead=StaticLookahead(3), compile=True)
    result = decoder.generate(prompt, NEW)
    assert result.stats.path == "eager" and "tree" in result.stats.path_reason
    assert list(result.token_ids) == plain_generate(llama, prompt)


def test_the_shared_table_does_not_keep_a_model_alive():
    import gc
    import weakref

    model = build_tiny_model("llama", num_layers=2, seed=4)
    SpeculativeDecoder(model, compile=True)
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None


@pytest.mark.slow
def test_the_numba_kernels_and_cpu_int8_run_captured(llama):
    """The CPU kernels and fbgemm's int8 run inside compiled forwards as custom ops: the same
    bits as eager decoding with the kernels, one host read per step."""
    from layersearch.kernels.select import model_kernels

    plan = random_plan(4, 1)  # int8 sub-layers and skips
    assert plan.has_int8
    prompt = repetitive_prompt(7)
    with model_kernels(llama, "numba"):
        eager = SpeculativeDecoder(llama, plan, lookahead=StaticLookahead(3)).generate(prompt, NEW)
        captured = SpeculativeDecoder(llama, plan, lookahead=StaticLookahead(3), compile=True).generate(prompt, NEW)
        plain = SpeculativeDecoder(llama).generate(prompt, NEW)
    assert captured.stats.path == "captured" and captured.stats.path_reason == ""
    assert captured.token_ids == eager.token_ids == plain.token_ids
    assert [s.host_reads for s in captured.stats.steps] == [1] * len(captured.stats.steps)
