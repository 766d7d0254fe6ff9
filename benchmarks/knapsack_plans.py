"""KnapSpec's multiple-choice knapsack over draft plans (full / int8 / skip per sub-layer, the head
full or int8), on a model's train-split prompts: writes the best candidates as plan files.

The plans' alphas are KnapSpec's teacher-forced estimates over each prompt's last ``--window``
tokens; measure the written plans on held-out prompts with ``layersearch bench --masks``
(docs/results.md, "Session 9"). Needs a latency profile with int8 timings (``layersearch profile``).

    python benchmarks/knapsack_plans.py --model Q15.gguf --profile q15_profile.json --out-prefix q15_knap_plan
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from layersearch.data import load_prompts
from layersearch.knapspec.select import KnapSpecConfig, knapsack_plans
from layersearch.models.loading import load_model
from layersearch.profiling.profile import LatencyProfile


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--profile", required=True)
    parser.add_argument("--domain", default="code")
    parser.add_argument("--prompts", type=int, default=4, help="train-split prompts (default 4)")
    parser.add_argument("--window", type=int, default=32, help="reference tokens per prompt (default 32)")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out-prefix", default="knap_plan")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    with open(args.profile) as f:
        profile = LatencyProfile.from_dict(json.load(f))
    prompts = load_prompts(args.domain, args.prompts, split="train")
    ids = [loaded.tokenizer(p.text, return_tensors="pt").input_ids[0] for p in prompts]  # [n] each
    start = time.perf_counter()
    rows = knapsack_plans(loaded.model, profile, ids, context=args.context, max_candidates=args.candidates,
                          window=args.window, config=KnapSpecConfig(method="plans", max_alpha_candidates=32,
                                                                    allow_plain=False))
    print(f"{len(rows)} candidates in {time.perf_counter() - start:.0f} s", flush=True)
    for i, (plan, tpt, gamma, alpha) in enumerate(rows):
        print(f"{i}: TPT {tpt:.2f} gamma {gamma} alpha {alpha:.3f} skipped {plan.num_skipped} int8 {plan.num_int8} "
              f"head {'int8' if plan.int8_head else 'full'}: {plan.short_string()}", flush=True)
        plan.save(f"{args.out_prefix}{i}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
