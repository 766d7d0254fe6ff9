"""One Linear, one token, one thread: fp32 against fbgemm's dynamic int8 and torch's CPU int4
weight-only kernel (``_weight_int4pack_mm_for_cpu``, groups of 32), at the 1.5B's MLP and attention
shapes. Why the draft plans have no int4 precision on CPU (docs/results.md, session 9).

    python benchmarks/cpu_int4.py
"""
import time, statistics, torch
from layersearch.models.quantize import quantized_like
torch.set_num_threads(1)
def med(fn, n=30):
    for _ in range(5): fn()
    ts=[]
    for _ in range(n):
        t=time.perf_counter(); fn(); ts.append(time.perf_counter()-t)
    return statistics.median(ts)*1e3
for fin, fout in [(1536, 8960), (8960, 1536), (1536, 1536)]:
    lin = torch.nn.Linear(fin, fout, bias=False)
    x = torch.randn(1, fin)
    q8 = quantized_like(lin)
    row = [f"{fin}x{fout}", f"fp32 {med(lambda: lin(x)):.3f} ms", f"int8 fbgemm {med(lambda: q8(x)):.3f} ms"]
    try:
        w = lin.weight.detach()
        gs = 32
        wg = w.reshape(fout, fin // gs, gs)
        mn, mx = wg.amin(-1, keepdim=True), wg.amax(-1, keepdim=True)
        scale = ((mx - mn) / 15).clamp_min(1e-8); zero = mn
        q = torch.round((wg - mn) / scale).clamp(0, 15).to(torch.int32).reshape(fout, fin)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        sz = torch.cat([scale.reshape(fout, -1, 1), (zero + 8 * scale).reshape(fout, -1, 1)], -1).transpose(0, 1).contiguous()
        f = lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, gs, sz)
        row.append(f"int4 g32 {med(f):.3f} ms")
    except Exception as e:
        row.append(f"int4: {type(e).__name__}: {str(e)[:120]}")
    print(", ".join(row), flush=True)
