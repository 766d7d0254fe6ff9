"""CPU verification kernels: verify(k)/verify(1) and the one-token forward, per candidate.

Timing depends only on shapes, so random weights with real shapes are used:

  qwen1.5b  Qwen2.5-Coder-1.5B (hidden 1536, intermediate 8960, 28 layers, 12 heads, 2 KV heads
            of 128, vocab 151936, tied embeddings; ~6 GB fp32)
  smol135m  the embedded SmolLM2-135M (hidden 576, intermediate 1536, 30 layers, 9 heads,
            3 KV heads, vocab 49152, tied)

Two parts:

  linear   one Linear of each of the model's shapes, k = 1..16 tokens:
           stock F.linear, torch.mm(W, x.T) (y^T = W x^T), and the numba row-wise kernel
  forward  a whole forward over k new tokens after a cache of --context positions, with
           stock kernels and with ``model_kernels(model, "numba")`` (linear + attention)

Candidates are interleaved round by round and the median is reported (the machine is shared).

Run: ``python benchmarks/cpu_verify_kernels.py --model smol135m --threads 1`` (a few minutes);
``--part linear`` or ``--part forward`` for one part.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from layersearch.kernels.select import model_kernels, warm_up
import numba

from layersearch.kernels.rowwise_linear import prepared_linear, rowwise_linear

SHAPES = {
    "qwen1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                     num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "smol135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                     num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True),
}
KS = (1, 2, 3, 4, 6, 8, 12, 16)


def linear_shapes(shape: dict) -> dict[str, tuple[int, int]]:
    """name -> (in, out) of each distinct Linear of a decoder layer, and the LM head."""
    h, i = shape["hidden_size"], shape["intermediate_size"]
    head_dim = h // shape["num_attention_heads"]
    kv = shape["num_key_value_heads"] * head_dim
    return {"q/o": (h, h), "k/v": (h, kv), "gate/up": (h, i), "down": (i, h), "lm_head": (h, shape["vocab_size"])}


def interleaved_medians(candidates: dict, rounds: int) -> dict[str, float]:
    """name -> median seconds of fn(), candidates run in a rotating order each round."""
    names = list(candidates)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds + 1):  # round 0 warms up
        order = names[round_ % len(names):] + names[: round_ % len(names)]
        for name in order:
            start = time.perf_counter()
            candidates[name]()
            if round_:
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def linear_part(shape: dict, rounds: int) -> None:
    """Per-Linear table: ms for k tokens, and each candidate's ratio to its own k = 1."""
    print("per Linear (ms; xR = time(k) / same candidate's time(1))")
    for name, (n_in, n_out) in linear_shapes(shape).items():
        weight = torch.randn(n_out, n_in)
        numba_linear = prepared_linear(weight, threads=numba.get_num_threads())  # as a routed layer runs it
        base: dict[str, float] = {}
        print(f"  {name} [{n_in} -> {n_out}]")
        for k in KS:
            x = torch.randn(k, n_in)
            assert torch.allclose(rowwise_linear(x, weight), torch.nn.functional.linear(x, weight), rtol=1e-3, atol=1e-3)
            times = interleaved_medians({
                "linear": lambda: torch.nn.functional.linear(x, weight),
                "mm(W,x.T)": lambda: torch.mm(weight, x.T),
                "numba": lambda: numba_linear(x),
            }, rounds)
            base = base or times
            cells = "  ".join(f"{c} {1e3 * t:7.2f} (x{t / base[c]:.2f})" for c, t in times.items())
            print(f"    k={k:>2}  {cells}")


def forward_part(shape: dict, context: int, rounds: int, ks: tuple[int, ...] = KS) -> None:
    """Whole-forward table: one-token ms and verify(k)/verify(1) with stock and numba kernels."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from layersearch.runtime.cache import new_cache, truncate_cache
    from layersearch.runtime.forward import forward_tokens

    config = Qwen2Config(**shape, max_position_embeddings=4096)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.float32).eval()
    model.requires_grad_(False)
    ids = torch.randint(shape["vocab_size"], (context + max(ks),))
    with torch.inference_mode():
        cache = new_cache(model)
        forward_tokens(model, ids[:context], 0, cache, keep=1)

        def verify(k: int):
            def run():
                forward_tokens(model, ids[context:context + k], context, cache)
                truncate_cache(cache, context)
            return run

        # Kernel sets alternate round by round (rotating which goes first), so load bursts on this
        # shared machine hit both; within a round every k is timed once.
        names = ("stock", "numba")
        samples = {name: {k: [] for k in ks} for name in names}
        for round_ in range(rounds + 1):  # round 0 warms up
            for name in names[round_ % 2:] + names[: round_ % 2]:
                with model_kernels(model, name):
                    for k in ks:
                        start = time.perf_counter()
                        verify(k)()
                        if round_:
                            samples[name][k].append(time.perf_counter() - start)
        results = {name: {k: statistics.median(v) for k, v in per_k.items()} for name, per_k in samples.items()}
    stock_one = results["stock"][1]
    print(f"whole forward at context {context} (ms; verify(k)/verify(1); one-token vs stock)")
    for kernels, times in results.items():
        ratios = "  ".join(f"k={k}: {times[k] / times[1]:.2f}" for k in ks)
        print(f"  {kernels:<6} one token {1e3 * times[1]:8.2f} ms ({times[1] / stock_one:.2f} of stock)  {ratios}")
        print(f"  {'':<6} ms: " + " ".join(f"{1e3 * times[k]:.1f}" for k in ks))
    del model, cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(SHAPES), default="smol135m")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--part", choices=("linear", "forward", "both"), default="both")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ks", default=",".join(map(str, KS)), help="token counts of the whole-forward part (1 first)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warm_up()
    shape = SHAPES[args.model]
    print(f"{args.model}, {args.threads} thread(s), torch {torch.__version__}")
    if args.part in ("linear", "both"):
        linear_part(shape, args.rounds)
    if args.part in ("forward", "both"):
        ks = tuple(int(k) for k in args.ks.split(","))
        if ks[0] != 1:
            parser.error("--ks must start with 1 (the ratios are to one token)")
        forward_part(shape, args.context, args.rounds, ks)


if __name__ == "__main__":
    main()
