"""GPU checks that CPU cannot show, on random-weight models of real 1B and 8B shapes.

The default section, ``captured``, prints the captured runtime's table (one run, bf16):

* our loop with nothing skipped, captured (``compile=True``: static cache, CUDA graphs) and
  eager, against transformers' ``generate`` with ``cache_implementation="static"`` (the fastest
  path users run, auto-compiled) and its eager ``generate``, tokens/s over interleaved repeats;
* on the 8B shape, the captured parts: a one-token forward, the draft cost of uniform 0.25 and
  0.5 masks, and verify(k) / verify(1) for k = 1..8;
* the exact-mask model: the 8B body with the 0.5 mask's skipped ``o_proj`` and ``down_proj``
  zeroed, so the draft is the target (alpha = 1 up to bf16 rounding); realized speedup over HF
  static and over our plain loop at k = 2, 4, 6, beside what the parts predict;
* greedy equality in fp32 with capture on (ours vs HF ``generate``), and the sampling law with
  capture on (chi-square against the exact law of a 6-token vocabulary).

Older sections (``--sections greedy,sampling,loop,profile``) check eager decoding.

Run on a CUDA machine:  ``python benchmarks/gpu_report.py --shapes 8b,1b --out gpu.json``
(``--shapes tiny --device cpu`` runs the same code on a CPU, for a smoke test).
"""

from __future__ import annotations

import itertools
import os
import json
import statistics
import sys
import time

import numpy as np
import torch
from scipy.stats import chisquare

from layersearch.common.errors import LayersearchError
from layersearch.common.extras import has_module
from layersearch.evaluation.bench import _step_prediction
from layersearch.experiments.knapspec import knapspec_decoder
from layersearch.masks.mask import SkipMask
from layersearch.models.loading import describe_model
from layersearch.models.skipping import skipping
from layersearch.runtime.backend import compile_key
from layersearch.runtime.baseline import hf_generate
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.draft_policy import DraftPolicy
from layersearch.runtime.lookahead import StaticLookahead
from layersearch.profiling.profiler import measure_profile
from layersearch.runtime.sampling import SamplingConfig
from layersearch.runtime.stats import combine

from gpu_common import SHAPES, build, prompts, sync, timed, write  # noqa: F401  (benchmarks/ is on sys.path)
import tool_args
from tool_args import ToolParser, run_tool

#: The sections ``--sections`` chooses from, in the order they run.
SECTIONS = ("captured", "greedy", "sampling", "loop", "profile", "int4")
#: --sampling-runs when not given: full shapes, and the tiny smoke shape (the eager sampling section's own).
SAMPLING_RUNS, SMALL_SAMPLING_RUNS, SMALL_EAGER_SAMPLING_RUNS = 3000, 200, 300
#: The keys of a raw report whose sections have a table (``--table``): the captured and the int4 sections.
TABLE_KEYS = ("captured", "int4_part")
#: A raw report's keys that are not sections: the device and its provenance record.
RECORD_KEYS = ("device", "torch", "argv", "commit", "python", "transformers")

# ----- 1. greedy equality ---------------------------------------------------------------------
def divergence(model, prompt: torch.Tensor, ours: tuple[int, ...], theirs: tuple[int, ...]) -> dict | None:
    """None when equal; else where they part and whether the full model calls it a tie there."""
    index = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
    if index is None:
        return None
    ids = torch.cat([prompt[0], torch.tensor(theirs[:index])]).to(model.device).view(1, -1)
    with torch.inference_mode():
        logits = model(ids).logits[0, -1].float()  # [vocab]
    gap = abs(float(logits[ours[index]] - logits[theirs[index]]))
    top = float(logits.abs().max())
    # One unit in the last place of the largest logit: bf16 keeps 8 significant bits, fp32 24.
    ulp = top * (2.0**-7 if model.dtype == torch.bfloat16 else 2.0**-23)
    return {"index": index, "logit_gap": gap, "tie": gap <= 4 * ulp, "ulp": ulp}


def greedy_section(shape: str, device: str, dtype: torch.dtype, new_tokens: int, count: int, ks=(4, 8)) -> dict:
    model = build(shape, device, dtype, head_scale=4.0)
    layers = model.config.num_hidden_layers
    masks = {
        "uniform-0.25": SkipMask.uniform(layers, 0.25),
        "uniform-0.5": SkipMask.uniform(layers, 0.5),
        "attention-half": SkipMask(layers, tuple(range(0, layers, 2)), ()),
        "int8-self-draft": SkipMask.none(layers).kept_in_int8(),  # draft plans (weight-only int8 on CUDA)
        "int8-uniform-0.25": SkipMask.uniform(layers, 0.25).kept_in_int8(),
    }
    rows = []
    for (name, mask), k in itertools.product(masks.items(), ks):
        equal, ties, bugs, gaps = 0, 0, [], []
        for ids in prompts(model.config.vocab_size, count, 32, seed=k):
            theirs = hf_generate(model, ids, new_tokens).token_ids
            ours = SpeculativeDecoder(model, mask, policy=DraftPolicy(k, 0.0)).generate(ids, new_tokens).token_ids
            where = divergence(model, ids, ours, theirs)
            if where is None:
                equal += 1
            elif where["tie"]:
                ties += 1
                gaps.append(where["logit_gap"] / where["ulp"])
            else:
                bugs.append(where)
                gaps.append(where["logit_gap"] / where["ulp"])
        rows.append({"mask": name, "k": k, "sequences": count, "identical": equal, "tie_divergences": ties,
                     "non_tie_divergences": bugs, "gaps_in_ulps": gaps})
        print(f"  {shape} {str(dtype)[6:]} {name} k={k}: {equal}/{count} identical, {ties} at numerical ties, "
              f"{len(bugs)} other; gaps in ulps {[round(g, 1) for g in gaps]}", flush=True)
    del model
    return {"shape": shape, "dtype": str(dtype)[6:], "new_tokens": new_tokens, "rows": rows}


# ----- 2. sampling ------------------------------------------------------------------------------
def three_token_law(model, prompt: list[int], mask: SkipMask | None = None) -> np.ndarray:
    """Exact P(t1, t2, t3) over a 6-token vocabulary (the target's, or the draft's under ``mask``)."""
    def probs(batch):  # [b, n] -> [b, 6]
        with torch.inference_mode():
            return torch.softmax(model(torch.tensor(batch, device=model.device)).logits[:, -1].float(), -1).cpu()

    def law():
        out = np.zeros((6, 6, 6))
        p1 = probs([prompt])[0]
        p2 = probs([prompt + [a] for a in range(6)])  # [6, 6]
        for a in range(6):
            p3 = probs([prompt + [a, b] for b in range(6)])  # [6, 6]
            out[a] = (p1[a] * p2[a][:, None] * p3).numpy()
        return out.reshape(-1)

    if mask is None:
        return law()
    with skipping(model, mask):
        return law()


def pooled_pvalue(observed: np.ndarray, probs: np.ndarray) -> float:
    expected = probs / probs.sum() * observed.sum()
    small = expected < 5
    obs, exp = np.append(observed[~small], observed[small].sum()), np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def sampled_counts(decoder: SpeculativeDecoder, prompt: list[int], runs: int) -> tuple[np.ndarray, int, int, str]:
    """Counts of the 216 three-token outcomes over ``runs`` seeded draws at temperature 1, the
    tokens drafted and accepted, and the path the generations ran."""
    observed, drafted, accepted, path = np.zeros(216), 0, 0, ""
    for seed in range(runs):
        result = decoder.generate(prompt, 3, sampling=SamplingConfig(temperature=1.0, seed=seed))
        a, b, c = result.token_ids
        observed[a * 36 + b * 6 + c] += 1
        drafted, accepted, path = drafted + result.stats.drafted, accepted + result.stats.accepted, result.stats.path
    return observed, drafted, accepted, path


def sampling_section(shape: str, device: str, dtype: torch.dtype, runs: int) -> dict:
    model = build(shape, device, dtype, vocab=6, head_scale=3.0 if shape != "tiny" else 12.0, seed=5)
    mask = SkipMask.uniform(model.config.num_hidden_layers, 0.5)
    prompt = [1, 4, 2]
    target, draft = three_token_law(model, prompt), three_token_law(model, prompt, mask)
    start = time.perf_counter()
    observed, drafted, accepted, _ = sampled_counts(SpeculativeDecoder(model, mask, policy=DraftPolicy(2, 0.0)), prompt, runs)
    out = {"shape": shape, "dtype": str(dtype)[6:], "runs": runs, "drafted": drafted, "accepted": accepted,
           "p_target": pooled_pvalue(observed, target), "p_draft_law": pooled_pvalue(observed, draft),
           "tv_target_draft": 0.5 * float(np.abs(target - draft).sum()), "seconds": time.perf_counter() - start}
    print(f"  sampling {shape}: p(target law) = {out['p_target']:.3f}, p(draft law) = {out['p_draft_law']:.2g}, "
          f"TV(target, draft) = {out['tv_target_draft']:.2f}, accepted {accepted}/{drafted}", flush=True)
    return out


# ----- 3. loop vs generate ----------------------------------------------------------------------
def loop_section(shape: str, device: str, dtype: torch.dtype, new_tokens: int, repeats: int) -> dict:
    model = build(shape, device, dtype)
    ids = prompts(model.config.vocab_size, 1, 128)[0]
    loop = SpeculativeDecoder(model)  # no mask: every step is a plain one-token step
    hf_generate(model, ids, 16), loop.generate(ids, 16)  # warm-up (kernels, allocator)
    hf, ours = [], []
    for _ in range(repeats):
        hf.append(timed(device, lambda: hf_generate(model, ids, new_tokens))[0])
        ours.append(timed(device, lambda: loop.generate(ids, new_tokens))[0])
    ratio = statistics.median(a / b for a, b in zip(hf, ours))
    out = {"shape": shape, "new_tokens": new_tokens, "repeats": repeats, "hf_tokens_per_s": new_tokens / statistics.median(hf),
           "loop_tokens_per_s": new_tokens / statistics.median(ours), "loop_over_hf": ratio}
    print(f"  {shape}: HF generate {out['hf_tokens_per_s']:.1f} tok/s, our loop {out['loop_tokens_per_s']:.1f} tok/s, "
          f"loop / HF speed = {ratio:.3f}", flush=True)
    return out


# ----- 4 + 5. profile, realized vs predicted, KnapSpec ----------------------------------------
def profile_section(shape: str, device: str, dtype: torch.dtype, new_tokens: int, repeats: int, contexts) -> dict:
    model = build(shape, device, dtype, head_scale=4.0)
    info = describe_model(model, f"random-{shape}")
    start = time.perf_counter()
    profile = measure_profile(model, info, contexts=contexts, max_verify=16, repeats=5)
    profile_seconds = time.perf_counter() - start
    layers = model.config.num_hidden_layers
    ids_list = prompts(model.config.vocab_size, 2, 256, seed=3)
    decoders = {"loop": SpeculativeDecoder(model)}
    for ratio in (0.25, 0.5):
        decoders[f"uniform-{ratio}"] = SpeculativeDecoder(model, SkipMask.uniform(layers, ratio),
                                                          policy=DraftPolicy(8, 0.0))
    knap = knapspec_decoder(model, profile, policy=DraftPolicy(8, 0.0))
    decoders["knapspec"] = knap
    decoders["loop-again"] = SpeculativeDecoder(model)  # the same plain loop last: shows order effects
    for d in decoders.values():
        d.generate(ids_list[0], 8)  # warm-up
    totals = {name: [] for name in decoders}
    stats = {name: [] for name in decoders}
    picks = []  # KnapSpec's re-selections (combine() pools counts, not records)
    for _ in range(repeats):
        for name, decoder in decoders.items():
            seconds, results = timed(device, lambda: [decoder.generate(ids, new_tokens) for ids in ids_list])
            totals[name].append(seconds)
            stats[name].append(combine([r.stats for r in results]))
            if name == "knapspec":
                picks.extend(s for r in results for s in r.stats.selections)
    rows = []
    for name in decoders:
        if name == "loop":
            continue
        pooled = combine(stats[name])
        realized = statistics.median(a / b for a, b in zip(totals["loop"], totals[name]))
        predicted = profile.predicted_speedup_of_steps(pooled.steps)
        row = {"config": name, "M": pooled.mean_accepted_length, "alpha": pooled.acceptance_rate,
               "realized_vs_loop": realized, "predicted": predicted,
               "realized_over_predicted": realized / predicted if predicted else None,
               "terms": _step_prediction(profile, pooled.steps) if pooled.steps else None}
        if name == "knapspec":
            step_s = statistics.median(st.total_seconds / max(1, len(st.steps)) for st in stats[name])
            reselect = statistics.median(s["seconds"] for s in picks)
            row.update(reselections=len(picks), reselection_ms=1e3 * reselect, step_ms=1e3 * step_s,
                       reselection_share=sum(s["seconds"] for s in picks) / sum(totals[name]),
                       chosen=[(s.get("skipped"), s.get("gamma"), s.get("tpt")) for s in picks[:6]])
        rows.append(row)
        pred = f"{predicted:.2f}" if predicted else "-"
        extra = (f", re-selection {row['reselection_ms']:.1f} ms vs step {row['step_ms']:.1f} ms "
                 f"({100 * row['reselection_share']:.1f}% of time)" if name == "knapspec" else "")
        print(f"  {shape} {name}: M={row['M']:.2f} realized {realized:.2f}x predicted {pred}x{extra}; terms {row['terms']}", flush=True)
    return {"shape": shape, "profile": profile.to_dict(), "profile_seconds": profile_seconds,
            "verify_ratio_8": profile.verify_ratio(8), "verify_ratio_16": profile.verify_ratio(16), "rows": rows}



# ----- captured: the table of the captured runtime against transformers' fastest path -------
def hf_static(model, ids, new_tokens):
    """transformers' fastest path: ``generate`` with a static cache (auto torch.compile, CUDA graphs)."""
    return model.generate(ids.to(model.device), attention_mask=torch.ones_like(ids).to(model.device),
                          max_new_tokens=new_tokens, do_sample=False, cache_implementation="static")


def hf_eager(model, ids, new_tokens):
    """transformers' ``generate`` with its default dynamic cache, eager."""
    return model.generate(ids.to(model.device), attention_mask=torch.ones_like(ids).to(model.device),
                          max_new_tokens=new_tokens, do_sample=False)


def interleaved(device: str, runs: dict, repeats: int, raw: dict | None = None) -> dict:
    """Median seconds of each named run, the runs interleaved ``repeats`` times after two warm-ups
    each; ``raw`` (a dict) receives every run's min / median / max and raw seconds."""
    for fn in runs.values():
        fn(), fn()
    seconds = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            seconds[name].append(timed(device, fn)[0])
    if raw is not None:
        raw.update({name: spread(values) for name, values in seconds.items()})
    return {name: statistics.median(values) for name, values in seconds.items()}


def replay_ms(device: str, fn, count: int = 30) -> float:
    """Median milliseconds of ``fn`` over ``count`` calls (each timed by CUDA events)."""
    fn(), fn(), fn()
    times = []
    for _ in range(count):
        if device.startswith("cuda"):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def half_mask(layers: int) -> SkipMask:
    """Half of the sub-layers skipped, spread evenly: whole layers (SkipMask.uniform's 0.5)."""
    return SkipMask.uniform(layers, 0.5)


@torch.inference_mode()
def parts_section(decoder: SpeculativeDecoder, device: str, context: int, ks=range(1, 9)) -> dict:
    """Captured forwards of the decoder's model at ``context``: a one-token forward, the draft cost of
    uniform masks over it, and verify(k) / verify(1)."""
    model = decoder.model
    layers = model.config.num_hidden_layers
    cache = decoder.static_cache(context + 64)
    ids = torch.randint(3, model.config.vocab_size, (16,), device=device)

    def forward(plan, n):
        view = decoder.view(plan)
        key = compile_key(decoder.model, plan, n, n, None, cache)  # the runtime's own key: generations reuse these
        return lambda: decoder.compiled.forward(view, key, cache, ids[:n], context, n, None)

    verify_ms = {k: replay_ms(device, forward(None, k)) for k in ks}
    one = verify_ms[1]  # every ratio over verify(1) of this same sweep, not a separately timed forward
    drafts = {name: replay_ms(device, forward(mask, 1)) / one
              for name, mask in (("uniform-0.25", SkipMask.uniform(layers, 0.25)), ("uniform-0.5", half_mask(layers)))}
    verify = {k: value / one for k, value in verify_ms.items()}
    return {"context": context, "one_token_ms": one, "draft_cost": drafts, "verify_ratio": verify, "verify_ms": verify_ms}


def capture_section(model, label: str, device: str, new_tokens: int, repeats: int, parts: bool, exact_ks=(2, 4, 6),
                    speculative: bool = False, prompt_tokens: int = 128) -> dict:
    """Our plain loop (captured, and eager) against HF static and eager generate; on a CPU also our
    loop with the numba kernels, eager and captured. With ``parts``, the captured parts
    and the exact-mask model's realized vs predicted speedups (random weights only: it zeroes some);
    with ``speculative``, the model as its own int8 draft (static 3) captured and eager."""
    ids = prompts(model.config.vocab_size, 1, prompt_tokens)[0]
    plain = SpeculativeDecoder(model, compile=True)
    eager = SpeculativeDecoder(model)
    t0 = time.perf_counter()
    first = plain.generate(ids, new_tokens)
    compile_s = time.perf_counter() - t0
    runs = {"hf_static": lambda: hf_static(model, ids, new_tokens), "ours_captured": lambda: plain.generate(ids, new_tokens),
            "hf_eager": lambda: hf_eager(model, ids, new_tokens), "ours_eager": lambda: eager.generate(ids, new_tokens)}
    numba = device == "cpu" and has_module("numba")
    if numba:  # the numba kernels, eager and captured (as custom ops inside the compiled forwards)
        runs["ours_eager_numba"] = lambda: _with_numba(model, lambda: eager.generate(ids, new_tokens))
        runs["ours_captured_numba"] = lambda: _with_numba(model, lambda: plain.generate(ids, new_tokens))
    if speculative:  # the model as its own int8 draft, static drafts of 3: captured, eager, each also with numba
        plan = SkipMask.none(model.config.num_hidden_layers).kept_in_int8()
        drafts = {c: SpeculativeDecoder(model, plan, lookahead=StaticLookahead(3), compile=c) for c in (True, False)}
        drafts[True].generate(ids, new_tokens)  # compile its shapes before the timed runs
        runs["int8_draft_captured"] = lambda: drafts[True].generate(ids, new_tokens)
        runs["int8_draft_eager"] = lambda: drafts[False].generate(ids, new_tokens)
        if numba:
            runs["int8_draft_eager_numba"] = lambda: _with_numba(model, lambda: drafts[False].generate(ids, new_tokens))
            runs["int8_draft_captured_numba"] = lambda: _with_numba(model, lambda: drafts[True].generate(ids, new_tokens))
    raw: dict = {}
    seconds = interleaved(device, runs, repeats, raw)
    tps = {name: new_tokens / s for name, s in seconds.items()}
    out = {"shape": label, "new_tokens": new_tokens, "prompt": prompt_tokens, "repeats": repeats, "tokens_per_s": tps,
           "seconds": raw,
           "ours_over_hf_static": tps["ours_captured"] / tps["hf_static"], "first_generation_s": compile_s,
           "path": first.stats.path, "host_reads_per_step": statistics.mean(s.host_reads for s in first.stats.steps)}
    numba = (f" | numba kernels: ours eager {tps['ours_eager_numba']:.1f}, captured {tps['ours_captured_numba']:.1f}"
             if "ours_eager_numba" in tps else "")
    print(f"  {label}: HF static {tps['hf_static']:.1f} tok/s | ours captured {tps['ours_captured']:.1f} "
          f"({out['ours_over_hf_static']:.3f}x HF static) | HF eager {tps['hf_eager']:.1f} | ours eager {tps['ours_eager']:.1f}{numba}"
          f" | first generation {compile_s:.0f} s, host reads/step {out['host_reads_per_step']:.2f}", flush=True)
    if not parts:
        return out
    out["parts"] = parts_section(plain, device, prompt_tokens + new_tokens // 2)
    p = out["parts"]
    print(f"  {label} parts at context {p['context']}: one token {p['one_token_ms']:.2f} ms; draft cost "
          + ", ".join(f"{k} {v:.3f}" for k, v in p["draft_cost"].items()) + "; verify(k)/verify(1) "
          + ", ".join(f"{k}:{v:.3f}" for k, v in p["verify_ratio"].items()), flush=True)
    out["exact_mask"] = exact_mask_rows(model, plain, ids, device, new_tokens, repeats, exact_ks, tps["ours_captured"], p)
    return out


def _with_numba(model, run):
    from layersearch.kernels.select import model_kernels

    with model_kernels(model, "numba"):
        return run()


def predicted_over_plain(M: float, k: int, parts: dict, plain_step_ms: float) -> float | None:
    """What the captured parts predict for a static draft of ``k`` tokens at ``M`` tokens per step,
    over our plain loop: a step costs k draft forwards, one verification over k + 1 tokens and the
    loop's own per-step work (the plain loop's step time less its forward, measured in the same run)."""
    ratios = {int(key): value for key, value in parts["verify_ratio"].items()}
    if k + 1 not in ratios:
        return None
    forward = parts["one_token_ms"]
    loop = max(plain_step_ms - forward, 0.0)
    step = k * parts["draft_cost"]["uniform-0.5"] * forward + ratios[k + 1] * forward + loop
    return M * (forward + loop) / step


def exact_mask_rows(model, plain, ids, device, new_tokens, repeats, ks, plain_tps, parts) -> list:
    """Zero the o_proj and down_proj of the half mask's skipped layers (in place: the compiled
    forwards stay valid), so that draft equals the target (alpha = 1 up to bf16 rounding of
    k-token vs one-token forwards); realized vs predicted speedup over HF static at each k."""
    layers = model.config.num_hidden_layers
    mask = half_mask(layers)
    with torch.no_grad():
        for i in mask.attention:
            model.model.layers[i].self_attn.o_proj.weight.zero_()
        for i in mask.mlp:
            model.model.layers[i].mlp.down_proj.weight.zero_()
    decoders = {k: SpeculativeDecoder(model, mask, lookahead=StaticLookahead(k), compile=True) for k in ks}
    for decoder in decoders.values():
        decoder.generate(ids, new_tokens)  # compile
    runs = {"hf_static": lambda: hf_static(model, ids, new_tokens), "plain": lambda: plain.generate(ids, new_tokens)}
    runs.update({f"k={k}": (lambda d=d: d.generate(ids, new_tokens)) for k, d in decoders.items()})
    raw: dict = {}
    seconds = interleaved(device, runs, repeats, raw)
    rows = []
    for k, decoder in decoders.items():
        stats = decoder.generate(ids, new_tokens).stats
        realized_plain = seconds["plain"] / seconds[f"k={k}"]
        predicted_plain = predicted_over_plain(stats.mean_accepted_length, k, parts, 1e3 * seconds["plain"] / new_tokens)
        row = {"k": k, "M": stats.mean_accepted_length, "alpha": stats.acceptance_rate,
               "over_hf_static": seconds["hf_static"] / seconds[f"k={k}"], "over_plain": realized_plain,
               "predicted_over_plain": predicted_plain,
               "realized_over_predicted": realized_plain / predicted_plain if predicted_plain else None,
               "host_reads_per_step": statistics.mean(s.host_reads for s in stats.steps), "label": CEILING,
               "seconds": {name: raw[name] for name in ("hf_static", "plain", f"k={k}")}}
        rows.append(row)
        print(f"  exact mask k={k} [{CEILING}]: M={row['M']:.2f} alpha={row['alpha']:.3f} | {row['over_hf_static']:.3f}x HF static | "
              f"{realized_plain:.3f}x our plain loop, parts predict {predicted_plain and round(predicted_plain, 3)}x "
              f"(realized/predicted {row['realized_over_predicted'] and round(row['realized_over_predicted'], 3)})", flush=True)
    return rows


def table(report: dict) -> str:
    """The captured runtime's table from a report (a run's JSON): one line a figure, the baseline
    named in each; predictions recomputed from the stored parts (:func:`predicted_over_plain`)."""
    gpu = report["device"] != "cpu"
    lines = [f"device: {report['device']}, torch {report.get('torch', '?')}; baseline: transformers generate "
             f"with cache_implementation='static'{' (auto-compiled, CUDA graphs)' if gpu else ''} = HF static"]
    for row in report.get("captured", []):
        tps = row["tokens_per_s"]
        lines.append(f"{row['shape']:>6} | plain loop, captured: {tps['ours_captured']:7.1f} tok/s = {row['ours_over_hf_static']:.3f}x "
                     f"HF static ({tps['hf_static']:.1f}) | eager: ours {tps['ours_eager']:.1f}, HF generate {tps['hf_eager']:.1f}"
                     + (f", ours with numba kernels {tps['ours_eager_numba']:.1f}" if "ours_eager_numba" in tps else "")
                     + (f"; captured with numba kernels {tps['ours_captured_numba']:.1f}" if "ours_captured_numba" in tps else "") + " "
                     f"| host reads/step {row['host_reads_per_step']:.2f} | first generation (compiling) {row['first_generation_s']:.0f} s")
        if "int8_draft_captured" in tps:
            numba = f", eager with numba kernels {tps['int8_draft_eager_numba']:.1f}" if "int8_draft_eager_numba" in tps else ""
            if "int8_draft_captured_numba" in tps:
                numba += f", captured with numba kernels {tps['int8_draft_captured_numba']:.1f}"
            lines.append(f"{row['shape']:>6} | the int8 self-draft, static 3: captured {tps['int8_draft_captured']:.1f} tok/s, "
                         f"eager {tps['int8_draft_eager']:.1f}{numba}")
        parts = row.get("parts")
        if not parts:
            continue
        ratios = {int(k): v for k, v in parts["verify_ratio"].items()}
        lines.append(f"{row['shape']:>6} | parts, captured, context {parts['context']}: one token {parts['one_token_ms']:.2f} ms; "
                     "draft cost " + ", ".join(f"{k} {v:.3f}" for k, v in parts["draft_cost"].items()) +
                     "; verify(k)/verify(1) " + " ".join(f"{k}:{v:.3f}" for k, v in sorted(ratios.items())))
        plain_ms = 1e3 / tps["ours_captured"]
        for exact in row.get("exact_mask", []):
            predicted = predicted_over_plain(exact["M"], exact["k"], parts, plain_ms)
            realized = exact["over_plain"]
            lines.append(f"{row['shape']:>6} | exact mask k={exact['k']} [{CEILING}]: M={exact['M']:.2f} alpha={exact['alpha']:.3f} | "
                         f"{exact['over_hf_static']:.3f}x HF static | {realized:.3f}x our plain loop, parts predict "
                         f"{predicted:.3f}x (realized/predicted {realized / predicted:.3f})")
    for name, result in (report.get("captured_greedy") or {}).items():
        lines.append(f"  fp32 | greedy, {name}: {result['identical']}/{result['sequences']} identical to HF generate ({result['path']})")
    sampling = report.get("captured_sampling")
    if sampling:
        lines.append(f"  bf16 | sampling law, captured: p(target law) = {sampling['p_target']:.3f}, "
                     f"p(draft's law) = {sampling['p_draft_law']:.2g}, {sampling['runs']} runs")
    return "\n".join(lines)


def use_backend(backend: str) -> None:
    """Compile every model :func:`gpu_common.build` makes from now on with dynamo's ``backend``."""
    import gpu_common

    from layersearch.runtime.backend import compile_with

    from layersearch.runtime.backend import dynamo_compiler

    inner = gpu_common.build

    def build_with_backend(*args, **kwargs):
        model = inner(*args, **kwargs)
        compile_with(model, dynamo_compiler(backend))
        return model

    gpu_common.build = build_with_backend
    globals()["build"] = build_with_backend


def captured_greedy_section(device: str, new_tokens: int, count: int) -> dict:
    """Greedy equality in fp32 with capture on: ours (plain, the uniform 0.5 mask at k=2) vs HF generate."""
    model = build("1b", device, torch.float32, head_scale=4.0, layers=4)
    layers = model.config.num_hidden_layers
    decoders = {"plain": SpeculativeDecoder(model, compile=True),
                "uniform-0.5 k=2": SpeculativeDecoder(model, half_mask(layers), lookahead=StaticLookahead(2), compile=True)}
    return greedy_rows(model, decoders, new_tokens, count)


def greedy_rows(model, decoders: dict, new_tokens: int, count: int) -> dict:
    """Per named decoder: how many of ``count`` prompts it decodes exactly as HF generate does."""
    rows = {}
    for name, decoder in decoders.items():
        same = 0
        for ids in prompts(model.config.vocab_size, count, 32, seed=7):
            theirs = tuple(hf_eager(model, ids, new_tokens)[0, ids.shape[1]:].tolist())
            result = decoder.generate(ids, new_tokens)
            same += result.token_ids == theirs
        rows[name] = {"identical": same, "sequences": count, "path": result.stats.path}
        print(f"  fp32 captured {name}: {same}/{count} identical to HF generate ({result.stats.path})", flush=True)
    return rows


def captured_sampling_section(device: str, runs: int) -> dict:
    """The sampling law with capture on: a 6-token vocabulary, 3 tokens, chi-square against the exact law."""
    model = build("1b", device, torch.bfloat16, vocab=6, head_scale=3.0, seed=5, layers=4)
    mask = half_mask(model.config.num_hidden_layers)
    prompt = [1, 4, 2]
    target, draft = three_token_law(model, prompt), three_token_law(model, prompt, mask)
    decoder = SpeculativeDecoder(model, mask, lookahead=StaticLookahead(2), compile=True)
    observed, drafted, accepted, path = sampled_counts(decoder, prompt, runs)
    out = {"runs": runs, "p_target": pooled_pvalue(observed, target), "p_draft_law": pooled_pvalue(observed, draft),
           "drafted": drafted, "accepted": accepted, "path": path}
    print(f"  captured sampling: p(target law) = {out['p_target']:.3f}, p(draft law) = {out['p_draft_law']:.2g}, "
          f"accepted {accepted}/{drafted} ({path})", flush=True)
    return out


def captured_report(args, report: dict) -> None:
    """The captured runtime's table: loop vs HF static per shape, parts and the exact mask on the last shape,
    then fp32 greedy equality and the sampling law with capture on."""
    shapes = args.shapes.split(",")
    small = shapes == ["tiny"]
    start = time.perf_counter()
    report["captured"] = []
    if args.model:  # a real model (CPU figures: captured vs eager, numba too): the plain rows only
        from layersearch.models.loading import load_model

        loaded = load_model(args.model, device=args.device, dtype="float32" if args.device == "cpu" else "bfloat16")
        loaded.model.generation_config.eos_token_id = None  # every run decodes all its tokens
        report["captured"].append(capture_section(loaded.model, os.path.basename(args.model), args.device, args.new_tokens, args.repeats, parts=False,
                                                  speculative=True, prompt_tokens=args.prompt_tokens))
        write(report, args.out)
        return
    for shape in shapes if args.checks != "only" else ():
        model = build(shape, args.device, torch.bfloat16)
        report["captured"].append(capture_section(model, shape, args.device, 16 if small else args.new_tokens, args.repeats,
                                                  parts=shape == ("8b" if "8b" in shapes else shapes[-1]),
                                                  exact_ks=(2, 4) if small else (2, 4, 6)))
        del model
        write(report, args.out)
        print(f"  (at {time.perf_counter() - start:.0f} s)", flush=True)
    if args.checks == "none":
        return
    report["captured_greedy"] = captured_greedy_section(args.device, 8 if small else 32, 2 if small else 4)
    write(report, args.out)
    report["captured_sampling"] = captured_sampling_section(args.device, sampling_runs(args, small))
    write(report, args.out)
    print(f"  (done at {time.perf_counter() - start:.0f} s)", flush=True)


# ----- int4: low-bit drafts on a GPU, in two runs of at most 5 minutes each ----------------------
#: Labels of the synthetic models: their acceptance is a property of how they were built.
CEILING = "ceiling (α by construction)"
#: The plan of the exact-int4 model: a quarter of the sub-layers skipped, the rest in int4.
INT4_SKIP = 0.25


def int4_missing() -> str:
    """Why int4 rows cannot run here ("" when they can): plans need int4 (SkipMask.kept_in_int4 and
    the packed twins of layersearch.models.precision)."""
    from layersearch.models import precision

    if not hasattr(SkipMask, "kept_in_int4") or not hasattr(precision, "int4_twins"):
        return "int4 plans are not in this layersearch (SkipMask.kept_in_int4 / precision.int4_twins absent)"
    return ""


def int4_plan(model, skip: float = 0.0) -> SkipMask:
    """Every kept sub-layer and the head in int4, ``skip`` of the sub-layers skipped (spread evenly),
    in groups of 128 where they divide the model's widths (the largest that does otherwise)."""
    from layersearch.models.int4 import fit_group_size

    layers = model.config.num_hidden_layers
    base = SkipMask.uniform(layers, skip) if skip else SkipMask.none(layers)
    return fit_group_size(base.kept_in_int4(head=True), model)


def spread(values: list[float]) -> dict:
    """min / median / max of raw timings, with the raw values (seconds)."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "raw": list(values)}


def interleaved_raw(device: str, runs: dict, repeats: int) -> dict:
    """Every named run ``repeats`` times, interleaved in a rotating order after one warm-up each
    (the compile, where a run compiles): name -> :func:`spread` of its seconds."""
    for fn in runs.values():
        fn()
    names = list(runs)
    seconds: dict = {name: [] for name in names}
    for round_ in range(repeats):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            seconds[name].append(timed(device, runs[name])[0])
    return {name: spread(values) for name, values in seconds.items()}


def hf_static_per_call(model, ids, new_tokens):
    """transformers' static-cache generate with a fresh StaticCache each call (not the model-held one)."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=ids.shape[1] + new_tokens)
    return model.generate(ids.to(model.device), attention_mask=torch.ones_like(ids).to(model.device),
                          max_new_tokens=new_tokens, do_sample=False, cache=cache)


@torch.inference_mode()
def int4_parts(decoder: SpeculativeDecoder, device: str, context: int, plans: dict, repeats: int, ks=range(1, 9)) -> dict:
    """One captured sweep at ``context``: a one-token bf16 forward, each plan's draft token, and
    forwards over k = 1..8 tokens, all interleaved ``repeats`` times (min / median / max). Ratios
    divide by this sweep's own verify(1)."""
    cache = decoder.static_cache(context + 64)
    vocab = decoder.model.config.vocab_size
    ids = torch.randint(3, vocab, (16,), device=device)

    def forward(plan, n):
        view = decoder.view(plan)
        key = compile_key(decoder.model, plan, n, n, None, cache)  # the runtime's own key: generations reuse these
        return lambda: decoder.compiled.forward(view, key, cache, ids[:n], context, n, None)

    runs = {f"verify {k}": forward(None, k) for k in ks}
    runs.update({f"draft {name}": forward(plan, 1) for name, plan in plans.items()})
    timings = interleaved_raw(device, runs, repeats)
    one = timings["verify 1"]["median"]
    return {"context": context, "one_token_s": one, "timings": timings,
            "draft_cost": {name: timings[f"draft {name}"]["median"] / one for name in plans},
            "verify_ratio": {k: timings[f"verify {k}"]["median"] / one for k in ks}}


def predicted_over(M: float, k: int, parts: dict, plan: str, token_s: float, loop_s: float) -> float | None:
    """The speedup a static draft of ``k`` tokens at ``M`` tokens per step is predicted to have over
    a decoder taking ``token_s`` per token, from one run's parts: a step is k draft tokens of
    ``plan``, one verification over k + 1 tokens and the loop's own ``loop_s``."""
    ratios = parts["verify_ratio"]
    if k + 1 not in ratios:
        return None
    one = parts["one_token_s"]
    step = k * parts["draft_cost"][plan] * one + ratios[k + 1] * one + loop_s
    return M * token_s / step


def int4_shape_rows(shape: str, device: str, new_tokens: int, repeats: int, skip_reason: str) -> dict:
    """Part 1, one shape: our plain loop (captured) against HF static with its persistent cache and
    with a cache per call, the captured parts (verify(k) over the same sweep's verify(1)) and, with
    int4, the uniform int4 draft token and the 25%-skipped int4 plan's over a captured bf16 forward."""
    model = build(shape, device, torch.bfloat16)
    layers = model.config.num_hidden_layers
    ids = prompts(model.config.vocab_size, 1, 128)[0]
    plain = SpeculativeDecoder(model, compile=True)
    runs = {"hf_static": lambda: hf_static(model, ids, new_tokens),
            "hf_static_per_call": lambda: hf_static_per_call(model, ids, new_tokens),
            "ours_captured": lambda: plain.generate(ids, new_tokens)}
    seconds = interleaved_raw(device, runs, repeats)
    plans = {} if skip_reason else {"int4": int4_plan(model), f"skip {INT4_SKIP:g} + int4": int4_plan(model, INT4_SKIP)}
    parts = int4_parts(plain, device, 128 + new_tokens // 2, plans, repeats)
    row = {"shape": shape, "new_tokens": new_tokens, "repeats": repeats, "seconds": seconds, "parts": parts,
           "int4": "" if not skip_reason else f"skipped: {skip_reason}"}
    print(f"  {shape}: ours captured {seconds['ours_captured']['median']:.3f} s | HF static {seconds['hf_static']['median']:.3f} s "
          f"(per-call cache {seconds['hf_static_per_call']['median']:.3f} s) | draft cost "
          + (", ".join(f"{k} {v:.3f}" for k, v in parts["draft_cost"].items()) or row["int4"]), flush=True)
    del model
    return row


def exact_int4_weights(model, plan: SkipMask, group_size: int = 128) -> None:
    """Make ``model`` an exact-int4 model for ``plan`` (in place): every linear weight of the
    decoder layers and the head rounded onto the int4 grid as the int4 twins dequantize it (the
    GPU's single bf16 rounding of ``(q - 8) * s + z``), and the outputs of the sub-layers ``plan``
    skips zeroed (``o_proj``, ``down_proj``), so that the plan's int4 draft equals the target up
    to the rounding of k-token against one-token forwards: a ceiling, α by construction."""
    from layersearch.models import precision

    dequantize = getattr(precision, "int4_dequantized", None)  # the int4 module's own, where it exposes one
    linears = [m for layer in model.model.layers for m in layer.modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for linear in [*linears, model.lm_head]:
            weight = linear.weight
            rounded = dequantize(weight, group_size) if dequantize is not None else int4_grid(weight, group_size)
            weight.copy_(rounded.to(weight.dtype))
        for i in plan.attention:
            model.model.layers[i].self_attn.o_proj.weight.zero_()
        for i in plan.mlp:
            model.model.layers[i].mlp.down_proj.weight.zero_()


def int4_grid(weight: torch.Tensor, group_size: int) -> torch.Tensor:
    """``weight`` [out, in] rounded onto asymmetric int4 groups of ``group_size`` inputs: scale
    ``s = (max - min) / 15`` and zero ``z = min + 8 s`` kept in bf16, ``q = round((w - z) / s) + 8``
    clamped to 0..15, dequantized ``(q - 8) * s + z`` in float64 and rounded once to bf16."""
    out, width = weight.shape
    groups = weight.double().view(out, width // group_size, group_size)
    low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
    scale = ((high - low) / 15).clamp_min(1e-12).to(torch.bfloat16).double()
    zero = (low + 8 * scale).to(torch.bfloat16).double()
    q = ((groups - zero) / scale).round().add(8).clamp(0, 15)
    return ((q - 8) * scale + zero).to(torch.bfloat16).view(out, width)


def exact_int4_rows(shape: str, device: str, new_tokens: int, repeats: int, ks=(2, 4, 6)) -> dict:
    """Part 2: the exact-int4 model (:func:`exact_int4_weights`), the 25%-skipped int4 plan at
    static k = 2, 4, 6: realized speedup over HF static and over our plain loop beside what this
    run's own parts predict (HF static's and the loop's token times, the plan's draft cost, verify(k))."""
    model = build(shape, device, torch.bfloat16)
    layers = model.config.num_hidden_layers
    plan = int4_plan(model, INT4_SKIP)
    exact_int4_weights(model, plan, plan.int4_group_size)
    ids = prompts(model.config.vocab_size, 1, 128)[0]
    plain = SpeculativeDecoder(model, compile=True)
    decoders = {k: SpeculativeDecoder(model, plan, lookahead=StaticLookahead(k), compile=True) for k in ks}
    runs = {"hf_static": lambda: hf_static(model, ids, new_tokens), "plain": lambda: plain.generate(ids, new_tokens)}
    runs.update({f"k={k}": (lambda d=d: d.generate(ids, new_tokens)) for k, d in decoders.items()})
    seconds = interleaved_raw(device, runs, repeats)
    parts = int4_parts(plain, device, 128 + new_tokens // 2, {"plan": plan}, repeats)
    hf_token = seconds["hf_static"]["median"] / new_tokens
    plain_token = seconds["plain"]["median"] / new_tokens
    first = plain.generate(ids, new_tokens).stats
    loop_s = max(plain_token - parts["one_token_s"], 0.0)  # the loop's own per-step time, this run
    rows = []
    for k, decoder in decoders.items():
        stats = decoder.generate(ids, new_tokens).stats
        mine = seconds[f"k={k}"]["median"]
        predicted = predicted_over(stats.mean_accepted_length, k, parts, "plan", hf_token, loop_s)
        row = {"k": k, "M": stats.mean_accepted_length, "alpha": stats.acceptance_rate,
               "over_hf_static": seconds["hf_static"]["median"] / mine, "over_plain": seconds["plain"]["median"] / mine,
               "predicted_over_hf_static": predicted,
               "realized_over_predicted": (seconds["hf_static"]["median"] / mine) / predicted if predicted else None}
        rows.append(row)
        print(f"  exact-int4 {shape} k={k} [{CEILING}]: M={row['M']:.2f} alpha={row['alpha']:.3f} | "
              f"{row['over_hf_static']:.3f}x HF static, parts predict {predicted and round(predicted, 3)}x "
              f"(realized/predicted {row['realized_over_predicted'] and round(row['realized_over_predicted'], 3)})", flush=True)
    del model
    return {"shape": shape, "label": CEILING, "plan": plan.short_string(), "seconds": seconds, "parts": parts,
            "path": first.path, "rows": rows}


def int4_greedy_section(device: str, new_tokens: int, count: int) -> dict:
    """Greedy equality in fp32 with int4 plans captured: the uniform int4 self-draft and the
    25%-skipped int4 plan at k = 2, against HF generate."""
    model = build("1b", device, torch.float32, head_scale=4.0, layers=4)
    plans = {"int4": int4_plan(model), f"skip {INT4_SKIP:g} + int4": int4_plan(model, INT4_SKIP)}
    decoders = {name: SpeculativeDecoder(model, plan, lookahead=StaticLookahead(2), compile=True) for name, plan in plans.items()}
    return greedy_rows(model, decoders, new_tokens, count)


def int4_sampling_section(device: str, runs: int) -> dict:
    """The sampling law with an int4 draft, captured: 3 tokens of a 6-token vocabulary, chi-square
    against the exact law of the target (and, for contrast, the draft's)."""
    model = build("1b", device, torch.bfloat16, vocab=6, head_scale=3.0, seed=5, layers=4)
    plan = int4_plan(model, INT4_SKIP)
    prompt = [1, 4, 2]
    target = three_token_law(model, prompt)
    decoder = SpeculativeDecoder(model, plan, lookahead=StaticLookahead(2), compile=True)
    observed, drafted, accepted, path = sampled_counts(decoder, prompt, runs)
    out = {"runs": runs, "p_target": pooled_pvalue(observed, target), "drafted": drafted, "accepted": accepted,
           "path": path}
    print(f"  int4 draft sampling: p(target law) = {out['p_target']:.3f}, accepted {accepted}/{drafted} ({out['path']})", flush=True)
    return out


def int4_report(args, report: dict) -> None:
    """The int4 table's measurements: ``--part 1`` the shapes' rows (loop vs HF static, parts, int4
    draft tokens), ``--part 2`` the exact-int4 model and the fp32 greedy and sampling checks; each
    part fits 5 minutes on an H100 with its compiles. Without int4 its rows are skipped, saying why."""
    shapes = args.shapes.split(",")
    small = shapes == ["tiny"]
    new_tokens = 16 if small else args.new_tokens
    missing = int4_missing()
    report["int4_part"] = args.part
    if missing:
        print(f"  int4 rows skipped: {missing}", flush=True)
        report["int4_skipped"] = missing
    if args.part == 1:
        report["int4_shapes"] = []
        for shape in shapes:
            report["int4_shapes"].append(int4_shape_rows(shape, args.device, new_tokens, args.repeats, missing))
            write(report, args.out)
        return
    if missing:
        return
    last = "8b" if "8b" in shapes else shapes[-1]
    report["exact_int4"] = exact_int4_rows(last, args.device, new_tokens, args.repeats, ks=(2, 4) if small else (2, 4, 6))
    write(report, args.out)
    report["int4_greedy"] = int4_greedy_section(args.device, 8 if small else 32, 2 if small else 4)
    write(report, args.out)
    report["int4_sampling"] = int4_sampling_section(args.device, sampling_runs(args, small))
    write(report, args.out)


def int4_table(report: dict) -> str:
    """The int4 table from a report: every figure names its baseline; predictions from the same run's parts."""
    lines = [f"device: {report['device']}; baseline: transformers generate with cache_implementation='static' = HF static "
             f"(persistent: its model-held cache; per call: a fresh StaticCache); repeats interleaved, median [min-max]"]
    if report.get("int4_skipped"):
        lines.append(f"  int4 rows skipped: {report['int4_skipped']}")
    for row in report.get("int4_shapes", []):
        s = row["seconds"]
        tokens = row["new_tokens"]

        def tps(name):
            v = s[name]
            return f"{tokens / v['median']:.1f} tok/s [{tokens / v['max']:.1f}-{tokens / v['min']:.1f}]"

        lines.append(f"{row['shape']:>6} | plain loop, captured: {tps('ours_captured')} = "
                     f"{s['hf_static']['median'] / s['ours_captured']['median']:.3f}x HF static persistent ({tps('hf_static')}), "
                     f"{s['hf_static_per_call']['median'] / s['ours_captured']['median']:.3f}x HF static per call ({tps('hf_static_per_call')})")
        parts = row["parts"]
        ratios = {int(k): v for k, v in parts["verify_ratio"].items()}
        drafts = ", ".join(f"{name} {cost:.3f}" for name, cost in parts["draft_cost"].items()) or row["int4"]
        lines.append(f"{row['shape']:>6} | captured, context {parts['context']}: bf16 forward {1e3 * parts['one_token_s']:.2f} ms; "
                     f"draft token / bf16 forward: {drafts}; verify(k)/verify(1) of the same sweep "
                     + " ".join(f"{k}:{v:.3f}" for k, v in sorted(ratios.items())))
    exact = report.get("exact_int4")
    if exact:
        for r in exact["rows"]:
            lines.append(f"{exact['shape']:>6} | exact-int4 {exact['plan']} k={r['k']} [{exact['label']}]: M={r['M']:.2f} "
                         f"alpha={r['alpha']:.3f} | {r['over_hf_static']:.3f}x HF static persistent, predicted "
                         f"{r['predicted_over_hf_static']:.3f}x from this run's parts (realized/predicted {r['realized_over_predicted']:.3f})")
    for name, result in (report.get("int4_greedy") or {}).items():
        lines.append(f"  fp32 | greedy, {name} captured: {result['identical']}/{result['sequences']} identical to HF generate ({result['path']})")
    sampling = report.get("int4_sampling")
    if sampling:
        lines.append(f"  bf16 | sampling law, int4 draft captured: p(target law) = {sampling['p_target']:.3f}, {sampling['runs']} runs")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = ToolParser(__file__, description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="1b,8b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--sections", default="captured")
    parser.add_argument("--sampling-runs", type=int, default=None,
                        help=f"runs of each sampling-law check (default {SAMPLING_RUNS}; {SMALL_SAMPLING_RUNS} with "
                             "--shapes tiny, a smoke test)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--greedy-dtypes", default="bfloat16,float32")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--out")
    parser.add_argument("--model", help="the captured section on this model (embedded name, .gguf, HF id or folder) "
                        "instead of random shapes: the plain rows only, fp32 on a CPU")
    parser.add_argument("--threads", type=int, help="torch (and numba) CPU threads")
    parser.add_argument("--checks", choices=("all", "none", "only"), default="all",
                        help="the captured section's fp32 greedy and sampling checks: with the shapes' rows, without, or alone "
                             "(to split a run in two)")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="prompt length of the --model rows")
    parser.add_argument("--part", type=int, choices=(1, 2), default=1,
                        help="the int4 section in two runs of at most 5 minutes on an H100: 1 the shapes' rows, "
                             "2 the exact-int4 model and the fp32 greedy and sampling checks")
    parser.add_argument("--backend", default="inductor",
                        help="dynamo backend of the captured forwards (eager: the same capture without code "
                             "generation, for a CPU smoke test)")
    parser.add_argument("--table", metavar="JSON", help="print the captured runtime's table from a report this script wrote, and exit")
    args = parser.parse_args(argv)
    return run_tool(parser, lambda: report_run(args, argv))


def check_args(args) -> None:
    """Every argument checked before any model is built: one line naming the option otherwise."""
    tool_args.names(args.shapes, "--shapes", SHAPES)
    tool_args.names(args.sections, "--sections", SECTIONS)
    tool_args.dtypes(args.greedy_dtypes, "--greedy-dtypes")
    for option in ("sampling_runs", "repeats", "new_tokens", "prompt_tokens"):
        if getattr(args, option) is not None:
            tool_args.count(getattr(args, option), "--" + option.replace("_", "-"))
    tool_args.threads(args.threads)
    tool_args.backend(args.backend)
    tool_args.output(args.out)
    args.device = tool_args.device(args.device)


def sampling_runs(args, small: bool, small_default: int = SMALL_SAMPLING_RUNS) -> int:
    """The runs of a sampling-law check: ``--sampling-runs`` as given, else :data:`SAMPLING_RUNS`
    (``small_default`` on the tiny shape, a smoke test)."""
    if args.sampling_runs is not None:
        return args.sampling_runs
    return small_default if small else SAMPLING_RUNS


def check_table_report(report, path: str) -> None:
    """Refuse, in one line, what is not a raw report of this script with a table: a JSON object
    naming its device and torch, with a captured or an int4 section (:data:`TABLE_KEYS`)."""
    if not (isinstance(report, dict) and isinstance(report.get("device"), str) and isinstance(report.get("torch"), str)):
        raise LayersearchError(f"--table {path}: not a raw report of gpu_report.py (a JSON object naming its device "
                               "and torch beside its sections)")
    if not any(key in report for key in TABLE_KEYS):
        held = ", ".join(key for key in report if key not in RECORD_KEYS) or "nothing"
        raise LayersearchError(f"--table {path}: holds no captured or int4 section (it holds {held}); only those "
                               "sections have a table")


def print_table(path: str) -> int:
    """``--table``: the captured runtime's table of a report this script wrote."""
    report = tool_args.json_input(path, "--table")
    check_table_report(report, path)
    try:
        print(int4_table(report) if "int4_part" in report else table(report))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise LayersearchError(f"--table {path}: not a report of this script ({type(exc).__name__}: {exc})") from None
    return 0


def report_run(args, argv=None) -> int:
    """The sections ``args`` asks for, written to ``--out`` as each ends."""
    if args.table:
        return print_table(args.table)
    check_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 in the fp32 rows
    torch.backends.cudnn.allow_tf32 = False
    shapes = args.shapes.split(",")
    sections = args.sections.split(",")
    small = shapes == ["tiny"]
    from layersearch.common.provenance import provenance

    report: dict = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
                    "torch": torch.__version__, **provenance(list(sys.argv if argv is None else argv))}
    print(f"device: {report['device']}, torch {torch.__version__}", flush=True)
    start = time.perf_counter()
    if args.backend != "inductor":  # every model built from now on compiles with it
        use_backend(args.backend)
    if "int4" in sections:
        print(f"int4, part {args.part}", flush=True)
        int4_report(args, report)
        write(report, args.out)
        print(int4_table(report), flush=True)
    if "captured" in sections:
        captured_report(args, report)
        print(table(report), flush=True)
    if "greedy" in sections:
        print("1. greedy equality", flush=True)
        report["greedy"] = []
        for dtype in args.greedy_dtypes.split(","):
            report["greedy"].append(greedy_section(shapes[0], args.device, getattr(torch, dtype), 48, 4, ks=(8,)))
    write(report, args.out)
    if "sampling" in sections:
        print("2. sampling", f"(at {time.perf_counter() - start:.0f} s)", flush=True)
        report["sampling"] = sampling_section(shapes[0], args.device, torch.bfloat16,
                                              sampling_runs(args, small, SMALL_EAGER_SAMPLING_RUNS))
    write(report, args.out)
    if "loop" in sections:
        print("3. loop vs HF generate", f"(at {time.perf_counter() - start:.0f} s)", flush=True)
        report["loop"] = [loop_section(s, args.device, torch.bfloat16, 32 if small else args.new_tokens, args.repeats) for s in shapes]
    write(report, args.out)
    if "profile" in sections:
        print("4-5. profile, realized vs predicted, KnapSpec re-selection", f"(at {time.perf_counter() - start:.0f} s)", flush=True)
        contexts = (64, 128, 256) if small else (256, 512, 1024, 2048)
        report["profile"] = []
        for shape in shapes:
            report["profile"].append(profile_section(shape, args.device, torch.bfloat16, 32 if small else args.new_tokens,
                                                     args.repeats, contexts))
            write(report, args.out)
    write(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
