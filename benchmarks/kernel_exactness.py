"""Greedy outputs with the numba kernels against transformers' ``generate`` with stock kernels.

Within one kernel set speculative output equals our plain loop by construction (tested). Across
kernel sets the logits differ in their last bits, so greedy outputs can part where two tokens
are nearly tied in fp32. This counts how often that happens on held-out prompts of the embedded
model: for each prompt, HF ``generate`` (stock kernels) vs our plain loop and a speculative run
(uniform 0.2 mask) with ``--kernels numba``, and where they first differ, the stock top-2 logit
gap there.

Run: ``python benchmarks/kernel_exactness.py --prompts-per-domain 3 --max-new-tokens 48``.
"""

from __future__ import annotations

import argparse

import torch

from layersearch.data import load_prompts
from layersearch.masks.mask import SkipMask
from layersearch.models.loading import load_model
from layersearch.runtime.baseline import hf_generate
from layersearch.runtime.decoder import SpeculativeDecoder
from layersearch.kernels.select import model_kernels


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token, None when equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def top2_gap(model, ids: torch.Tensor, tokens: list[int], at: int) -> float:
    """Stock logit gap between the best two tokens at generated position ``at``."""
    with torch.inference_mode():
        context = torch.cat([ids[0], torch.tensor(tokens[:at], dtype=ids.dtype)]).view(1, -1)
        top = model(context).logits[0, -1].topk(2).values
    return float(top[0] - top[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", default="summarization,math,code,translation")
    parser.add_argument("--prompts-per-domain", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()
    torch.set_num_threads(1)
    loaded = load_model()
    model = loaded.model
    layers = loaded.info.num_layers
    same_plain = same_spec = total = 0
    for domain in args.domains.split(","):
        for prompt in load_prompts(domain, args.prompts_per_domain, seed=0, split="test"):
            ids = loaded.tokenizer(prompt.text, return_tensors="pt").input_ids
            reference = list(hf_generate(model, ids, args.max_new_tokens).token_ids)
            with model_kernels(model, "numba"):
                plain = list(SpeculativeDecoder(model, SkipMask.none(layers)).generate(ids, args.max_new_tokens).token_ids)
                spec = list(SpeculativeDecoder(model, SkipMask.uniform(layers, 0.2)).generate(ids, args.max_new_tokens).token_ids)
            assert spec == plain, "speculative output must equal our plain loop under the same kernels"
            total += 1
            where = first_difference(reference, plain)
            same_plain += where is None
            same_spec += first_difference(reference, spec) is None
            gap = "" if where is None else f", first difference at token {where}, stock top-2 gap {top2_gap(model, ids, reference, where):.4f}"
            print(f"{domain} {prompt.id} ({ids.shape[1]} tokens): numba == generate(stock): {where is None}{gap}", flush=True)
    print(f"\n{total} held-out prompts x {args.max_new_tokens} tokens: numba plain loop == stock generate on {same_plain}, "
          f"numba speculative == stock generate on {same_spec}; speculative == plain loop (numba) on all {total}")


if __name__ == "__main__":
    main()
