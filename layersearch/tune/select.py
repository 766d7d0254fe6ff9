"""The choice: the study's best few configurations measured again on held-out prompts.

The finalists (the best distinct specs by train speedup) decode the prompt file's test split
beside plain ``generate``, transformers' prompt lookup and, with a draft model, its assisted
generation, all in one interleaved :func:`layersearch.evaluation.bench.run_domain`. The winner is the
fastest finalist whose output equals plain decoding's; when none beats plain decoding on the
held-out prompts, plain decoding is chosen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DecoderSpec
from layersearch.tune.study import SPEC_ATTR

PLAIN_LABEL = "plain generate"


@dataclass(frozen=True)
class Finalist:
    """A configuration the study found, to be measured on held-out prompts."""

    label: str
    spec: DecoderSpec
    train_speedup: float
    trial: int


@dataclass(frozen=True)
class HeldOutRow:
    """One configuration's held-out figures (``spec`` None for plain generate and the peers)."""

    label: str
    speedup: float | None  # decode phase, against plain generate (None: the configuration failed)
    end_to_end: float | None
    M: float | None
    alpha: float | None
    identical: bool
    vs_peers: Mapping[str, float] = field(default_factory=dict)  # peer label -> our speedup / the peer's
    spec: DecoderSpec | None = None
    train_speedup: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class Selection:
    """The held-out table and the configuration chosen from it."""

    rows: tuple[HeldOutRow, ...]
    winner: str  # a row's label
    spec: DecoderSpec
    plain_chosen: bool


def finalists(study: Any, count: int) -> list[Finalist]:
    """The ``count`` best complete trials with distinct specs, plain decoding left out (it is the reference)."""
    import optuna

    done = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)) if SPEC_ATTR in t.user_attrs]
    chosen: list[Finalist] = []
    seen: set[str] = set()
    for trial in sorted(done, key=lambda t: -t.value):
        spec = DecoderSpec.from_dict(trial.user_attrs[SPEC_ATTR])
        key = json.dumps(trial.user_attrs[SPEC_ATTR], sort_keys=True)
        if spec.plain or key in seen or trial.user_attrs.get("identical") is False:
            continue
        seen.add(key)
        chosen.append(Finalist(f"trial {trial.number}", spec, float(trial.value), trial.number))
        if len(chosen) == count:
            break
    return chosen


def remeasure(loaded: Any, chosen: Sequence[Finalist], prompts: Sequence[Any], new_tokens: int, repeats: int, *,
              drafts: Mapping[str | None, Any] | None = None, draft_ref: str | None = None, kernels: str = "stock",
              say=lambda message: None) -> list[HeldOutRow]:
    """Plain generate, the peers (transformers' assisted generation with each loaded form of the
    draft model) and the finalists on the held-out ``prompts``, interleaved, all with ``kernels``."""
    from layersearch.evaluation.bench import PLAIN, configs, run_domain, summarize
    from layersearch.runtime.draft_policy import DraftPolicy
    from layersearch.tune.objective import spec_config, with_kernels

    named: dict[str, Any] = {}
    for quant, d in (drafts or {}).items():
        if draft_ref is None:
            raise LayersearchError("drafts need draft_ref, the draft model's name", fields="draft_ref")
        named[draft_ref if quant is None else f"{draft_ref}@{quant}"] = d.model
    peers = ("prompt-lookup", *(f"assisted:{name}" for name in named))
    base = [with_kernels(c, loaded.model, kernels) for c in configs(loaded.model, [], DraftPolicy(), peers=peers, draft_models=named)]
    ours = [spec_config(loaded, f.spec, f.label, drafts, kernels) for f in chosen]
    say(f"held-out: {len(prompts)} test prompts x {len(base) + len(ours)} configurations x {repeats} repeats")
    from layersearch.decoder.spec import compile_wanted

    compiled = any(compile_wanted(f.spec.compile, loaded.model.device.type) for f in chosen)
    measured = run_domain(base + ours, list(prompts), new_tokens, repeats, say, device=loaded.model.device, compiled=compiled)
    from layersearch.evaluation.bench import STATIC

    baseline = STATIC if STATIC in measured else PLAIN  # on CUDA: transformers' static-cache generate, what users run there
    summary = {c.name: summarize(c.name, measured[c.name], None, 0, None, plain=measured[baseline]) for c in base + ours}
    peer_rows = {c.name: summary[c.name] for c in base[1:]}
    rows = [_row(PLAIN, summary[PLAIN], {}, drafts=False)]  # transformers' generate: no drafts counted, M and alpha "-"
    rows += [_row(name, row, {}, drafts=False) for name, row in peer_rows.items()]
    for finalist in chosen:
        rows.append(_row(finalist.label, summary[finalist.label], peer_rows, finalist))
    return rows


def held_out_row(label: str, row: Mapping[str, Any], *, drafts: bool = True) -> HeldOutRow:
    """A row of :func:`layersearch.evaluation.bench.summarize` as a HeldOutRow (no spec, no peers;
    ``drafts``: whether its decoder counts drafts, else M and alpha are None: transformers' own
    ``generate`` and its peers report no acceptance)."""
    return _row(label, row, {}, drafts=drafts)


def _row(label: str, row: Mapping[str, Any], peers: Mapping[str, Mapping[str, Any]], finalist: Finalist | None = None,
         *, drafts: bool = True) -> HeldOutRow:
    spec = finalist.spec if finalist else None
    train = finalist.train_speedup if finalist else None
    if "error" in row:
        return HeldOutRow(label, None, None, None, None, False, spec=spec, train_speedup=train, error=row["error"])
    speedup = float(row.get("decode_speedup", row["speedup"]))
    vs = {name: speedup / float(p.get("decode_speedup", p["speedup"])) for name, p in peers.items() if "error" not in p}
    return HeldOutRow(label, speedup, float(row["speedup"]), row["M"] if drafts else None, row["alpha"] if drafts else None,
                      bool(row["identical_to_plain"]), vs, spec, train)


def choose(rows: Sequence[HeldOutRow], plain_spec: DecoderSpec) -> Selection:
    """The fastest finalist (a row with a spec) that is identical to plain decoding and faster
    than it on the held-out prompts; plain decoding when there is none."""
    eligible = [(r.speedup, r.spec, r.label) for r in rows
                if r.spec is not None and r.identical and r.speedup is not None and r.speedup > 1.0]
    if not eligible:
        return Selection(tuple(rows), PLAIN_LABEL, plain_spec, True)
    _, spec, label = max(eligible, key=lambda item: item[0])
    return Selection(tuple(rows), label, spec, False)
