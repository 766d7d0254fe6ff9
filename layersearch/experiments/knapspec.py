"""KnapSpec's long-context experiment on one model and device (``layersearch knapspec bench``).

For each context length (long news prompts cut to ``n`` tokens) it runs, one after the other on
the same prompt, every run greedy and lossless:

* ``plain``        plain decoding (our loop with the empty mask);
* ``knapsack``     :class:`~layersearch.knapspec.controller.KnapSpecController`: context-aware
                   selection, decoupled attention/MLP items (KnapSpec);
* ``bound``        the same with whole layers as items (CLaSp's binding; §4 ablation);
* ``fixed-short``  the knapsack's choice at the shortest context (~256 tokens) held fixed, the
                   static mask a context-unaware search would have found.

With ``space="plans"`` the knapsack selects draft plans (each sub-layer full,
int8 or skipped, the head full or int8; the profile needs int8 timings) instead of skip masks;
``bound`` is left out there (a plan gives each sub-layer its own precision) and the other
candidate method timed beside it is KnapSpec's skip-mask DP.

Reported per run: predicted TPT (tokens/s) at the first selection, alpha, measured decode
tokens/s (prefill excluded, :func:`layersearch.evaluation.measure.decode_tokens_per_second`; with and
without the selection's own time), M, and the mask. The first selection of the ``knapsack`` run
also scores the fixed mask and the bound variant on the same reference window, so the TPT
differences are like for like. Also reported: the numba knapsack timing (60 items, capacity 600)
against the pure-Python reference, and the cost of one re-selection (DP + alpha + TPT grid) as a
share of the decode time of ``interval`` steps, for ``method="hidden"`` (KnapSpec's DP) and
``method="items"`` (per-item values + numba knapsack).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from layersearch.common.errors import LayersearchError
from layersearch.runtime.step import Controller

CHARS_PER_TOKEN = 4.7


def knapspec_decoder(model: Any, profile: Any, *, policy: Any = None, sampling: Any = None, compile: bool | None = None,
                     **controller_options: Any) -> Any:
    """The decode loop with a :class:`~layersearch.knapspec.controller.KnapSpecController` whose
    gamma grid goes up to the policy's cap (``policy``: a DraftPolicy, default its defaults;
    ``sampling``: a SamplingSpec, default greedy; ``compile``: captured forwards, None as the
    spec's default), built by :func:`layersearch.decoder.build.assemble`."""
    from layersearch.decoder.build import assemble
    from layersearch.knapspec.controller import DEFAULT_INTERVAL, KnapSpecController
    from layersearch.runtime.draft_policy import DraftPolicy
    from layersearch.decoder.spec import MaskSourceSpec, SamplingSpec
    from layersearch.decoder.fragments import loaded_spec, policy_lookahead

    policy = DraftPolicy() if policy is None else policy
    controller_options.setdefault("max_draft", policy.max_draft)
    controller = KnapSpecController(model, profile, **controller_options)
    source = MaskSourceSpec("knapsack", reselect_every=controller_options.get("interval", DEFAULT_INTERVAL))
    spec = loaded_spec(mask_source=source, lookahead=policy_lookahead(policy), sampling=sampling or SamplingSpec())
    return assemble(model, spec, controller=controller, compile=compile)


@dataclass(frozen=True)
class BenchSettings:
    """The experiment's knobs (the command's options of the same names)."""

    max_new_tokens: int = 32
    interval: int = 64  # decoding steps between re-selections
    window: int = 5  # reference tokens for the DP
    alpha_window: int = 32  # reference tokens for alpha (0: the DP's own)
    alpha_candidates: int = 8
    max_draft: int = 10  # largest gamma of the TPT grid (KnapSpec's D)
    draft_threshold: float = 0.7
    method: str = "hidden"  # skip masks' candidate sets; plans always use the multiple-choice knapsack
    seed: int = 0  # which news articles make the prompt
    check_candidates: int = 0
    space: str = "skips"  # skip masks (KnapSpec's) or draft plans

    def to_dict(self) -> dict[str, Any]:
        """The settings the report records (as it always has: no alpha_candidates, check_candidates)."""
        out = asdict(self)
        return {k: out[k] for k in ("max_new_tokens", "interval", "window", "alpha_window", "max_draft",
                                    "draft_threshold", "method", "seed", "space")}

    @property
    def plans(self) -> bool:
        """True when the knapsack selects draft plans."""
        return self.space == "plans"

    def config(self) -> Any:
        """The selector's :class:`~layersearch.knapspec.KnapSpecConfig` for these settings."""
        from layersearch.knapspec import KnapSpecConfig

        method = "plans" if self.plans else self.method
        return KnapSpecConfig(method=method, max_draft=self.max_draft, max_alpha_candidates=self.alpha_candidates)


def run_bench(
    loaded: Any, profile: Any, contexts: Sequence[int], settings: BenchSettings, *, say: Callable[[str], None],
    report: dict[str, Any], save: Callable[[dict[str, Any]], None] = lambda report: None,
) -> dict[str, Any]:
    """Every context in turn, into ``report`` (which already holds the run's header and
    ``solver``); ``save(report)`` after each context, so a partial report survives a crash."""
    report.setdefault("contexts", [])
    fixed = None
    for n in contexts:
        ids = prompt_ids(loaded.tokenizer, n, settings.seed)
        say(f"context {ids.shape[1]}: plain, knapsack, knapsack-draft, {'' if settings.plans else 'bound-draft, '}fixed-short"
            + (" (draft plans)" if settings.plans else ""))
        row, fixed = _one_context(settings, loaded, profile, ids, fixed, say)
        report["contexts"].append(row)
        save(report)
    report["summary"] = _summary(report)
    return report


# ----- pieces -------------------------------------------------------------------------------------
def run_experiment(settings: BenchSettings, contexts_text: str, profile_path: str | None, out: Any, load: Callable[[], Any],
                   *, say: Callable[[str], None], argv: Sequence[str] = ()) -> dict[str, Any]:
    """``knapspec bench``: check the settings, ``load()`` the model, measure (or read) the profile
    and time the solver, then every context; the report is written to ``out`` (a checked output)
    after each context and at the end, and returned."""
    import os

    import torch

    from layersearch.common.checks import check_int
    from layersearch.knapspec.controller import SPACES
    from layersearch.knapspec.select import require_int8_profile
    from layersearch.models.context import check_context
    from layersearch.knapspec.solver import benchmark_solver, format_benchmark
    from layersearch.masks.mask import parse_index_list
    from layersearch.common.outputs import check_output

    if profile_path and not os.path.exists(profile_path):  # measured, then saved there: check it now
        check_output(profile_path, "profile")
    contexts = parse_index_list(contexts_text, "contexts")
    if not contexts or min(contexts) < 8:
        raise LayersearchError("contexts must be token counts >= 8", fields="contexts")
    if settings.space not in SPACES:
        raise LayersearchError(f"space must be one of {', '.join(SPACES)}, got {settings.space!r}", fields="space")
    if settings.check_candidates < 0:
        raise LayersearchError(f"check_candidates must be >= 0, got {settings.check_candidates}", fields="check_candidates")
    for value, what in ((settings.max_new_tokens, "max_new_tokens"), (settings.interval, "interval"),
                        (settings.window, "window"), (settings.max_draft, "max_draft")):
        check_int(value, what)
    loaded = load()
    # Every context checked before the first is measured: no partial report for a model too short.
    check_context(loaded, max(contexts) + settings.max_new_tokens + settings.max_draft + 1,
                  f"contexts {max(contexts)} + max_new_tokens + max_draft",
                  ("contexts", "max_new_tokens", "max_draft"))
    profile = latency_profile(loaded, profile_path, contexts, settings.max_draft, say)
    if settings.plans:  # before any measurement: one line, not a partial report
        require_int8_profile(profile)
    solver = benchmark_solver(60, 600)  # after every check: bad input gets one line, not progress first
    say(format_benchmark(solver))
    report: dict[str, Any] = {
        "argv": list(argv), "model": loaded.info.to_dict(), "device": profile.device, "threads": torch.get_num_threads(),
        "settings": settings.to_dict(), "profile": profile.to_dict(), "solver": solver, "contexts": [],
    }
    # A partial report survives a crash; a stream gets the whole one once.
    save = (lambda partial: None) if out.stream else (lambda partial: write_report(out, partial))
    run_bench(loaded, profile, contexts, settings, say=say, report=report, save=save)
    write_report(out, report)
    return report


def latency_profile(loaded: Any, path: str | None, contexts: Sequence[int], max_draft: int, say: Callable[[str], None]):
    """The profile at ``path``, or one measured at the contexts (and saved at ``path`` when given)."""
    from pathlib import Path

    from layersearch.profiling.profile import LatencyProfile
    from layersearch.profiling.profiler import quick_profile

    if path and Path(path).exists():
        return LatencyProfile.load(path, model=loaded.info)
    say(f"measuring the latency profile at contexts 64,{','.join(map(str, contexts))} (give a saved profile to reuse one)")
    profile = quick_profile(loaded.model, loaded.info, contexts=(64, *contexts), max_verify=max_draft + 1, repeats=3, progress=say)
    if path:
        profile.save(path)
        say(f"saved the profile to {path}")
    return profile


def prompt_ids(tokenizer, n: int, seed: int):
    """A long news prompt cut to ``n`` tokens: ids ``[1, n]``."""
    from layersearch.data import long_prompt

    text = long_prompt(int(n * CHARS_PER_TOKEN * 1.15) + 64, seed=seed)
    ids = tokenizer(text, return_tensors="pt").input_ids
    return ids[:, :n]


def _decode_rates(stats, select_seconds: float, exclude: float = 0.0) -> dict[str, float]:
    from layersearch.evaluation.measure import decode_tokens_per_second

    decode = stats.decode_seconds - exclude
    tokens = stats.decode_tokens  # the first delivery's tokens are not decode-phase tokens
    steady = max(decode - select_seconds, 1e-9)
    return {
        "decode_tokens_per_second": decode_tokens_per_second(stats, exclude),
        "steady_tokens_per_second": tokens / steady,
        "decode_seconds": decode,
        "select_seconds": select_seconds,
        "step_seconds": (stats.draft_seconds + stats.verify_seconds) / max(stats.target_forwards, 1),
    }


def _run_entry(name, result, select_seconds=0.0, exclude=0.0, **extra) -> dict[str, Any]:
    stats = result.stats
    return {
        "run": name,
        **_decode_rates(stats, select_seconds, exclude),
        "mean_accepted_length": stats.mean_accepted_length,
        "acceptance_rate": stats.acceptance_rate,
        "new_tokens": stats.new_tokens,
        "prefill_seconds": stats.prefill_seconds,
        "selections": list(stats.selections),
        **extra,
    }


class _Analysed(Controller):
    """Wraps a dynamic decoder's selector: at the first selection also scores, on the same window,
    the bound items, the fixed mask and the other candidate method (their time is kept apart)."""

    def __init__(self, dynamic, profile, fixed):
        self.dynamic, self.profile, self.fixed = dynamic, profile, fixed
        self.analysis: dict[str, Any] = {}
        self.analysis_seconds = 0.0

    def observe(self, outcome) -> None:
        self.dynamic.observe(outcome)

    def select(self, request):
        selection = self.dynamic.select(request)
        if selection is not None and not self.analysis:
            t0 = time.perf_counter()
            self.analysis = self._analyse(request, selection)
            self.analysis_seconds = time.perf_counter() - t0
        return selection

    def _analyse(self, request, selection) -> dict[str, Any]:
        from dataclasses import replace

        from layersearch.knapspec import KnapSpecSelector, alphas_from_states, window_from_cache
        from layersearch.masks.mask import SkipMask

        model, n = request.model, request.position
        sequence = request.sequence[0].to(model.device)
        window = [window_from_cache(request.cache, sequence, self.dynamic.window)]
        alpha_window = None
        if self.dynamic.alpha_window and self.dynamic.alpha_window > self.dynamic.window:
            alpha_window = [window_from_cache(request.cache, sequence, self.dynamic.alpha_window)]
        config = self.dynamic.config
        out: dict[str, Any] = {"context": n, "decoupled": dict(selection.record), "contenders": self.dynamic.selector.last_rows}
        if config.method != "plans":  # §4: whole layers as items, same window, same rules (a plan has no binding)
            bound = KnapSpecSelector(model, self.profile, replace(config, bound=True))
            out["bound"] = {**bound.select(window, n, alpha_window).record(), **bound.last_timing}
        # The other candidate method: its first call measures per-item values, the second is a re-selection.
        other = KnapSpecSelector(model, self.profile, replace(config, method="items" if config.method == "hidden" else "hidden"))
        other.select(window, n, alpha_window)
        first = dict(other.last_timing)
        other.select(window, n, alpha_window)
        out["other_method"] = {"method": other.config.method, "first_call": first, "reselection": dict(other.last_timing)}
        if self.fixed is not None:  # the short-context mask, scored at this context
            mask, gamma = self.fixed["mask_obj"], self.fixed["gamma"]
            runner = self.dynamic.selector.runner
            states = runner.run_masks([SkipMask.none(runner.num_layers), mask], alpha_window or window)
            alpha = alphas_from_states(runner, states[1:], states[0])[0]
            out["fixed"] = {"mask": mask.short_string(), "gamma": gamma, "alpha": alpha, "tpt": self.profile.tpt(alpha, gamma, mask, n)}
        return out


def _dynamic_run(name, model, profile, policy, settings, config, ids, selector_wrapper=None):
    """One KnapSpecController run; with ``selector_wrapper`` its analysis time is taken out."""
    from layersearch.decoder.build import assemble
    from layersearch.knapspec.controller import KnapSpecController
    from layersearch.decoder.spec import MaskSourceSpec
    from layersearch.decoder.fragments import loaded_spec, policy_lookahead

    dynamic = KnapSpecController(model, profile, interval=settings.interval, window=settings.window,
                                 alpha_window=settings.alpha_window or None, config=config, space=settings.space)
    selector = selector_wrapper(dynamic) if selector_wrapper else dynamic
    spec = loaded_spec(mask_source=MaskSourceSpec("knapsack", reselect_every=settings.interval), lookahead=policy_lookahead(policy))
    decoder = assemble(model, spec, controller=selector)
    result = decoder.generate(ids, settings.max_new_tokens)
    extra = getattr(selector, "analysis_seconds", 0.0)
    selections = [dict(s) for s in result.stats.selections]
    selections[0]["seconds"] -= extra
    first = selections[0]
    entry = _run_entry(name, result, sum(s["seconds"] for s in selections), extra,
                       tpt=first["tpt"], alpha=first["alpha"], mask=first["mask"], gamma=first["gamma"])
    entry["selections"] = selections
    step = entry["step_seconds"]
    entry["reselection"] = {
        "seconds": first["seconds"],
        "parts": {k: first.get(k) for k in ("dp_seconds", "alpha_seconds", "tpt_seconds")},
        "share": first["seconds"] / (first["seconds"] + settings.interval * step) if step > 0 else None,
    }
    return entry, selector


def _one_context(settings, loaded, profile, ids, fixed, say):
    from dataclasses import replace

    from layersearch.decoder.build import assemble
    from layersearch.masks.mask import SkipMask
    from layersearch.runtime.draft_policy import DraftPolicy
    from layersearch.decoder.fragments import mask_spec

    model, n = loaded.model, int(ids.shape[1])
    num_layers = loaded.info.num_layers
    policy = DraftPolicy(settings.max_draft, settings.draft_threshold)
    config = settings.config()
    runs = []

    def done(entry):
        runs.append(entry)
        say(f"  {entry['run']}: {entry['decode_tokens_per_second']:.2f} tok/s"
            + (f", {entry['mask']} gamma {entry['gamma']} alpha {_fmt(entry.get('alpha'))}" if entry.get("mask") else ""))

    plain = assemble(model, mask_spec(SkipMask.none(num_layers), policy)).generate(ids, settings.max_new_tokens)
    done(_run_entry("plain", plain, tpt=profile.tpt(1.0, 0, SkipMask.none(num_layers), n), gamma=0))
    done(_dynamic_run("knapsack", model, profile, policy, settings, config, ids)[0])
    entry, analysed = _dynamic_run(
        "knapsack-draft", model, profile, policy, settings, replace(config, allow_plain=False), ids,
        selector_wrapper=lambda dynamic: _Analysed(dynamic, profile, fixed),
    )
    done(entry)
    if not settings.plans:  # a plan gives each sub-layer its own precision: no bound variant
        done(_dynamic_run("bound-draft", model, profile, policy, settings, replace(config, bound=True, allow_plain=False), ids)[0])
    if fixed is None:  # the shortest context defines the fixed mask: the knapsack's draft there
        fixed = {"mask": entry["mask"], "gamma": entry["gamma"], "context": n,
                 "mask_obj": _mask_from_string(entry["mask"], num_layers)}
        analysed.analysis["fixed"] = {"mask": entry["mask"], "gamma": entry["gamma"], "alpha": entry["alpha"], "tpt": entry["tpt"]}
    if fixed["gamma"] >= 1:
        fixed_policy = replace(policy, max_draft=fixed["gamma"])
        result = assemble(model, mask_spec(fixed["mask_obj"], fixed_policy)).generate(ids, settings.max_new_tokens)
        predicted = analysed.analysis.get("fixed", {})
        done(_run_entry("fixed-short", result, tpt=predicted.get("tpt"), alpha=predicted.get("alpha"),
                        mask=fixed["mask"], gamma=fixed["gamma"]))
    analysis = analysed.analysis
    if settings.check_candidates:
        analysis["candidate_check"] = _check_candidates(model, ids, analysis.get("contenders", []), policy, settings, say)
    other = analysis.get("other_method", {})
    other_seconds = sum(other.get("reselection", {}).values()) if other else None
    step = runs[1]["step_seconds"]
    cost = {
        "interval": settings.interval,
        "method": config.method,
        "knapsack": runs[1]["reselection"],
        "knapsack_step_seconds": step,
        "knapsack_draft": runs[2]["reselection"],
        "knapsack_draft_step_seconds": runs[2]["step_seconds"],
        "other_method": other.get("method"),
        "other_seconds": other_seconds,
        "other_first_call_seconds": sum(other.get("first_call", {}).values()) if other else None,
        "other_share": other_seconds / (other_seconds + settings.interval * step) if other_seconds and step > 0 else None,
        "other_share_draft_steps": (other_seconds / (other_seconds + settings.interval * runs[2]["step_seconds"])
                                    if other_seconds and runs[2]["step_seconds"] > 0 else None),
    }
    return {"context": n, "runs": runs, "analysis": analysis, "reselection_cost": cost}, fixed


def _check_candidates(model, ids, contenders, policy, settings, say) -> dict[str, Any]:
    """Run the top ``check_candidates`` contenders (by predicted TPT) as fixed masks with their
    gamma: does the one the profile ranks first measure fastest?"""
    from dataclasses import replace

    from layersearch.decoder.build import assemble
    from layersearch.models.skipping import decoder_layers
    from layersearch.decoder.fragments import mask_spec

    num_layers = len(decoder_layers(model))
    ranked = sorted(contenders, key=lambda row: -row["tpt"])[: settings.check_candidates]
    rows = []
    for row in ranked:
        mask = _mask_from_string(row["mask"], num_layers)
        gamma = int(row["gamma"])
        decoder = assemble(model, mask_spec(mask, replace(policy, max_draft=gamma)) if gamma >= 1
                           else mask_spec(None))  # gamma 0: plain decoding
        entry = _run_entry("candidate", decoder.generate(ids, settings.max_new_tokens))
        rows.append({"mask": row["mask"], "gamma": gamma, "predicted_tpt": row["tpt"],
                     "measured_tokens_per_second": entry["decode_tokens_per_second"],
                     "alpha_predicted": row.get("alpha"), "alpha_measured": entry["acceptance_rate"]})
        say(f"  candidate {row['mask']} gamma {gamma}: predicted {row['tpt']:.2f} tok/s, "
            f"measured {entry['decode_tokens_per_second']:.2f} tok/s")
    if not rows:
        return {"rows": rows, "predicted_best_is_fastest": None, "predicted_best_over_fastest": None}
    measured = [r["measured_tokens_per_second"] for r in rows]
    best = max(range(len(rows)), key=measured.__getitem__)
    return {"rows": rows, "predicted_best_is_fastest": best == 0,
            "predicted_best_over_fastest": measured[0] / measured[best]}


def _mask_from_string(text: str, num_layers: int):
    """The plan of a :meth:`SkipMask.short_string` (``A:0-2,5 M:-``, then ``int8 A:.. M:.. H`` for a plan)."""
    from layersearch.masks.mask import SkipMask

    parts = text.split(" ")
    mask = SkipMask(num_layers, _indices(parts[0]), _indices(parts[1]))
    if len(parts) > 2 and parts[2] == "int8":
        mask = mask.with_int8(_indices(parts[3]), _indices(parts[4]), parts[-1] == "H")
    return mask


def _indices(part: str) -> tuple[int, ...]:
    """``"A:0-2,5"`` -> ``(0, 1, 2, 5)``; ``"M:-"`` -> ``()`` (the ranges of ``short_string``)."""
    body = part.split(":", 1)[1]
    if body == "-":
        return ()
    out: list[int] = []
    for piece in body.split(","):
        start, _, end = piece.partition("-")
        out.extend(range(int(start), int(end or start) + 1))
    return tuple(out)


def _summary(report) -> list[dict[str, Any]]:
    from layersearch.evaluation.measure import rate_speedup

    rows = []
    for ctx in report["contexts"]:
        by = {r["run"]: r for r in ctx["runs"]}
        plain = by["plain"]["decode_tokens_per_second"]
        a = ctx["analysis"]
        cost = ctx["reselection_cost"]
        rows.append({
            "context": ctx["context"],
            **{f"{name}_tokens_per_second": by[name]["decode_tokens_per_second"] for name in by},
            **{f"{name}_steady_tokens_per_second": by[name]["steady_tokens_per_second"] for name in by},
            **{f"{name}_speedup": rate_speedup(plain, by[name]["decode_tokens_per_second"]) for name in by},
            **{f"{name}_tpt": by[name].get("tpt") for name in by},
            "same_window_tpt_decoupled_draft": a.get("decoupled", {}).get("tpt"),
            "same_window_tpt_bound_draft": a.get("bound", {}).get("tpt"),
            "same_window_tpt_fixed": a.get("fixed", {}).get("tpt"),
            "reselection_share": cost["knapsack"]["share"],
            "reselection_share_draft_steps": cost["knapsack_draft"]["share"],
            "reselection_share_other_method": cost["other_share"],
        })
    return rows


def _fmt(value, spec=".2f") -> str:
    return "-" if value is None else format(value, spec)


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def format_table(report) -> str:
    """The report as a text table: per context every run, the same-window TPTs and the re-selection cost."""
    s = report["solver"]
    lines = [
        f"knapsack solver, 60 items x 601 budgets: numba {s['numba_seconds'] * 1e3:.3f} ms/call, "
        f"Python reference {s['reference_seconds'] * 1e3:.1f} ms/call, {s['speedup']:.0f}x",
        "pred TPT: predicted tokens/s at the first selection; tok/s: measured decode tokens/s (prefill excluded, "
        "selection included); steady: without the selection's time",
        "",
        f"{'ctx':>5} {'run':<15} {'pred TPT':>8} {'alpha':>5} {'gamma':>5} {'tok/s':>6} {'steady':>6} {'x plain':>7} {'M':>5}  mask",
    ]
    for ctx in report["contexts"]:
        by = {r["run"]: r for r in ctx["runs"]}
        plain = by["plain"]["decode_tokens_per_second"]
        for r in ctx["runs"]:
            gamma = r.get("gamma")
            lines.append(
                f"{ctx['context']:>5} {r['run']:<15} {_fmt(r.get('tpt')):>8} {_fmt(r.get('alpha')):>5} "
                f"{'-' if gamma is None else gamma:>5} {r['decode_tokens_per_second']:>6.2f} {r['steady_tokens_per_second']:>6.2f} "
                f"{r['decode_tokens_per_second'] / plain if plain else 0:>7.2f} {r['mean_accepted_length']:>5.2f}  {r.get('mask', '')}"
            )
        a = ctx["analysis"]
        dec, bnd, fix = a.get("decoupled", {}), a.get("bound", {}), a.get("fixed", {})
        lines.append(
            f"{'':>5} same window: draft TPT decoupled {_fmt(dec.get('tpt'))} vs bound {_fmt(bnd.get('tpt'))}"
            f" ({_pct((dec['tpt'] / bnd['tpt'] - 1) if dec.get('tpt') and bnd.get('tpt') else None)}); "
            f"fixed-short mask here {_fmt(fix.get('tpt'))} (alpha {_fmt(fix.get('alpha'))})"
        )
        check = a.get("candidate_check")
        if check and check["rows"]:
            lines.append(
                f"{'':>5} candidates (predicted TPT order -> measured tok/s): "
                + ", ".join(f"{r['predicted_tpt']:.1f}->{r['measured_tokens_per_second']:.1f}" for r in check["rows"])
                + f"; predicted best is the fastest: {'yes' if check['predicted_best_is_fastest'] else 'no'}"
                f" ({check['predicted_best_over_fastest']:.2f} of the fastest)"
            )
        c = ctx["reselection_cost"]
        k, kd = c["knapsack"], c["knapsack_draft"]
        lines.append(
            f"{'':>5} one re-selection ({c['method']}): {k['seconds']:.2f} s = {_pct(k['share'])} of {c['interval']} steps "
            f"x {c['knapsack_step_seconds'] * 1e3:.0f} ms (knapsack run), {_pct(kd['share'])} of {c['interval']} x "
            f"{c['knapsack_draft_step_seconds'] * 1e3:.0f} ms (draft run); {c['other_method']}: {_fmt(c['other_seconds'])} s = "
            f"{_pct(c['other_share'])} / {_pct(c['other_share_draft_steps'])} (its first call {_fmt(c['other_first_call_seconds'])} s)"
        )
    return "\n".join(lines)


def write_report(path, report) -> None:
    """``report`` as JSON at ``path`` (atomic; masks as their short strings)."""
    from layersearch.common.jsonfile import write_json_atomic

    write_json_atomic(path, json.loads(json.dumps(report, default=_plain)))


def _plain(value):
    if hasattr(value, "short_string"):
        return value.short_string()
    return str(value)
