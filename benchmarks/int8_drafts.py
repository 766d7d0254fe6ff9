"""What int8 weights do to a draft model: its one-token forward time, and how often the target
agrees with it (greedy, teacher-forced on the target's own continuation: the per-token
acceptance alpha of a chain draft).

For each variant of the draft model (fp32; int8 but the MLP down projections and the LM head;
int8 but the down projections (what ``--draft-quant int8`` does); every Linear int8) it prints
the median one-token forward at a context of 300 and the agreement per prompt. The target's
continuations come first (greedy ``generate``), then the target is freed.

Run: ``python benchmarks/int8_drafts.py --target Q15.gguf --draft Q05.gguf --threads 1``
(``--draft`` = ``--target`` measures an int8 copy of the target itself).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import warnings

import torch

from layersearch.data import load_prompts
from layersearch.models.loading import load_model
from layersearch.models.quantize import quantize_draft

VARIANTS = {  # label -> Linear names left in fp32 (None: no quantization)
    "fp32": None,
    "int8 but down_proj, lm_head": ("down_proj", "lm_head"),
    "int8 but down_proj (--draft-quant int8)": ("down_proj",),
    "int8 everything": (),
}


def quantized(model: torch.nn.Module, kept: tuple[str, ...]) -> torch.nn.Module:
    """A copy of ``model`` with every Linear not named in ``kept`` int8."""
    return quantize_draft(copy.deepcopy(model), keep=kept)


def one_token_seconds(model: torch.nn.Module, context: int = 300, repeats: int = 7) -> float:
    """Median seconds of a one-token forward after ``context`` cached tokens."""
    ids = torch.randint(0, 1000, (1, context))
    with torch.inference_mode():
        cache = model(ids, use_cache=True).past_key_values
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            model(torch.tensor([[5]]), cache=cache, use_cache=True, logits_to_keep=1)
            times.append(time.perf_counter() - start)
            cache.crop(-1)  # drop the timed token again
    return statistics.median(times)


def agreement(model: torch.nn.Module, prompts: list[torch.Tensor], continuations: list[torch.Tensor]) -> list[float]:
    """Per prompt, the share of the target's greedy tokens that ``model`` predicts as its top-1."""
    shares = []
    with torch.inference_mode():
        for ids, target in zip(prompts, continuations):
            full = torch.cat([ids[0], target]).view(1, -1)
            predicted = model(full).logits[0, ids.shape[1] - 1:-1].argmax(-1)
            shares.append(float((predicted == target).float().mean()))
    return shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--domains", default="code,summarization")
    parser.add_argument("--prompts-per-domain", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    target = load_model(args.target)
    texts = [p.text for d in args.domains.split(",") for p in load_prompts(d, args.prompts_per_domain, seed=0, split="train")]
    prompts = [target.tokenizer(t, return_tensors="pt").input_ids for t in texts]
    with torch.inference_mode():
        continuations = [target.model.generate(ids, max_new_tokens=args.new_tokens, do_sample=False)[0, ids.shape[1]:]
                         for ids in prompts]
    target_seconds = one_token_seconds(target.model)
    print(f"target one token: {target_seconds * 1e3:.1f} ms ({args.threads} thread(s))")
    del target
    draft = load_model(args.draft).model
    for label, kept in VARIANTS.items():
        model = draft if kept is None else quantized(draft, kept)
        seconds = one_token_seconds(model)
        shares = agreement(model, prompts, continuations)
        print(f"{label:42} {seconds * 1e3:7.1f} ms ({seconds / target_seconds:.3f} of the target)  "
              f"agreement mean {statistics.mean(shares):.3f}  per prompt {' '.join(f'{s:.2f}' for s in shares)}", flush=True)


if __name__ == "__main__":
    main()
