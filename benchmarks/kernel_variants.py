"""Register blocks and prefetching for one pass over the weights at k = 8 (issue 23, session 7).

``--kernels numba`` multiplies 8 weight rows by 4 tokens in registers; at k = 8 it passes over
each 8-row block twice (the second time from cache), so verify(8) costs ~1.5 one-token
forwards on the 1.5B. This script times the alternatives tried for a single pass, on the 1.5B's
MLP shapes (random weights: the time depends on the shapes only), one thread, medians:

* ``RxT``: an R-row x T-token register block generated like the shipped 8 x 4 one;
* ``8x4 prefetch``: the shipped block, each token-group pass first prefetching (``llvm.prefetch``)
  its share of the next row block's cache lines, so that the memory stream goes on while the
  second pass computes from cache.

It prints, per weight shape and variant, the one-token time and time(k) / time(1) for k = 4, 8,
12, 16, and whether each variant's per-token results are independent of k (bitwise).

Run: ``python benchmarks/kernel_variants.py [--blocks 8x4,4x8,2x8,8x8,4x6]``
"""

from __future__ import annotations

import argparse
import time

import llvmlite.ir as ir
import numba
import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from layersearch.kernels import rowwise_linear

SHAPES = ((8960, 1536), (1536, 8960), (1536, 1536))  # up/gate, down (streamed from DRAM), q/o (fits in L3)
_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}


def block_source(rows: int, tokens: int, prefetch: bool = False) -> str:
    """Source of an R-row x T-token kernel (x [k', n], k, w [m, n], out [kp, m]), as rowwise_linear's."""
    lines = ["def kernel(x, k, w, out):", "    kp = out.shape[0]; n = w.shape[1]; m = w.shape[0]; groups = kp // %d" % tokens,
             f"    for block in range((m + {rows - 1}) // {rows}):", f"        r0 = {rows} * block"]
    lines += [f"        r{r} = min(r0 + {r}, m - 1)" for r in range(1, rows)]
    lines.append("        " + ", ".join(f"w{r}" for r in range(rows)) + " = " + ", ".join(f"w[r{r}]" for r in range(rows)))
    lines.append(f"        for t0 in range(0, kp, {tokens}):")
    if prefetch:  # this group's share of the next block's lines, fetched while this group computes
        lines += ["            if groups > 1 and r0 + %d < m:" % rows,
                  "                g = t0 // %d; lines = (n + 15) // 16" % tokens,
                  "                for r in range(r0 + %d, min(r0 + %d, m)):" % (rows, 2 * rows),
                  "                    for line in range(g * lines // groups, (g + 1) * lines // groups):",
                  "                        prefetch_line(w, r, 16 * line)"]
    lines += [f"            x{t} = x[min(t0 + {t}, k - 1)]" for t in range(tokens)]
    lines += ["            " + " = ".join(f"a{r}_{t}" for t in range(tokens)) + " = np.float32(0.0)" for r in range(rows)]
    lines.append("            for i in range(n):")
    lines.append("                " + ", ".join(f"y{t}" for t in range(tokens)) + " = " + ", ".join(f"x{t}[i]" for t in range(tokens)))
    for r in range(rows):
        lines.append(f"                u = w{r}[i]")
        lines += [f"                a{r}_{t} += u * y{t}" for t in range(tokens)]
    lines += [f"            out[t0 + {t}, r{r}] = a{r}_{t}" for r in range(rows) for t in range(tokens)]
    return "\n".join(lines)


@intrinsic
def prefetch_line(typingctx, array, row, col):
    """``llvm.prefetch`` (read, keep in all levels) of the cache line holding array[row, col]."""
    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        view = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, view, [args[1], args[2]], wraparound=False)
        byte_pointer = builder.bitcast(pointer, ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer.type, i32, i32, i32]), "llvm.prefetch.p0")
        builder.call(function, [byte_pointer, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(array, row, col), codegen


def compile_block(rows: int, tokens: int, prefetch: bool = False):
    """The kernel of :func:`block_source`, compiled by numba (serial, fastmath as shipped)."""
    namespace = {"np": np, "min": min, "prefetch_line": prefetch_line}
    exec(block_source(rows, tokens, prefetch), namespace)  # noqa: S102 - our own generated source
    return njit(fastmath=_FASTMATH, boundscheck=False)(namespace["kernel"])


def timed(kernel, tokens: int, w: np.ndarray, k: int, repeats: int, rng) -> tuple[float, np.ndarray, np.ndarray]:
    """(median seconds, out[:k], x) of ``kernel`` over k random tokens."""
    x = rng.standard_normal((k, w.shape[1]), dtype=np.float32)
    out = np.empty((-(-k // tokens) * tokens, w.shape[0]), np.float32)
    kernel(x, k, w, out)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        kernel(x, k, w, out)
        times.append(time.perf_counter() - start)
    return float(np.median(times)), out[:k].copy(), x


def main() -> None:
    """Time every variant on every shape and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", default="8x4,4x8,2x8,8x8,4x6", help="R x T register blocks to compare")
    args = parser.parse_args()
    numba.set_num_threads(1)
    rng = np.random.default_rng(0)
    variants = {"8x4 shipped": (rowwise_linear.rows_times_tokens_serial, 4)}
    for block in args.blocks.split(","):
        rows, tokens = map(int, block.split("x"))
        variants[block] = (compile_block(rows, tokens), tokens)
    variants["8x4 prefetch"] = (compile_block(8, 4, prefetch=True), 4)
    for shape in SHAPES:
        w = rng.standard_normal(shape, dtype=np.float32) * 0.02
        for name, (kernel, tokens) in variants.items():
            _, all16, x16 = timed(kernel, tokens, w, 16, 1, rng)
            out = np.empty((-(-3 // tokens) * tokens, shape[0]), np.float32)
            kernel(x16[:3].copy(), 3, w, out)
            one = timed(kernel, tokens, w, 1, 15, rng)[0]
            ratios = [timed(kernel, tokens, w, k, 9, rng)[0] / one for k in (4, 8, 12, 16)]
            print(f"{shape[0]}x{shape[1]:<5} {name:<13} one token {one * 1e3:5.2f} ms  k=4,8,12,16: "
                  + " ".join(f"{r:4.2f}" for r in ratios) + f"  k-independent: {np.array_equal(out[:3], all16[:3])}",
                  flush=True)


if __name__ == "__main__":
    main()
