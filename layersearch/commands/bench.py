"""``layersearch bench`` and ``layersearch demo``: side-by-side speed of plain and speculative decoding."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from layersearch.commands.args import draft_args, model_args
from layersearch.checks import check_int
from layersearch.commands.common import bench_masks, load, positive_int
from layersearch.errors import LayersearchError
from layersearch.jsonfile import write_json_atomic
from layersearch.mask import SkipMask


class _Default(str):
    """A default option value that can be told from the same text given on the command line."""


DEFAULT_DOMAINS = _Default("summarization,math,code")


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``bench``: its arguments (the configurations it runs: ratios, masks, peers, drafters)."""
    p = sub.add_parser("bench", help="plain generate vs HF peers vs our loop, per domain")
    model_args(p, kernels=True)
    p.add_argument("--domains", default=DEFAULT_DOMAINS, help="comma-separated domains (default summarization,math,code; "
                                                             "with --prompts only the file unless --domains is given)")
    p.add_argument("--prompts", metavar="FILE", help="your own prompts (JSONL: {\"prompt\": ...} or {\"messages\": [...]} "
                                                     "per line); their test split is measured, like a domain's")
    p.add_argument("--prompts-per-domain", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--skip-ratios", default="0.1,0.2,0.3,0.45", help="uniform mask ratios to run")
    p.add_argument("--masks", default="", help="comma-separated mask files to run as well")
    p.add_argument("--repeats", type=int, default=3, help="runs per configuration (median reported)")
    p.add_argument("--profile", help="latency profile JSON (measured if absent)")
    p.add_argument("--out", default="bench.json")
    p.add_argument("--no-peers", action="store_true", help="skip HF's prompt lookup / early exit peers")
    p.add_argument("--peers", default="prompt-lookup,early-exit",
                   help="transformers' peers to run: prompt-lookup, early-exit, assisted:MODEL (assisted generation "
                        "with that draft model; MODEL@int8: its weights in int8; default prompt-lookup,early-exit)")
    p.add_argument("--drafters", default="prompt-lookup,hybrid",
                   help="our other drafters to run beside the layer-skip masks: prompt-lookup, hybrid, model:MODEL "
                        "(an independent draft model), hybrid:MODEL (lookup, else that draft model); MODEL@int8 "
                        "drafts with that model's weights in int8 (CPU) "
                        "(default prompt-lookup,hybrid; '' for none)")
    p.add_argument("--lookaheads", default="",
                   help="comma-separated lookahead rules (static, confidence, adaptive, heuristic, roc): one row per rule for "
                        "each mask that skips something and each draft model (default: the confidence rule)")
    p.add_argument("--specs", default="", metavar="FILES",
                   help="comma-separated decoder spec files (from generate --save-spec or tune): one row each, "
                        "decoding greedily with the bench's kernels (any drafter, mask, steering, lookahead or DISCO "
                        "file a spec names)")
    p.add_argument("--draft-vocab", type=int, default=0, metavar="N",
                   help="also run each draft-model row and each mask that skips something with a draft head that "
                        "scores only the tokenizer's N most frequent tokens (FR-Spec; default 0: no such rows)")
    p.add_argument("--split", choices=("train", "validation", "test"),
                   help="prompt split (default test; with --spec-bench: every question)")
    sb = p.add_argument_group("Spec-Bench mode (vanilla and ours on Spec-Bench's questions)")
    sb.add_argument("--spec-bench", metavar="FILE", help="Spec-Bench's question.jsonl: run in Spec-Bench mode")
    sb.add_argument("--categories", help="comma-separated categories or groups (mt_bench, translation, ...; default all)")
    sb.add_argument("--limit", type=int, help="at most N questions per category")
    sb.add_argument("--answers", metavar="DIR", help="folder for the answer files, one per method")
    draft_args(p)
    p.set_defaults(command="bench")


def run(args: Any) -> int:
    """Run the benchmark, print one table per domain and write the JSON report."""
    from layersearch.data import load_prompts
    from layersearch.runtime.drafting import DraftPolicy
    from layersearch.runtime.kernels import choose_kernels, model_kernels

    from layersearch.jsonfile import BENCH_SCHEMA_VERSION
    from layersearch.outputs import announce, check_output

    out = check_output(args.out)
    positive_int(args.repeats, "--repeats")
    positive_int(args.prompts_per_domain, "--prompts-per-domain")
    positive_int(args.max_new_tokens, "--max-new-tokens")
    check_int(args.draft_vocab, "--draft-vocab", minimum=0)
    domains = _domains(args)
    drafters, peers, lookaheads = _drafters(args), _peers(args), _lookaheads(args)
    _check_quantized(args, peers + tuple(drafters))  # before the model loads
    specs = _read_specs(args.specs, args.model)  # a bad spec or file it names fails before the model load
    loaded = load(args)
    from layersearch.models.context import check_all_fit

    check_all_fit(loaded, (), args.max_new_tokens)  # a runaway --max-new-tokens, before anything else loads
    split = getattr(args, "split", None) or "test"  # a comparison: held-out prompts by default
    prompts = {} if getattr(args, "spec_bench", None) else {
        d: [p.text for p in load_prompts(d, args.prompts_per_domain, seed=0, split=split, tokenizer=loaded.tokenizer)]
        for d in domains}
    check_all_fit(loaded, ((f"{_shown(d)} prompt {_start(text)}", len(loaded.tokenizer(text).input_ids))
                           for d in domains for text in prompts.get(d, ())), args.max_new_tokens)
    spec_rows = _spec_rows(loaded, specs)
    draft_models = _draft_models(args, loaded, peers + tuple(drafters))
    from layersearch.vocab import draft_vocabulary

    vocab = draft_vocabulary(loaded, args.draft_vocab)
    if getattr(args, "spec_bench", None):  # Spec-Bench mode: its answer files and per-group table
        from layersearch.commands import spec_bench

        return spec_bench.run(args, loaded)
    masks = [SkipMask.none(loaded.info.num_layers, loaded.info)] + bench_masks(args.skip_ratios, args.masks, loaded.info)
    profile = _profile(args, loaded)
    kernels = choose_kernels(args.kernels, profile)
    _say(f"kernels: {kernels}")
    policy = DraftPolicy(args.max_draft, args.draft_threshold, args.adaptive_threshold)
    report: dict[str, Any] = {"schema_version": BENCH_SCHEMA_VERSION, "model": loaded.info.to_dict(), "profile": profile.to_dict(),
                              "kernels": kernels, "domains": {}}
    with model_kernels(loaded.model, kernels):  # every configuration, plain generate included, runs them
        options = dict(peers=peers, drafters=drafters, draft_models=draft_models, lookaheads=lookaheads, vocab=vocab)
        _run_domains(args, loaded, domains, prompts, masks, profile, policy, options, report, out, spec_rows)
    announce(out, f"wrote {out}")
    return 0


def _run_domains(args: Any, loaded, domains, prompts, masks, profile, policy, options: dict[str, Any], report, out,
                 extra=()) -> None:
    """Measure every domain's configurations and print its table, filling ``report`` and writing
    it to ``out`` after each domain (a long run stopped later keeps what it measured); ``options``:
    the keyword arguments of :func:`layersearch.bench.configs` beyond the masks (peers, drafters...);
    ``extra``: more configurations (the spec rows), after those."""
    from layersearch.bench import LOOP, PLAIN, configs, format_table, run_domain, summarize

    for domain in domains:
        ids = [loaded.tokenizer(text, return_tensors="pt").input_ids.to(loaded.model.device) for text in prompts[domain]]
        context = int(sum(i.shape[1] for i in ids) / len(ids)) + args.max_new_tokens // 2
        cfgs = configs(loaded.model, masks, policy, **options) + list(extra)
        _say(f"{domain}: {len(ids)} prompts x {len(cfgs)} configurations x {args.repeats} repeats")
        measured = run_domain(cfgs, ids, args.max_new_tokens, args.repeats, _say, device=loaded.model.device)
        loop, plain = measured.get(LOOP), measured.get(PLAIN)
        rows = [summarize(c.name, measured[c.name], profile, context, c.mask, loop, plain) for c in cfgs]
        report["domains"][domain] = {"context": context, "rows": rows}
        print(format_table(domain, rows), flush=True)
        write_json_atomic(out, report)


def _shown(domain: str) -> str:
    """A domain as the user named it: ``file:PATH`` is the ``--prompts`` file."""
    from layersearch.data.user import PREFIX

    return domain[len(PREFIX):] + ":" if domain.startswith(PREFIX) else f"domain {domain}:"


def _start(text: str) -> str:
    """A prompt's first words, quoted: how a user finds it in a file."""
    words = " ".join(text.split())
    return repr(words if len(words) <= 40 else words[:40] + "...")


def _domains(args: Any) -> list[str]:
    """``--domains`` and the prompt file of ``--prompts`` (checked before the model loads)."""
    from layersearch.data.user import choose_rows, domain_for

    given = "" if args.prompts and isinstance(args.domains, _Default) else args.domains
    domains = [d for d in given.split(",") if d]
    if args.prompts:
        choose_rows(args.prompts, args.prompts_per_domain, 0, args.split or "test")
        domains.append(domain_for(args.prompts))
    return domains


def _peers(args: Any) -> tuple[str, ...]:
    from layersearch.bench import ASSISTED, PEERS

    if args.no_peers:
        return ()
    return _named_items(args.peers, "--peers", PEERS, (ASSISTED,))


def _drafters(args: Any) -> list[str]:
    return list(_named_items(args.drafters, "--drafters", ("prompt-lookup", "hybrid"), ("model", "hybrid")))


def _named_items(text: str, flag: str, plain: tuple[str, ...], with_model: tuple[str, ...]) -> tuple[str, ...]:
    """The comma-separated items of ``flag``: each a plain name or ``KIND:MODEL`` for a kind that takes a model."""
    from layersearch.bench import split_named

    items = tuple(item.strip() for item in text.split(",") if item.strip())
    for item in items:
        kind, model = split_named(item)
        if model is None and kind not in plain or model is not None and (kind not in with_model or not model.strip()):
            choices = ", ".join((*plain, *(f"{k}:MODEL" for k in with_model)))
            raise LayersearchError(f"{flag}: unknown item {item!r} (choose from {choices})")
    return items


def _lookaheads(args: Any) -> tuple[str, ...]:
    from layersearch.runtime.lookahead import LOOKAHEAD_NAMES

    names = tuple(n.strip() for n in args.lookaheads.split(",") if n.strip())
    unknown = [n for n in names if n not in LOOKAHEAD_NAMES]
    if unknown:
        raise LayersearchError(f"--lookaheads: unknown rule {unknown[0]!r} (choose from {', '.join(LOOKAHEAD_NAMES)})")
    return names


def _read_specs(text: str, model: str) -> list[tuple[str, str, Any, Any]]:
    """(file, row label, DecoderSpec, SpecFiles) for each file of ``--specs``, every file it names
    read and checked; a spec bound to a model is checked against it once loaded (:func:`_spec_rows`)."""
    from layersearch.build import read_spec_files
    from layersearch.spec import DecoderSpec

    paths = [p.strip() for p in text.split(",") if p.strip()]
    if text.strip() and not paths:
        raise LayersearchError("--specs: no spec file named")
    stems = [Path(p).stem for p in paths]
    specs = []
    for path, stem in zip(paths, stems):
        spec = DecoderSpec.load(path)
        _check_spec_model(path, spec, model)
        _check_placement(path, spec)
        specs.append((path, stem if stems.count(stem) == 1 else path, spec, read_spec_files(spec)))
    return specs


def _check_spec_model(path: str, spec: Any, model: str) -> None:
    """A spec not yet bound to a model (no fingerprint) must name the bench's ``--model``."""
    if spec.model.info is not None:
        return
    ref = spec.model.ref
    same = ref.ref == model or ref.path and _real(ref.ref) == _real(model)
    if not same:
        raise LayersearchError(f"{path}: the spec is for model {ref.ref!r}, not --model {model!r}")


def _check_placement(path: str, spec: Any) -> None:
    """The spec's device and dtype must be names we know, though the bench runs on its own."""
    from layersearch.models.loading import check_device_name, resolve_dtype

    try:
        check_device_name(spec.model.device)
        if spec.model.dtype is not None:
            resolve_dtype(spec.model.dtype)
    except LayersearchError as exc:
        raise LayersearchError(f"{path}: {exc}") from None


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _spec_rows(loaded, specs) -> list[Any]:
    """The bench rows of the ``--specs`` files, each checked against the loaded model first; an
    error names its file."""
    from layersearch.bench import spec_configs

    rows = []
    for path, label, spec, files in specs:
        try:
            spec.check_model(loaded.info)
            rows += spec_configs(loaded, [(label, spec, files)])
        except LayersearchError as exc:
            raise LayersearchError(f"{path}: {exc}") from None
    return rows


def _model_names(items) -> list[str]:
    from layersearch.bench import split_named

    return list(dict.fromkeys(name for name in (split_named(item)[1] for item in items) if name is not None))


def _check_quantized(args: Any, items) -> None:
    """Each ``MODEL@int8`` of ``items`` can be quantized on this device and dtype."""
    from layersearch.bench import split_quant
    from layersearch.models.quantize import check_quant

    for name in _model_names(items):
        check_quant(split_quant(name)[1], args.device, args.dtype)


def _draft_models(args: Any, loaded, items) -> dict[str, Any]:
    """The draft models that ``--peers`` and ``--drafters`` name, each loaded once in the target's
    dtype and checked against its vocabulary; ``MODEL@int8`` is that model with int8 weights."""
    from layersearch.bench import split_quant
    from layersearch.build import load_draft_model
    from layersearch.models.quantize import quantize_draft, quantized_copy

    names = _model_names(items)
    models: dict[str, Any] = {}
    for name in names:
        ref, quant = split_quant(name)
        plain = models.get(ref)
        if plain is None:
            _say(f"loading draft model {ref}")
            plain = load_draft_model(ref, loaded, args.device, args.dtype, progress=_say).model
            if ref in names:
                models[ref] = plain
        if quant is not None:
            models[name] = quantized_copy(plain, quant) if ref in names else quantize_draft(plain, quant)
    return models


def _profile(args: Any, loaded):
    from layersearch.profile import LatencyProfile
    from layersearch.runtime.profiler import quick_profile

    if args.profile:
        return LatencyProfile.load(args.profile, model=loaded.info)
    _say("measuring a quick latency profile (pass --profile FILE to reuse one)")
    return quick_profile(loaded.model, loaded.info, max_verify=16, repeats=3, progress=_say, kernels=args.kernels)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
