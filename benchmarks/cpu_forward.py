"""verify(k)/verify(1) of the embedded model's whole forward on CPU, with the linear layers
computed three ways (interleaved rounds, so load on a shared machine hits all alike):

  stock        transformers' nn.Linear (MKL sgemm, weight packed on every call)
  packed-1     MKL's packed GEMM for one-token forwards (weights packed once, as inductor's
               CPU freezing does); stock for k > 1 (packing is for one M)
  onednn       every linear through oneDNN's inner product, weights converted once

Run: ``python benchmarks/cpu_forward.py`` (a few minutes; one thread, context 256).
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import contextmanager

import torch
import torch.utils.mkldnn

from layersearch.models.loading import load_model
from layersearch.runtime.cache import new_cache, truncate_cache
from layersearch.runtime.forward import forward_tokens

TOKENS = (1, 2, 4, 8)


class PackedForOne(torch.nn.Module):
    """y = x W^T: MKL's packed GEMM when x holds one token, the stock linear otherwise."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.weight = linear.weight
        self.packed = torch.ops.mkl._mkl_reorder_linear_weight(linear.weight.detach(), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])  # [tokens, in]
        if flat.shape[0] != 1:
            return torch.nn.functional.linear(x, self.weight)
        return torch.ops.mkl._mkl_linear(flat, self.packed, self.weight, None, 1).reshape(*x.shape[:-1], -1)


class OneDnn(torch.nn.Module):
    """y = x W^T through oneDNN with the weight converted once."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.inner = torch.utils.mkldnn.to_mkldnn(linear)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.reshape(-1, x.shape[-1])).reshape(*x.shape[:-1], -1)


@contextmanager
def linears_as(model: torch.nn.Module, wrap):
    """Every nn.Linear of ``model`` replaced by ``wrap(linear)`` inside the block."""
    swapped = []
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, name, wrap(child))
                swapped.append((module, name, child))
    try:
        yield
    finally:
        for module, name, child in swapped:
            setattr(module, name, child)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--context", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = load_model().model
    ids = torch.randint(100, 40000, (args.context,), generator=torch.Generator().manual_seed(0))
    variants = {"stock": None, "packed-1": PackedForOne, "onednn": OneDnn}
    samples = {(v, k): [] for v in variants for k in TOKENS}
    with torch.inference_mode():
        cache = new_cache(model)
        forward_tokens(model, ids, 0, cache, keep=1)
        for round_ in range(args.rounds + 1):  # round 0 warms up
            for variant, wrap in variants.items():
                with linears_as(model, wrap) if wrap else _nothing():
                    for k in TOKENS:
                        start = time.perf_counter()
                        forward_tokens(model, list(range(5, 5 + k)), args.context, cache)
                        seconds = time.perf_counter() - start
                        truncate_cache(cache, args.context)
                        if round_:
                            samples[(variant, k)].append(seconds)
            print(f"round {round_}/{args.rounds}", flush=True)
    print(f"\nforward over k tokens at context {args.context}, median of {args.rounds} rounds (ms), and /k=1")
    for variant in variants:
        times = {k: 1e3 * statistics.median(samples[(variant, k)]) for k in TOKENS}
        print(f"{variant:>9}: " + "  ".join(f"k={k} {t:6.1f} (x{t / times[1]:.2f})" for k, t in times.items()))


@contextmanager
def _nothing():
    yield


if __name__ == "__main__":
    main()
