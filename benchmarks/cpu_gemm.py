"""Why verifying k tokens costs ~2x one token on CPU: the LM head's small-M GEMM, four ways.

For the embedded model's LM head ([576 -> 49152], fp32, 113 MB of weights) and one of its MLP
projections, times y = x W^T for M = 1, 2, 4, 8 tokens on one thread (median of ``--repeats``):

  linear      torch.nn.functional.linear (what transformers runs)
  x@Wt        the weight stored [in, out] contiguous, torch.matmul
  mkl-packed  MKL's packed GEMM (cblas_sgemm_pack) with the weight packed once for batch M,
              torch.ops.mkl._mkl_linear (what inductor's CPU freezing uses for fp32)
  mkldnn      oneDNN inner product with the weight converted once (torch.utils.mkldnn)

and the memory-bound floor (weight bytes / the bandwidth of one streaming read on this core).

Run: ``python benchmarks/cpu_gemm.py`` (about a minute).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.utils.mkldnn


def median_ms(fn, repeats: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return 1e3 * statistics.median(samples)


def variants(weight: torch.Tensor, m: int) -> dict:
    """name -> function of x [m, in]: the ways to compute x @ weight.T."""
    transposed = weight.t().contiguous()  # [in, out]
    packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, m)
    dense = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    dense.weight.data = weight
    onednn = torch.utils.mkldnn.to_mkldnn(dense)
    return {
        "linear": lambda x: torch.nn.functional.linear(x, weight),
        "x@Wt": lambda x: x @ transposed,
        "mkl-packed": lambda x: torch.ops.mkl._mkl_linear(x, packed, weight, None, m),
        "mkldnn": lambda x: onednn(x),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    torch.set_num_threads(1)
    big = torch.ones(256 * 2**20 // 4)  # 256 MB: far beyond the caches
    read_ms = median_ms(lambda: big.sum(), args.repeats)
    gbps = 256 * 2**20 / (read_ms / 1e3) / 1e9
    print(f"streaming read on one thread: {gbps:.1f} GB/s")
    for name, (n_in, n_out) in {"lm_head": (576, 49152), "mlp up": (576, 1536)}.items():
        weight = torch.randn(n_out, n_in)
        floor = weight.numel() * 4 / gbps / 1e6
        print(f"\n{name} [{n_in} -> {n_out}], memory floor {floor:.2f} ms")
        print(f"{'M':>3} " + " ".join(f"{v:>11}" for v in ("linear", "x@Wt", "mkl-packed", "mkldnn")))
        base = None
        with torch.inference_mode():
            for m in (1, 2, 4, 8):
                x = torch.randn(m, n_in)
                reference = torch.nn.functional.linear(x, weight)
                row = []
                for variant, fn in variants(weight, m).items():
                    assert torch.allclose(fn(x), reference, rtol=1e-4, atol=1e-3), variant
                    row.append(median_ms(lambda: fn(x), args.repeats))
                base = base or row
                ratios = " ".join(f"{t:>7.2f}ms" + (f"(x{t / b:.1f})" if m > 1 else "      ") for t, b in zip(row, base))
                print(f"{m:>3} {ratios}")
    print("\n(xN: the time for M tokens over the same method's time for one token: verify(M)/verify(1) of that GEMM)")


if __name__ == "__main__":
    main()
