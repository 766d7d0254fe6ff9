"""Exported drafts served by a real vLLM engine and server (its CPU build, in its own environment).

In float32, greedy tokens from vLLM with each exported draft equal vLLM plain and our own
plain decoding (``generate --baseline``), for a batch of requests and for each one alone; the
server's ``/v1/completions`` answers what the offline engine generated, and its ``/metrics``
count the drafts. Runs where ``LAYERSEARCH_VLLM_PYTHON`` names the python of vLLM's environment
(``.ci/run`` makes it with ``layersearch vllm-env``); skips elsewhere.
Each engine starts in its own process (30-70 s each on 2 cores).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from layersearch.decoder.spec import DecoderSpec, DrafterSpec, LookaheadSpec, MaskSourceSpec, ModelRef, ModelSpec
from layersearch.integrations.vllm_export import export_vllm
from layersearch.masks.mask import SkipMask

VLLM_PYTHON = os.environ.get("LAYERSEARCH_VLLM_PYTHON", "")
WORKER = Path(__file__).with_name("vllm_worker.py")
PROMPTS = ["def quicksort(xs):", "The capital of France is", "Write a function that adds two numbers.\n",
           "for i in range(10):\n    print(i)\nfor i in range(10):"]
MAX_TOKENS = 24

pytestmark = [
    pytest.mark.skipif(not VLLM_PYTHON or not Path(VLLM_PYTHON).exists(),
                       reason="vLLM's environment not given: layersearch vllm-env DIR, "
                              "then LAYERSEARCH_VLLM_PYTHON=DIR/bin/python"),
    pytest.mark.embedded,
]

# The SmolLM2 plan: layer 4 whole, 9's attention and 17's MLP skipped; some kept sub-layers int8.
PLAN = SkipMask(30, attention=(4, 9), mlp=(4, 17), int8_attention=(0, 1, 2), int8_mlp=(3, 8, 9))
EXPORTS = {
    "int8-self": DrafterSpec(quant="int8"),
    "plan": MaskSourceSpec("mask", mask=PLAN),
    "ngram": DrafterSpec("prompt-lookup"),
}


def _spec(part) -> DecoderSpec:
    key = "drafter" if isinstance(part, DrafterSpec) else "mask_source"
    extra = {"drafter": DrafterSpec("layer-skip")} if key == "mask_source" else {}
    return DecoderSpec(ModelSpec(ModelRef("smollm2-135m")), lookahead=LookaheadSpec("static", 3), **{key: part}, **extra)


def _run_engine(job: dict, tmp: Path, name: str) -> dict:
    (tmp / f"{name}.job.json").write_text(json.dumps(job))
    result = subprocess.run([VLLM_PYTHON, str(WORKER), str(tmp / f"{name}.job.json"), str(tmp / f"{name}.out.json")],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((tmp / f"{name}.out.json").read_text())


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Every export, our plain decoding, and vLLM's outputs for each (plain first)."""
    import layersearch

    tmp = tmp_path_factory.mktemp("vllm")
    exports = {name: export_vllm(_spec(part), tmp / name) for name, part in EXPORTS.items()}
    plain = layersearch.load_decoder(DecoderSpec(ModelSpec(ModelRef("smollm2-135m")), plain=True))
    prompts = [plain.encode(text)[0].tolist() for text in PROMPTS]
    ours = [plain.generate(ids, max_new_tokens=MAX_TOKENS).token_ids for ids in prompts]
    del plain  # its weights are not needed while the engines run
    model = exports["int8-self"].config["model"]
    runs = {"plain": _run_engine({"model": model, "dtype": "float32", "speculative_config": None,
                                  "prompts": prompts, "max_tokens": MAX_TOKENS}, tmp, "plain")}
    for name, export in exports.items():
        config = export.config
        runs[name] = _run_engine({"model": config["model"], "dtype": "float32", "speculative_config": config["speculative_config"],
                                  "prompts": prompts, "max_tokens": MAX_TOKENS}, tmp, name)
    return {"exports": exports, "prompts": prompts, "ours": [list(t) for t in ours], "runs": runs}


def test_vllm_plain_is_our_plain_decoding(served):
    assert served["runs"]["plain"]["batched"] == served["ours"]
    assert served["runs"]["plain"]["single"] == served["ours"]


@pytest.mark.parametrize("name", list(EXPORTS))
def test_each_exported_draft_serves_vllm_plains_tokens_batched_and_single(served, name):
    run = served["runs"][name]
    assert run["batched"] == served["ours"], f"{name}: batched requests differ from plain decoding"
    assert run["single"] == served["ours"], f"{name}: single requests differ from plain decoding"
    assert run["draft_tokens"] > 0, f"{name}: vLLM drafted nothing"


def test_drafts_are_accepted_as_the_plans_quality_predicts(served):
    # the model as its own int8 draft agrees with itself far more often than a draft missing sub-layers
    rate = {name: served["runs"][name]["accepted"] / served["runs"][name]["draft_tokens"] for name in ("int8-self", "plan")}
    assert rate["int8-self"] > 0.6
    assert rate["int8-self"] > rate["plan"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def test_the_server_answers_what_the_engine_generated_and_counts_drafts(served, tmp_path):
    export = served["exports"]["int8-self"]
    port = _free_port()
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen([VLLM_PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1",
                               "--port", str(port), "--model", export.config["model"], "--served-model-name", "draft-test",
                               "--dtype", "float32", "--max-model-len", "1024", "--enforce-eager",
                               "--speculative-config", json.dumps(export.config["speculative_config"])],
                              stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 400
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            try:
                _get(f"{base}/health")
                break
            except OSError:
                assert time.monotonic() < deadline, "the server did not start in 400 s"
                time.sleep(2)
        for ids, expected in zip(served["prompts"], served["ours"]):
            body = json.dumps({"model": "draft-test", "prompt": ids, "max_tokens": MAX_TOKENS, "temperature": 0,
                               "return_token_ids": True}).encode()
            request = urllib.request.Request(f"{base}/v1/completions", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as response:
                choice = json.loads(response.read())["choices"][0]
            assert choice["token_ids"] == expected
        metrics = _get(f"{base}/metrics")
        drafted = [float(v) for v in re.findall(r"^vllm:spec_decode_num_draft_tokens_total\{[^}]*\} (\S+)$", metrics, re.M)]
        assert drafted and sum(drafted) > 0, "the server's /metrics counted no drafts"
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
