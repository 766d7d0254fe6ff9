"""Draft plans on a GPU: what the int8 twins cost there, on random-weight real shapes.

Prints (and with ``--out`` writes as JSON):

1. one Linear, one token: bf16 ``F.linear`` against the weight-only int8 twin (eager, as the
   twins run, and ``torch.compile``-d, which measured slower), per shape of Qwen2.5-1.5B and Llama-3.1-8B, with the bytes each reads and
   the bandwidth that implies (the floor of a one-token Linear is its weight bytes / bandwidth);
2. the latency profile of a random model of the Qwen2.5-1.5B shape in bf16, int8 settings
   included: one token of the target, the uniform int8 self-draft (every sub-layer and the head
   int8) and int8 with a quarter of the sub-layers skipped, against the bandwidth floor of a
   token; and the decode-phase speedup the profile predicts for the int8 self-draft at the
   acceptance it measured on the real 1.5B on CPU (random weights accept nothing, so that is
   the honest source of alpha; ``--alpha``).

Greedy equality and sampling of int8 plans on CUDA are tests: ``pytest tests/runtime/test_draft_plans.py -k cuda``.

Run on a CUDA machine: ``python benchmarks/gpu_plans.py --out gpu_plans.json``;
``--device cpu --shapes tiny`` runs the same code in seconds (CPU twins are fbgemm's, not fused).
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch._dynamo
from transformers import Qwen2Config

from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.models.precision import Int8Linear, weight_only_int8
from layersearch.profiling.profiler import measure_profile

from gpu_common import random_model, sync, write  # the GPU scripts' shared helpers (benchmarks/ is on sys.path when run)
import tool_args
from tool_args import ToolParser, run_tool
from layersearch.common.checks import MAX_DRAFT_LENGTH

# (in, out) of every distinct Linear; "tiny" for smoke tests.
LINEAR_SHAPES = {
    "qwen2.5-1.5b": [(1536, 1536), (1536, 256), (1536, 8960), (8960, 1536), (1536, 151936)],
    "llama-3.1-8b": [(4096, 4096), (4096, 1024), (4096, 14336), (14336, 4096), (4096, 128256)],
    "tiny": [(64, 64), (64, 256)],
}
MODEL_SHAPES = {
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=512, tie_word_embeddings=True),
}

MAX_POSITIONS = 4096  # the profiled model's context length


def median_seconds(fn, device: str, repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls after 5 warm-ups (synchronized)."""
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def device_bandwidth(device: str) -> float:
    """Bytes per second of a large device-to-device copy, counting bytes read and written."""
    src = torch.empty(2**28, dtype=torch.float32, device=device)  # 1 GiB
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src), device, 10)
    return 2 * src.numel() * 4 / seconds


def linear_section(shapes: str, device: str, dtype: torch.dtype, repeats: int, bandwidth: float) -> list[dict]:
    torch._dynamo.config.cache_size_limit = 64  # one compiled graph per Linear shape
    compiled = torch.compile(weight_only_int8, dynamic=False, fullgraph=True) if device.startswith("cuda") else weight_only_int8
    rows = []
    for shape in shapes.split(","):
        for fan_in, fan_out in LINEAR_SHAPES[shape]:
            linear = torch.nn.Linear(fan_in, fan_out, bias=False, device=device, dtype=dtype)
            twin = Int8Linear(linear, weight_only=True)
            x = torch.randn(1, 1, fan_in, device=device, dtype=dtype)
            with torch.inference_mode():
                full = median_seconds(lambda: linear(x), device, repeats)
                eager = median_seconds(lambda: weight_only_int8(x, twin.qweight, twin.scale, None), device, repeats)
                fused = median_seconds(lambda: compiled(x, twin.qweight, twin.scale, None), device, repeats)
            full_bytes, int8_bytes = fan_in * fan_out * linear.weight.element_size(), fan_in * fan_out
            row = {"shape": shape, "in": fan_in, "out": fan_out, "full_us": 1e6 * full, "int8_eager_us": 1e6 * eager,
                   "int8_fused_us": 1e6 * fused, "full_floor_us": 1e6 * full_bytes / bandwidth,
                   "int8_floor_us": 1e6 * int8_bytes / bandwidth}
            rows.append(row)
            print(f"  {shape} {fan_in}x{fan_out}: {str(dtype)[6:]} {row['full_us']:.1f} us (floor {row['full_floor_us']:.1f}), "
                  f"int8 eager {row['int8_eager_us']:.1f} us, fused {row['int8_fused_us']:.1f} us (floor {row['int8_floor_us']:.1f}); "
                  f"fused/full = {fused / full:.2f}", flush=True)
    return rows


def build(shape: str, device: str, dtype: torch.dtype, seed: int = 0):
    """A randomly initialised Qwen2 of ``shape`` on ``device`` (initialised in place: fast for big shapes)."""
    config = Qwen2Config(**MODEL_SHAPES[shape], max_position_embeddings=MAX_POSITIONS)
    return random_model(config, device, dtype, seed).eval()


def profile_section(shape: str, device: str, dtype: torch.dtype, repeats: int, bandwidth: float, alpha: float,
                    draft: int, context: int) -> dict:
    model = build(shape, device, dtype)
    layers = model.config.num_hidden_layers
    info = ModelInfo(f"random-{shape}", layers, model.config.hidden_size, "random")
    start = time.perf_counter()
    profile = measure_profile(model, info, contexts=(context,), max_verify=8, repeats=repeats)
    seconds = time.perf_counter() - start
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    plans = {  # the acceptance measured on the real 1.5B (CPU) belongs to the first plan only
        "int8 self-draft (every sub-layer and the head)": SkipMask.none(layers).kept_in_int8(),
        "int8, a quarter of the sub-layers skipped": SkipMask.uniform(layers, 0.25).kept_in_int8(),
        "int8 sub-layers, full head": SkipMask.none(layers).kept_in_int8(head=False),
    }
    token = profile.target_seconds(context)
    verify = profile.verify_ratio(draft + 1)
    rows = []
    for name, plan in plans.items():
        cost = profile.draft_seconds(plan, context)
        rows.append({"plan": name, "draft_ms": 1e3 * cost, "cost_coefficient": cost / token})
        print(f"  {name}: draft token {1e3 * cost:.2f} ms = {cost / token:.2f} of a forward", flush=True)
    expected = (1 - alpha ** (draft + 1)) / (1 - alpha)  # tokens per step at per-token acceptance alpha
    speedup = expected / (verify + draft * rows[0]["cost_coefficient"])
    print(f"  int8 self-draft, alpha {alpha}, {draft} drafted: predicted decode speedup {speedup:.2f}x", flush=True)
    floor = weight_bytes / bandwidth
    print(f"  target token {1e3 * token:.2f} ms at context {context}; weights {weight_bytes / 2**30:.2f} GiB read in "
          f"{1e3 * floor:.2f} ms at the measured bandwidth: {token / floor:.1f}x the floor; "
          f"verify({draft + 1})/verify(1) = {verify:.2f}; profile took {seconds:.0f} s", flush=True)
    return {"shape": shape, "dtype": str(dtype)[6:], "context": context, "token_ms": 1e3 * token, "floor_ms": 1e3 * floor,
            "verify_ratio": verify, "alpha": alpha, "draft": draft, "rows": rows, "predicted_decode_speedup": speedup, "profile": profile.to_dict()}


def main(argv=None) -> int:
    parser = ToolParser(__file__, description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shapes", default="qwen2.5-1.5b,llama-3.1-8b", help="Linear shapes (section 1)")
    parser.add_argument("--model-shape", default="qwen2.5-1.5b", help="model shape (section 2)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--alpha", type=float, default=0.97, help="per-token acceptance (real 1.5B, CPU: 0.97)")
    parser.add_argument("--draft", type=int, default=3)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    return run_tool(parser, lambda: plans_run(args))


def check_args(args) -> None:
    """Every argument checked before anything is built or timed: one line naming the option otherwise."""
    tool_args.names(args.shapes, "--shapes", LINEAR_SHAPES)
    tool_args.name(args.model_shape, "--model-shape", MODEL_SHAPES)
    tool_args.dtypes(args.dtype, "--dtype")
    tool_args.count(args.repeats, "--repeats")
    # alpha 1 divides by zero in the expected tokens per step; a draft length bounds the work
    tool_args.real(args.alpha, "--alpha", low=0.0, high=1.0, high_open=True)
    tool_args.count(args.draft, "--draft", maximum=MAX_DRAFT_LENGTH)
    tool_args.count(args.context, "--context", maximum=MAX_POSITIONS - 8)  # the profile verifies up to 8 tokens past it
    tool_args.output(args.out)
    args.device = tool_args.device(args.device)


def plans_run(args) -> int:
    """Both sections, written to ``--out`` as each ends."""
    check_args(args)
    dtype = getattr(torch, args.dtype)
    report: dict = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu", "torch": torch.__version__}
    bandwidth = device_bandwidth(args.device)
    report["bandwidth_gbs"] = bandwidth / 1e9
    print(f"device: {report['device']}, torch {torch.__version__}, copy bandwidth {bandwidth / 1e9:.0f} GB/s", flush=True)
    print("1. one Linear, one token", flush=True)
    report["linear"] = linear_section(args.shapes, args.device, dtype, args.repeats, bandwidth)
    write(report, args.out)
    print("2. profile of a draft plan", flush=True)
    report["profile"] = profile_section(args.model_shape, args.device, dtype, max(3, args.repeats // 10), bandwidth,
                                        args.alpha, args.draft, args.context)
    write(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
