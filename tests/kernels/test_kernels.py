"""CPU verification kernels: a token's result never depends on how many tokens share the call,
so greedy speculative output equals our plain loop run with the same kernels."""

from __future__ import annotations

import pytest
import torch

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.tiny import build_tiny_model
from layersearch.profiling.profile import KernelTiming, LatencyProfile, kernel_choice_text, pick_kernels
from layersearch.runtime.cache import new_cache, truncate_cache
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.draft_policy import DraftPolicy
from layersearch.runtime.forward import forward_tokens
from layersearch.kernels.select import CHOICES, MAX_TOKENS, choose_kernels, model_kernels
from layersearch.kernels.rowwise_linear import rowwise_linear


@pytest.mark.parametrize("n_in, n_out", [(64, 128), (70, 37), (33, 5), (576, 1536), (1, 3)])
def test_linear_rows_are_bitwise_independent_of_the_token_count(n_in, n_out):
    generator = torch.Generator().manual_seed(n_in * 1000 + n_out)
    weight = torch.randn(n_out, n_in, generator=generator)
    bias = torch.randn(n_out, generator=generator)
    x = torch.randn(20, n_in, generator=generator)
    together = rowwise_linear(x, weight, bias)  # [20, out]
    torch.testing.assert_close(together, torch.nn.functional.linear(x, weight, bias), rtol=1e-4, atol=1e-4)
    for k in range(1, 21):
        assert torch.equal(rowwise_linear(x[:k], weight, bias), together[:k]), k
        assert torch.equal(rowwise_linear(x[k - 1 : k], weight, bias)[0], together[k - 1]), k  # alone
    # Leading dimensions are kept: [1, k, in] -> [1, k, out].
    assert torch.equal(rowwise_linear(x[None, :5], weight, bias)[0], together[:5])


def _forward_logits_every_way(model, k_max: int = 16, prompt: int = 5):
    """(logits of k_max tokens verified together, of each token fed alone) under the kernels."""
    ids = torch.randint(model.config.vocab_size, (prompt + k_max,), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        cache = new_cache(model)
        forward_tokens(model, ids[:prompt], 0, cache, keep=1)
        together = forward_tokens(model, ids[prompt:], prompt, cache)  # [k_max, vocab]
        widths = {}
        for k in range(1, k_max + 1):
            truncate_cache(cache, prompt)
            widths[k] = forward_tokens(model, ids[prompt : prompt + k], prompt, cache)
        truncate_cache(cache, prompt)
        alone = torch.stack([forward_tokens(model, ids[prompt + j : prompt + j + 1], prompt + j, cache)[0] for j in range(k_max)])
    return together, widths, alone


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma2"])
def test_whole_forward_is_bitwise_independent_of_the_verified_length(family):
    model = build_tiny_model(family, num_layers=3, seed=4)
    with model_kernels(model, "numba") as routed:
        together, widths, alone = _forward_logits_every_way(model)
    assert routed == 3 * 7 + 1  # q/k/v/o, gate/up/down per layer, and the LM head
    assert torch.equal(alone, together)
    for k, logits in widths.items():
        assert torch.equal(logits, together[:k]), k
    stock, _, _ = _forward_logits_every_way(model)
    torch.testing.assert_close(together, stock, rtol=1e-4, atol=1e-4)  # same model, other kernels


def test_sliding_window_keeps_its_window_with_the_kernels():
    model = build_tiny_model("mistral", num_layers=2, seed=5, sliding_window=6)
    with model_kernels(model, "numba"):
        together, _, alone = _forward_logits_every_way(model, k_max=10)
    stock, _, _ = _forward_logits_every_way(model, k_max=10)
    assert torch.equal(alone, together)
    torch.testing.assert_close(together, stock, rtol=1e-4, atol=1e-4)


def _plain_loop(model, prompt, new):
    return SpeculativeDecoder(model, SkipMask.none(model.config.num_hidden_layers)).generate(prompt, new).token_ids


@pytest.mark.parametrize("family", ["tiny_llama", "tiny_qwen2"])
@pytest.mark.parametrize("mask", [SkipMask(4, (), (3,)), SkipMask(4, (1,), (2,)), SkipMask.uniform(4, 0.5), SkipMask.everything(4)], ids=str)
@pytest.mark.parametrize("max_draft", [3, 8, 16])
def test_greedy_speculative_equals_our_plain_loop_with_the_kernels(request, family, mask, max_draft):
    model = request.getfixturevalue(family)
    prompt = torch.randint(0, 128, (1, 9), generator=torch.Generator().manual_seed(max_draft))
    with model_kernels(model, "numba"):
        plain = _plain_loop(model, prompt, 40)
        result = SpeculativeDecoder(model, mask, policy=DraftPolicy(max_draft, 0.0)).generate(prompt, 40)
    assert list(result.token_ids) == list(plain)
    assert max(step.drafted for step in result.stats.steps) == max_draft  # the widest verification ran


def test_prefill_longer_than_the_kernel_limit_keeps_greedy_exact(tiny_llama):
    prompt = torch.randint(0, 128, (1, MAX_TOKENS + 10), generator=torch.Generator().manual_seed(1))
    with model_kernels(tiny_llama, "numba"):
        plain = _plain_loop(tiny_llama, prompt, 24)
        result = SpeculativeDecoder(tiny_llama, SkipMask(4, (), (3,)), policy=DraftPolicy(6, 0.0)).generate(prompt, 24)
    assert list(result.token_ids) == list(plain)


def test_stock_changes_nothing_and_numba_is_undone_on_exit(tiny_llama):
    before = tiny_llama.config._attn_implementation
    with model_kernels(tiny_llama, "stock") as routed:
        assert routed == 0
        assert not any("forward" in vars(m) for m in tiny_llama.modules())
    with pytest.raises(RuntimeError):
        with model_kernels(tiny_llama, "numba"):
            assert tiny_llama.config._attn_implementation != before
            assert "forward" in vars(tiny_llama.lm_head)
            with pytest.raises(LayersearchError, match="already"):
                with model_kernels(tiny_llama, "numba"):
                    pass
            raise RuntimeError("leave the block by an error")
    assert tiny_llama.config._attn_implementation == before
    assert not any("forward" in vars(m) for m in tiny_llama.modules())


def test_choice_of_kernels():
    assert set(CHOICES) == {"auto", "stock", "numba"}
    assert choose_kernels("auto", None) == "stock"  # nothing measured: nothing switched
    assert choose_kernels("stock", None) == "stock"
    with pytest.raises(LayersearchError, match="unknown kernels"):
        choose_kernels("fast", None)


def test_pick_kernels_weighs_the_speculative_step_not_one_token():
    stock = KernelTiming("stock", 0.100, (1.0, 1.3, 1.9, 2.5))
    flat = KernelTiming("numba", 0.100, (1.0, 1.02, 1.04, 1.1))
    slower_one = KernelTiming("numba", 0.103, (1.0, 1.0, 1.0, 1.0))
    costlier = KernelTiming("numba", 0.090, (1.0, 2.0, 3.0, 4.0))
    assert pick_kernels((stock, flat)) == "numba"
    # 3% slower for one token (within noise) but the step 0.25 s against 0.40 s: the step decides.
    assert pick_kernels((stock, slower_one)) == "numba"
    assert pick_kernels((stock, costlier)) == "stock"  # step 0.135 + 0.36 s > 0.15 + 0.25 s
    assert pick_kernels((stock,)) == "stock"


def test_pick_kernels_breaks_a_tie_by_the_flatter_verification():
    stock = KernelTiming("stock", 0.100, (1.0, 1.0, 1.0, 1.6))
    numba = KernelTiming("numba", 0.112, (1.0, 1.0, 1.0, 1.45))  # steps 0.310 vs 0.330 s: 6.6 % apart, beyond noise
    assert pick_kernels((stock, numba)) == "stock"
    close = KernelTiming("numba", 0.106, (1.0, 1.0, 1.0, 1.42))  # step 0.3097: a tie with stock's 0.310
    assert pick_kernels((stock, close)) == "numba"  # the flatter curve
    text = kernel_choice_text((stock, close), "numba")
    assert text.startswith("kernels: numba") and "stock: step 310.0 ms" in text


def test_profile_records_the_kernels_it_timed(tmp_path, tiny_llama):
    from layersearch.masks.mask import ModelInfo
    from layersearch.profiling.profiler import measure_profile

    info = ModelInfo("tiny-llama", 4, 64, "fp-tiny")
    profile = measure_profile(tiny_llama, info, contexts=(8, 16), max_verify=4, repeats=1, kernels="auto")
    assert [t.kernels for t in profile.kernel_timings] == ["stock", "numba"]
    assert profile.kernels == pick_kernels(profile.kernel_timings)
    assert all(len(t.verify_ratios) == 4 for t in profile.kernel_timings)
    again = LatencyProfile.load(profile.save(tmp_path / "p.json"))
    assert again == profile
    assert choose_kernels("auto", again) == profile.kernels and choose_kernels("stock", again) == "stock"
    one = measure_profile(tiny_llama, info, contexts=(8,), max_verify=2, repeats=1, kernels="numba")
    assert one.kernels == "numba" and [t.kernels for t in one.kernel_timings] == ["numba"]
    assert one.kernel_timings[0].verify_ratios == one.verify_ratios


# ----- the kernels as custom ops (what captured forwards call) ---------------------------------
def test_the_linear_op_is_the_kernel():
    generator = torch.Generator().manual_seed(5)
    weight, bias, x = torch.randn(37, 70, generator=generator), torch.randn(37, generator=generator), torch.randn(1, 5, 70, generator=generator)
    assert torch.equal(torch.ops.layersearch.rowwise_linear(x, weight, bias), rowwise_linear(x, weight, bias))
    assert torch.ops.layersearch.rowwise_linear(x, weight, None).shape == (1, 5, 37)


def test_attention_over_a_static_cache_reads_only_each_querys_prefix():
    """A static cache's key tensor runs past the queries (stale or zero entries); the mask ends
    each query's prefix there, and the result is bitwise the exact-length call's."""
    from layersearch.kernels.rowwise_attention import rowwise_attention

    generator = torch.Generator().manual_seed(6)
    query = torch.randn(1, 4, 3, 8, generator=generator)  # [1, h, t, d]: positions 10, 11, 12
    keys, values = (torch.randn(1, 2, 13, 8, generator=generator) for _ in range(2))  # [1, hkv, n, d]
    exact, _ = rowwise_attention(None, query, keys, values, torch.ones(3, 13, dtype=torch.bool).tril(10)[None, None])
    stale = torch.randn(1, 2, 51, 8, generator=generator) * 1e6  # what a static cache holds past position 12
    mask = torch.ones(3, 64, dtype=torch.bool).tril(10)[None, None]  # [1, 1, t, capacity]
    padded, _ = rowwise_attention(None, query, torch.cat([keys, stale], 2), torch.cat([values, stale], 2), mask)
    assert torch.equal(padded, exact)
    op = torch.ops.layersearch.rowwise_attention(query, torch.cat([keys, stale], 2), torch.cat([values, stale], 2), mask[0, 0], 8 ** -0.5, 0.0)
    assert torch.equal(op, exact)
    # Without a mask transformers means SDPA's is_causal: a prefill sees keys 0..i of a longer cache.
    prefill, _ = rowwise_attention(None, query, torch.cat([keys[:, :, :3], stale], 2), torch.cat([values[:, :, :3], stale], 2), None)
    alone, _ = rowwise_attention(None, query, keys[:, :, :3], values[:, :, :3], None)
    assert torch.equal(prefill, alone)


def test_routed_forwards_trace_without_a_graph_break(tiny_llama):
    from layersearch.kernels.select import is_traceable

    ids = torch.tensor([[3, 5, 7, 9]])
    with torch.inference_mode(), model_kernels(tiny_llama, "numba"):
        assert all(is_traceable(vars(m)["forward"]) for m in tiny_llama.modules() if "forward" in vars(m))
        expected = tiny_llama(ids).logits
        traced = torch.compile(lambda i: tiny_llama(i).logits, fullgraph=True, backend="eager")  # a break would raise
        assert torch.equal(traced(ids), expected)
    assert not is_traceable(lambda x: x)  # any other instance forward keeps a decoder eager
