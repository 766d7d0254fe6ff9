"""The numba kernels in bfloat16 and float16, and the activation kernels: a token's logits never
depend on how many tokens share the forward, so greedy speculative output equals our plain loop
run with the same kernels. (Stock kernels do not: in bfloat16 torch's GEMM and SDPA round a
k-token forward differently from k one-token forwards, and the same greedy runs part.)"""

from __future__ import annotations

import numba
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

from layersearch.common.errors import LayersearchError
from layersearch.kernels.activation import activation
from layersearch.kernels.dtypes import widen
from layersearch.kernels.rowwise_attention import rowwise_attention
from layersearch.kernels.rowwise_linear import rowwise_linear
from layersearch.kernels.select import choose_kernels, model_kernels
from layersearch.masks.mask import SkipMask
from layersearch.models.tiny import build_tiny_model, tiny_config
from layersearch.profiling.profile import LatencyProfile
from layersearch.runtime.draft_policy import DraftPolicy
from layersearch.runtime.drafters import PromptLookupDrafter
from layersearch.runtime.lookahead import StaticLookahead
from layersearch.runtime.loop import SpeculativeDecoder
from tests.kernels.test_kernels import _forward_logits_every_way
from tests.runtime.test_plugins import repetitive_prompt

HALF = [torch.bfloat16, torch.float16]


@numba.njit
def _widened(bits, out):  # every value through the kernels' own widening
    for i in range(bits.shape[0]):
        out[i] = widen(bits[i])


@pytest.mark.parametrize("dtype, bits", [(torch.bfloat16, np.uint16), (torch.float16, np.int16)], ids=str)
def test_widening_is_exact_for_every_bit_pattern(dtype, bits):
    values = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)
    out = np.empty(values.numel(), np.float32)
    _widened(values.view(torch.int16).numpy().view(bits), out)
    expected = values.float()
    got = torch.from_numpy(out)
    assert torch.equal(got.isnan(), expected.isnan())
    assert torch.equal(got[~got.isnan()], expected[~expected.isnan()])


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("n_in, n_out", [(64, 128), (70, 37), (576, 1536)])
def test_half_precision_linear_rows_are_bitwise_independent_of_the_token_count(dtype, n_in, n_out):
    generator = torch.Generator().manual_seed(n_in * 1000 + n_out)
    weight, bias = torch.randn(n_out, n_in, generator=generator).to(dtype), torch.randn(n_out, generator=generator).to(dtype)
    x = torch.randn(20, n_in, generator=generator).to(dtype)
    together = rowwise_linear(x, weight, bias)  # [20, out]
    assert together.dtype == dtype
    # float32 sums of the same products, rounded once: at most one ulp of the dtype apart
    exact = F.linear(x.double(), weight.double(), bias.double()).to(dtype)
    torch.testing.assert_close(together.float(), exact.float(), rtol=2 ** -7, atol=1e-3)
    for k in range(1, 21):
        assert torch.equal(rowwise_linear(x[:k], weight, bias), together[:k]), k
        assert torch.equal(rowwise_linear(x[k - 1 : k], weight, bias)[0], together[k - 1]), k  # alone


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_precision_attention_per_query_is_its_own(dtype):
    """Queries at positions 10..12 over one cache, together and one at a time (each with the
    keys up to its own position): the same bits, in the query's dtype."""
    generator = torch.Generator().manual_seed(7)
    query = torch.randn(1, 4, 3, 16, generator=generator).to(dtype)  # [1, h, t, d]
    keys, values = (torch.randn(1, 2, 13, 16, generator=generator).to(dtype) for _ in range(2))  # [1, hkv, n, d]
    mask = torch.ones(3, 13, dtype=torch.bool).tril(10)[None, None]  # [1, 1, t, n]: query i sees keys 0..10+i
    together, _ = rowwise_attention(None, query, keys, values, mask)
    assert together.dtype == dtype and together.shape == (1, 3, 4, 16)
    for i in range(3):
        alone, _ = rowwise_attention(None, query[:, :, i : i + 1], keys[:, :, : 11 + i], values[:, :, : 11 + i], None)
        assert torch.equal(alone[0, 0], together[0, i]), i
    exact = F.scaled_dot_product_attention(query.double(), keys.double().repeat_interleave(2, 1),
                                           values.double().repeat_interleave(2, 1), attn_mask=mask).transpose(1, 2)
    torch.testing.assert_close(together.float(), exact.float(), rtol=2 ** -7, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, *HALF], ids=str)
@pytest.mark.parametrize("name", ["silu", "gelu_tanh"])
def test_an_activation_value_is_its_own_whatever_the_call(dtype, name):
    """torch's vector and scalar loops round SiLU differently, and which values each computes
    depends on the tensor's size and torch's thread split; the kernel's result for a value is
    that value's alone (rows together or alone, serial or on numba's threads)."""
    x = (torch.randn(40, 4000, generator=torch.Generator().manual_seed(1)) * 4).to(dtype)  # past the parallel threshold
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]  # the parallel kernel where this machine has threads
        together = activation(x, name)
    finally:
        numba.set_num_threads(threads)
    assert together.dtype == dtype
    assert torch.equal(torch.cat([activation(x[j : j + 1, :1000], name) for j in range(40)]), together[:, :1000])
    assert torch.equal(activation(x[3, 17:20], name), together[3, 17:20])
    reference = F.silu(x.double()) if name == "silu" else F.gelu(x.double(), approximate="tanh")
    rtol = 2e-6 if dtype == torch.float32 else 2 ** -7
    torch.testing.assert_close(together.float(), reference.to(dtype).float(), rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma2"])
def test_half_precision_forward_is_bitwise_independent_of_the_verified_length(family, dtype):
    model = build_tiny_model(family, num_layers=3, seed=4).to(dtype)
    with model_kernels(model, "numba") as routed:
        together, widths, alone = _forward_logits_every_way(model)
    assert routed == 3 * 7 + 1  # q/k/v/o, gate/up/down per layer, and the LM head
    assert together.dtype == dtype
    assert torch.equal(alone, together)
    for k, logits in widths.items():
        assert torch.equal(logits, together[:k]), k
    stock, _, _ = _forward_logits_every_way(model)
    torch.testing.assert_close(together.float(), stock.float(), rtol=0.05, atol=0.02)  # same model, other kernels


def test_half_precision_routed_forwards_trace_without_a_graph_break():
    model = build_tiny_model("qwen2", num_layers=2, seed=0).bfloat16()
    ids = torch.tensor([[3, 5, 7, 9]])
    with torch.inference_mode(), model_kernels(model, "numba"):
        expected = model(ids).logits
        traced = torch.compile(lambda i: model(i).logits, fullgraph=True, backend="eager")  # a break would raise
        assert torch.equal(traced(ids), expected) and expected.dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_an_mlp_width_torch_splits_unevenly_stays_bitwise(dtype):
    """An MLP 1000 wide: torch's SiLU computes each row's last 8 values by its scalar loop alone
    and by the vector loop beside the next row, so in float32 a verification's logits differed
    from one-token forwards even with every linear layer and the attention on the kernels."""
    config = tiny_config("llama", num_layers=2)
    config.intermediate_size = 1000
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=dtype).eval()
    with model_kernels(model, "numba"):
        together, widths, alone = _forward_logits_every_way(model, k_max=12)
    assert torch.equal(alone, together)
    for k, logits in widths.items():
        assert torch.equal(logits, together[:k]), k


@pytest.fixture(scope="module", params=[("llama", 0), ("qwen2", 1)], ids=["llama", "qwen2"])
def bf16_model(request):
    """The tiny Llama and Qwen2 of the fp32 suites, in bfloat16, with no EOS."""
    family, seed = request.param
    model = build_tiny_model(family, num_layers=4, seed=seed).to(torch.bfloat16)  # type: ignore[arg-type]  # transformers mistypes .to's self
    model.generation_config.eos_token_id = None
    return model


EVERY = tuple(range(4))
METHODS = {
    "layer-skip": lambda m: SpeculativeDecoder(m, SkipMask(4, (), (3,)), policy=DraftPolicy(8, 0.0)),
    "prompt-lookup": lambda m: SpeculativeDecoder(m, drafter=PromptLookupDrafter()),
    "int4-self": lambda m: SpeculativeDecoder(m, SkipMask(4, int4_attention=EVERY, int4_mlp=EVERY, int4_head=True,
                                                          int4_group_size=32), lookahead=StaticLookahead(3)),
}


def greedy_differences(model, method: str, kernels: str, prompts: range = range(10), new: int = 40) -> list[int]:
    """The prompts (repetitive_prompt seeds) whose speculative tokens part from our plain loop's."""
    with model_kernels(model, kernels):
        plain = SpeculativeDecoder(model, SkipMask.none(4))
        speculative = METHODS[method](model)
        return [seed for seed in prompts if list(speculative.generate(repetitive_prompt(seed), new).token_ids)
                != list(plain.generate(repetitive_prompt(seed), new).token_ids)]


@pytest.mark.parametrize("method", list(METHODS))
def test_bf16_greedy_speculative_equals_our_plain_loop_with_the_kernels(bf16_model, method):
    """Ten prompts of 40 tokens, where stock kernels part from the plain loop on one to four of
    them (layer skip, the int4 self-draft, prompt lookup: greedy_differences(model, method,
    "stock") on this machine)."""
    assert greedy_differences(bf16_model, method, "numba") == []


def test_auto_takes_numba_for_half_precision_only_from_a_profile_that_timed_it(capsys):
    def profile(dtype: str, kernel_dtypes: tuple[str, ...] = ()) -> LatencyProfile:
        fields = dict(model={"name": "m", "num_layers": 4, "hidden_size": 64, "fingerprint": "f"}, device="cpu",
                      dtype=dtype, torch_version="2", attention_slope=0.0, attention_intercept=1e-3, mlp_seconds=1e-3,
                      base_seconds=1e-3, verify_ratios=[1.0, 1.0], kernels="numba")
        return LatencyProfile.from_dict({"schema_version": 2, "kind": "latency-profile", **fields,
                                         **({"kernel_dtypes": list(kernel_dtypes)} if kernel_dtypes else {})})

    assert choose_kernels("auto", profile("float32")) == "numba"
    assert choose_kernels("auto", profile("float32"), torch.float32) == "numba"
    before = profile("bfloat16")  # measured when numba ran float32 alone: its numba timings were stock's
    assert choose_kernels("auto", before) == "stock"
    assert "did not time the numba kernels in bfloat16" in capsys.readouterr().err
    timed = profile("bfloat16", ("float32", "bfloat16", "float16"))
    assert choose_kernels("auto", timed) == "numba" == choose_kernels("auto", timed, torch.bfloat16)
    assert choose_kernels("auto", profile("float32"), torch.bfloat16) == "stock"  # timed in float32, run in bfloat16
    assert choose_kernels("auto", timed, torch.float16) == "stock"
    assert choose_kernels("numba", before, torch.bfloat16) == "numba"  # asked for: routed
    with pytest.raises(LayersearchError, match="unknown kernels"):
        choose_kernels("fast", timed, torch.bfloat16)
    assert LatencyProfile.from_dict(timed.to_dict()) == timed  # kernel_dtypes kept in the file
    with pytest.raises(LayersearchError, match="kernel_dtypes"):
        profile("bfloat16", ("bf16",))


def test_a_profile_that_timed_numba_names_the_dtypes_it_ran(tiny_llama):
    from layersearch.masks.mask import ModelInfo
    from layersearch.profiling.profiler import measure_profile

    info = ModelInfo("tiny-llama", 4, 64, "fp-tiny")
    timed = measure_profile(tiny_llama, info, contexts=(8,), max_verify=2, repeats=1, kernels="numba")
    assert timed.kernel_dtypes == ("float32", "bfloat16", "float16")
    assert measure_profile(tiny_llama, info, contexts=(8,), max_verify=2, repeats=1, kernels="stock").kernel_dtypes == ()
