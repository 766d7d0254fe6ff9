"""Run in vLLM's environment by tests/integrations/test_vllm_serving.py: one engine, greedy, batched and single.

    python vllm_worker.py JOB.json OUT.json

JOB: {"model", "dtype", "speculative_config" (or null), "prompts": [[ids]], "max_tokens"}.
OUT: {"batched": [[ids]], "single": [[ids]], "drafts", "draft_tokens", "accepted"}: the token ids
vLLM generated for each prompt, all prompts in one batch and one by one, and its speculative
counters over both. Imports vLLM only (not layersearch: vLLM's environment pins other versions).
"""

import json
import os
import sys


def _counters(llm):
    names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted"}
    found = {key: 0 for key in names.values()}
    for metric in llm.get_metrics():
        if metric.name in names:
            found[names[metric.name]] = int(metric.value)
    return found


def main():
    job = json.loads(open(sys.argv[1]).read())
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams

    kwargs = {"model": job["model"], "dtype": job["dtype"], "max_model_len": 1024, "disable_log_stats": False,
              "enforce_eager": True, "seed": 0}
    if job["speculative_config"]:
        kwargs["speculative_config"] = job["speculative_config"]
    llm = LLM(**kwargs)
    params = SamplingParams(temperature=0.0, max_tokens=job["max_tokens"])
    prompts = [{"prompt_token_ids": ids} for ids in job["prompts"]]
    batched = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]
    single = [list(llm.generate([p], params, use_tqdm=False)[0].outputs[0].token_ids) for p in prompts]
    with open(sys.argv[2], "w") as handle:
        json.dump({"batched": batched, "single": single, **_counters(llm)}, handle)


if __name__ == "__main__":
    main()
