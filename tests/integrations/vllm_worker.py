"""Run in vLLM's environment by tests/integrations/test_vllm_serving.py: one engine, greedy, batched and single.

    python vllm_worker.py JOB.json OUT.json

JOB: {"model", "dtype", "speculative_config" (or null), "prompts": [[ids]], "max_tokens"},
optionally "wna16_reference": true (below).
OUT: {"batched": [[ids]], "single": [[ids]], "drafts", "draft_tokens", "accepted", "wna16_kernel"}:
the token ids vLLM generated for each prompt, all prompts in one batch and one by one, and its
speculative counters over both. Imports vLLM only (not layersearch: vLLM's environment pins
other versions).

vLLM's CPU build compiles its 4-bit W4A16 GEMM (``torch.ops._C.cpu_gemm_wna16``, which
``CPUWNA16LinearKernel`` calls) into its AVX-512 libraries only (``_C.abi3.so``,
``_C_AVX512.abi3.so``); on an AVX2-only CPU vLLM loads ``_C_AVX2.abi3.so``, which lacks it, and
an int4 draft fails at its first forward. With ``"wna16_reference": true`` and the op missing,
this worker registers a reference of that one op in plain torch (the kernel's contract on the
weights ``CPUWNA16LinearKernel`` repacked: ``x @ ((q - zp) * s) + bias``, float32 products)
and runs the engine in this process so the op is seen; everything else (loading the checkpoint,
the scheme, the repacking, the draft, the rejection sampler) is vLLM's. ``wna16_kernel`` says
which ran: "vllm", "reference" or null (the op was not looked up).
"""

import json
import os
import sys


def _counters(llm):
    names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted"}
    found = {key: 0 for key in names.values()}
    for metric in llm.get_metrics():
        if metric.name in names:
            found[names[metric.name]] = int(metric.value)
    return found


def _wna16_reference():
    """Register the reference ``_C::cpu_gemm_wna16`` where vLLM's build lacks it (module docstring).
    Returns "vllm" or "reference"."""
    import torch
    from vllm.platforms import current_platform

    current_platform.import_kernels()
    if hasattr(torch.ops._C, "cpu_gemm_wna16"):
        return "vllm"
    from vllm.model_executor.layers.quantization.utils.quant_utils import unpack_quantized_values_into_int32
    from vllm.scalar_type import scalar_types

    library = torch.library.Library("_C", "FRAGMENT")
    library.define("cpu_gemm_wna16(Tensor input, Tensor q_weight, Tensor(a2!) output, Tensor scales, Tensor? zeros, "
                   "Tensor? bias, SymInt pack_factor, str isa_hint) -> ()")
    cache = {}

    def dequantized(q_weight, scales, zeros):  # [K, N] float32, once per layer
        key = (q_weight.data_ptr(), scales.data_ptr())
        if key not in cache:
            groups, n = scales.shape
            k = q_weight.numel() * 8 // n
            # CPUWNA16LinearKernel's layout: [N / 16, K * 2] int32, 16 output columns a block, 8 a nibble-packed int32
            packed = q_weight.view(n // 16, k, 2).permute(1, 0, 2).reshape(k, n // 8)
            q = unpack_quantized_values_into_int32(packed, scalar_types.uint4, 1).float()  # [K, N]
            zp = (unpack_quantized_values_into_int32(zeros, scalar_types.uint4, 1).float() if zeros is not None
                  else torch.full((groups, n), 8.0))  # [G, N]
            size = k // groups
            cache[key] = (q - zp.repeat_interleave(size, 0)) * scales.float().repeat_interleave(size, 0)
        return cache[key]

    def gemm(input, q_weight, output, scales, zeros, bias, pack_factor, isa_hint):
        out = input.float() @ dequantized(q_weight, scales, zeros)
        if bias is not None:
            out = out + bias.float()
        output.copy_(out)

    library.impl("cpu_gemm_wna16", gemm, "CPU")
    _wna16_reference.library = library  # kept alive with the process
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine runs here, where the op is registered
    return "reference"


def main():
    job = json.loads(open(sys.argv[1]).read())
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    kernel = _wna16_reference() if job.get("wna16_reference") else None
    from vllm import LLM, SamplingParams

    kwargs = {"model": job["model"], "dtype": job["dtype"], "max_model_len": 1024, "disable_log_stats": False,
              "enforce_eager": True, "seed": 0}
    if job["speculative_config"]:
        kwargs["speculative_config"] = job["speculative_config"]
    llm = LLM(**kwargs)
    params = SamplingParams(temperature=0.0, max_tokens=job["max_tokens"])
    prompts = [{"prompt_token_ids": ids} for ids in job["prompts"]]
    batched = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]
    single = [list(llm.generate([p], params, use_tqdm=False)[0].outputs[0].token_ids) for p in prompts]
    with open(sys.argv[2], "w") as handle:
        json.dump({"batched": batched, "single": single, **_counters(llm), "wna16_kernel": kernel}, handle)


if __name__ == "__main__":
    main()
