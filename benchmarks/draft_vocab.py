"""FR-Spec's reduced draft head: draft forward time and tokens per verification (M) against N.

For each N (the draft scores only the tokenizer's N most frequent tokens; 0 = the full head)
the same held-out prompts are decoded greedily with our loop, interleaved prompt by prompt with
plain ``generate`` (the first configuration rotating), and every output is checked token for
token against plain ``generate``. The draft is the target with an evenly spread skip mask
(``--skip-ratio``, or ``--mask FILE``), or ``--draft-model`` (an independent model sharing the
tokenizer). Prints a markdown table; ``--json`` keeps every run.

Run (embedded model, a few minutes on one thread)::

    python benchmarks/draft_vocab.py --threads 1 --domain code --prompts 3 --max-new-tokens 32
    python benchmarks/draft_vocab.py --model big.gguf --draft-model small.gguf --sizes 8192,16384,32768,0

``--model`` and ``--draft-model`` take whatever ``load_model`` takes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, field

import torch

from layersearch.data import load_prompts
from layersearch.masks.mask import SkipMask
from layersearch.models.loading import EMBEDDED_MODEL, load_model
from layersearch.models.skipping import skipping
from layersearch.runtime.baseline import hf_generate
from layersearch.runtime.cache import new_cache, truncate_cache
from layersearch.runtime.decoder import SpeculativeDecoder
from layersearch.runtime.drafters import LayerSkipDrafter, ModelDrafter
from layersearch.runtime.drafting import DraftPolicy
from layersearch.runtime.forward import forward_tokens
from layersearch.runtime.timing import Clock
from layersearch.frspec.head import DraftHeads, SubsetHead
from layersearch.frspec.vocab import draft_vocabulary

PLAIN = "plain"


@dataclass
class Runs:
    """Everything measured for one configuration, over prompts and repeats."""

    size: int | None = None  # tokens the draft head scores (None: full / plain)
    seconds: dict[tuple[int, int], float] = field(default_factory=dict)  # (repeat, prompt) -> total seconds
    draft_seconds: float = 0.0
    draft_forwards: int = 0
    new_tokens: int = 0
    generations: int = 0
    target_forwards: int = 0
    drafted: int = 0
    accepted: int = 0

    def add(self, key: tuple[int, int], stats) -> None:
        self.seconds[key] = stats.total_seconds
        self.draft_seconds += stats.draft_seconds
        self.draft_forwards += stats.draft_forwards
        self.new_tokens += stats.new_tokens
        self.generations += 1
        self.target_forwards += stats.target_forwards
        self.drafted += stats.drafted
        self.accepted += stats.accepted


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=EMBEDDED_MODEL)
    p.add_argument("--draft-model", default=None, help="an independent draft model (default: the target with a skip mask)")
    p.add_argument("--sizes", default="2048,4096,8192,16384,32768,0", help="draft vocabulary sizes N (0 = full head)")
    p.add_argument("--skip-ratio", type=float, default=0.2, help="the layer-skip draft's evenly spread mask (default 0.2)")
    p.add_argument("--mask", default=None, help="a mask file for the layer-skip draft instead of --skip-ratio")
    p.add_argument("--domain", default="code")
    p.add_argument("--prompts", type=int, default=3, help="held-out (test split) prompts")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-draft", type=int, default=8)
    p.add_argument("--draft-threshold", type=float, default=0.8)
    p.add_argument("--lookahead", default=None, help="static, confidence, adaptive or heuristic (default confidence)")
    p.add_argument("--forward-reps", type=int, default=30, help="timed one-token draft forwards per N (interleaved)")
    p.add_argument("--json", default=None, help="write every run here")
    return p.parse_args(argv)


def draft_mask(args, target, draft) -> SkipMask:
    """The layer-skip draft's mask (none with an independent draft model)."""
    if draft is not None:
        return SkipMask.none(target.info.num_layers)
    return SkipMask.load(args.mask) if args.mask else SkipMask.uniform(target.info.num_layers, args.skip_ratio)


def decoders(args, target, draft) -> dict[str, tuple[SpeculativeDecoder, object]]:
    """One decoder per N: name -> (decoder, its VocabSubset or None)."""
    policy = DraftPolicy(args.max_draft, args.draft_threshold)
    mask = None if draft is not None else draft_mask(args, target, draft)
    found = {}
    for n in (int(s) for s in args.sizes.split(",")):
        vocab = draft_vocabulary(target, n)
        head = None if vocab is None else DraftHeads(vocab)
        drafter = ModelDrafter(draft.model, head=head) if draft is not None else LayerSkipDrafter(head=head)
        decoder = SpeculativeDecoder(target.model, mask, drafter=drafter, lookahead=policy.lookahead(args.lookahead))
        found["full" if n == 0 else str(n)] = (decoder, vocab)
    return found


def measure(args) -> dict:
    torch.set_num_threads(args.threads)
    target = load_model(args.model)
    draft = load_model(args.draft_model) if args.draft_model else None
    configs = decoders(args, target, draft)
    prompts = load_prompts(args.domain, args.prompts, split="test")
    encoded = [target.tokenizer(p.text, return_tensors="pt").input_ids for p in prompts]
    names = [PLAIN, *configs]
    runs = {name: Runs(size=None if name == PLAIN or configs[name][1] is None else configs[name][1].size) for name in names}
    for name, (decoder, _) in configs.items():  # warm-up: slice the heads, fill allocator caches
        decoder.generate(encoded[0], 4)
    reference: dict[int, tuple[int, ...]] = {}
    for repeat in range(args.repeats):
        for index, ids in enumerate(encoded):
            shift = (repeat * len(encoded) + index) % len(names)
            for name in names[shift:] + names[:shift]:  # whatever runs first is measured slower: rotate
                if name == PLAIN:
                    result = hf_generate(target.model, ids, args.max_new_tokens)
                else:
                    result = configs[name][0].generate(ids, args.max_new_tokens)
                runs[name].add((repeat, index), result.stats)
                expected = reference.setdefault(index, result.token_ids)
                if result.token_ids != expected:
                    sys.exit(f"{name}: prompt {index} differs from the other configurations' output")
    outputs = [t for tokens in reference.values() for t in tokens]
    forwards = forward_times(args, target, draft, configs, encoded[0])
    return {"args": vars(args), "runs": runs, "configs": configs, "outputs": outputs, "forward_ms": forwards}


def forward_times(args, target, draft, configs, ids) -> dict[str, float]:
    """Median ms of one one-token draft forward per N, after the prompt ``ids``, interleaved."""
    model = target.model if draft is None else draft.model
    mask = draft_mask(args, target, draft) if draft is None else SkipMask.none(draft.info.num_layers)
    heads = {name: None if vocab is None else SubsetHead(model, vocab) for name, (_, vocab) in configs.items()}
    cache = new_cache(model)
    prompt = ids[0].tolist()
    clock = Clock(model.device)
    times: dict[str, list[float]] = {name: [] for name in heads}
    with torch.inference_mode(), skipping(model, mask):
        forward_tokens(model, prompt[:-1], 0, cache, keep=1)
        for rep in range(args.forward_reps + 1):
            for name, head in heads.items():
                start = clock.now()
                forward_tokens(model, prompt[-1:], len(prompt) - 1, cache, keep=1, head=head)
                if rep:  # the first round warms up
                    times[name].append(1000 * (clock.now() - start))
                truncate_cache(cache, len(prompt) - 1)
    return {name: statistics.median(values) for name, values in times.items()}


def table(measured: dict) -> str:
    """The markdown table of the measurement."""
    runs, configs, outputs = measured["runs"], measured["configs"], measured["outputs"]
    plain, full = runs[PLAIN], runs.get("full")
    lines = [
        "| N | head rows | output tokens in subset | one draft forward, ms | draft ms/forward in decoding | M | alpha | tok/s | speedup vs full head | speedup vs plain |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, (_, vocab) in configs.items():
        r = runs[name]
        inside = 1.0 if vocab is None else sum(t in set(vocab.token_ids) for t in outputs) / len(outputs)
        ms = 1000 * r.draft_seconds / r.draft_forwards if r.draft_forwards else float("nan")
        m = (r.new_tokens - r.generations) / r.target_forwards if r.target_forwards else 1.0
        alpha = r.accepted / r.drafted if r.drafted else float("nan")
        rate = r.new_tokens / sum(r.seconds.values())
        vs_full = _median_ratio(full, r) if full else float("nan")
        lines.append(
            f"| {name} | {r.size or 'all'} | {inside:.3f} | {measured['forward_ms'][name]:.2f} | {ms:.2f} | {m:.2f} | {alpha:.2f} | {rate:.2f} | "
            f"{vs_full:.3f} | {_median_ratio(plain, r):.3f} |"
        )
    lines.append(f"| plain generate | | | | | 1.00 | | {plain.new_tokens / sum(plain.seconds.values()):.2f} | | 1.000 |")
    return "\n".join(lines)


def _median_ratio(reference: Runs, runs: Runs) -> float:
    """Median over (repeat, prompt) of reference time / this configuration's time."""
    return statistics.median(reference.seconds[key] / runs.seconds[key] for key in runs.seconds)


def main(argv=None) -> None:
    args = parse_args(argv)
    measured = measure(args)
    print(table(measured))
    if args.json:
        data = {
            "args": measured["args"],
            "forward_ms": measured["forward_ms"],
            "runs": {name: {**vars(r), "seconds": [[*k, v] for k, v in r.seconds.items()]} for name, r in measured["runs"].items()},
        }
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2)


if __name__ == "__main__":
    main()
