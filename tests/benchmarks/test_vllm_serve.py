"""benchmarks/vllm_serve.py: it runs in vLLM's environment (nothing of layersearch imported), checks
every argument before vLLM, names held-out rows as layersearch splits a file, and its table and raw
JSON compare every configuration with plain vLLM; end to end with vLLM where one is installed."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.test_tools import BENCHMARKS, load

SCRIPT = BENCHMARKS / "vllm_serve.py"
CODE40 = BENCHMARKS.parent / "examples" / "code40.jsonl"
VLLM_PYTHON = os.environ.get("LAYERSEARCH_VLLM_PYTHON")


def serve(python: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([python, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def hf_folder(path: Path, layers: int = 2) -> Path:
    """An HF folder as the script reads one before vLLM does: config.json and a safetensors file."""
    import torch
    from safetensors.torch import save_file

    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": layers}))
    save_file({"model.embed_tokens.weight": torch.zeros(8, 4, dtype=torch.bfloat16)}, str(path / "model.safetensors"))
    return path


def export_folder(path: Path, model: Path, dtype: str = "float32", **speculative) -> Path:
    path.mkdir(parents=True)
    config = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3, **speculative}
    (path / "vllm.json").write_text(json.dumps({"model": str(model), "dtype": dtype, "speculative_config": config,
                                                "sampling": {"temperature": 0.0}, "max_tokens": 64}))
    return path


@pytest.fixture
def folders(tmp_path):
    """(the model, another model, an export of the model, an export of the other, a bfloat16 export)."""
    model, other = hf_folder(tmp_path / "model"), hf_folder(tmp_path / "other", layers=3)
    return (model, other, export_folder(tmp_path / "mine", model), export_folder(tmp_path / "theirs", other),
            export_folder(tmp_path / "bf16", model, "bfloat16"))


BAD = {
    "no --model": ((), "the following arguments are required: --model"),
    "--model missing": (("--model", "{tmp}/nowhere"), "no such folder"),
    "--model not a model": (("--model", "{tmp}"), "neither an HF model folder"),
    "--concurrency 0": (("--model", "{model}", "--concurrency", "1,0"), "0 is not a positive whole number"),
    "--concurrency x": (("--model", "{model}", "--concurrency", "1,x"), "give positive whole numbers"),
    "--concurrency twice": (("--model", "{model}", "--concurrency", "4,4"), "4 twice"),
    "--repeats 0": (("--model", "{model}", "--repeats", "0"), "--repeats 0"),
    "--max-new-tokens x": (("--model", "{model}", "--max-new-tokens", "x"), "invalid int value"),
    "--rows not a slice": (("--model", "{model}", "--rows", "3:a"), "give row numbers and slices"),
    "--rows a step": (("--model", "{model}", "--rows", "1:9:2"), "give row numbers and slices"),
    "--rows empty": (("--model", "{model}", "--rows", "5:5"), "names no row"),
    "--rows past the file": (("--model", "{model}", "--rows", "40"), "row 40 is not in the prompt file (40 rows"),
    "--rows twice": (("--model", "{model}", "--rows", "3,2:5"), "row 3 is named twice"),
    "--exports not an export": (("--model", "{model}", "--exports", "{other}"), "not a layersearch export-vllm folder"),
    "--exports missing": (("--model", "{model}", "--exports", "{tmp}/nowhere"), "no such folder"),
    "--exports of another model": (("--model", "{model}", "--exports", "{mine},{theirs}"), "is not --model's"),
    "--exports in another dtype": (("--model", "{model}", "--exports", "{bf16}"), "exported for bfloat16, the run is float32"),
    "--out exists": (("--model", "{model}", "--out", "{model}/config.json"), "exists; it is never overwritten"),
    "--out in a missing folder": (("--model", "{model}", "--out", "{tmp}/no/raw.json"), "no folder"),
    "--device tpu": (("--model", "{model}", "--device", "tpu"), "choose cpu or cuda"),
    "--dtype float8": (("--model", "{model}", "--dtype", "float8"), "choose one of float32"),
    "--schedule bogus": (("--model", "{model}", "--schedule", "bogus"), "choose one of auto"),
    "--prompts chat rows": (("--model", "{model}", "--prompts", "{tmp}/chat.jsonl"), "chat.jsonl:1: expected"),
}


@pytest.mark.parametrize("label", list(BAD))
def test_a_bad_argument_is_one_line_before_vllm_is_imported(label, folders, tmp_path):
    """Run by a python without vLLM (this one): every check comes before the import, so the line
    names the argument, not the missing vLLM; nothing is written."""
    model, other, mine, theirs, bf16 = folders
    (tmp_path / "chat.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    names = {"tmp": tmp_path, "model": model, "other": other, "mine": mine, "theirs": theirs, "bf16": bf16}
    argv, expected = BAD[label]
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    done = serve(sys.executable, *(a.format(**names) for a in argv))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("vllm_serve.py: error: "), done.stderr
    assert expected in lines[0] and "Traceback" not in done.stderr and done.stdout == ""
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_good_arguments_reach_the_vllm_check(folders):
    """An export folder as --model stands for its model; held-out rows and an export of the same
    model pass; a python without vLLM is then told to use vLLM's."""
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("this python has vLLM: the run would start engines")
    model, _, mine, _, _ = folders
    done = serve(sys.executable, "--model", str(mine), "--exports", str(mine), "--rows", "held-out")
    assert done.returncode == 2 and "has no vLLM: run the script with vLLM's python" in done.stderr


def test_the_script_imports_nothing_of_layersearch_and_vllm_only_in_an_engine_process():
    """vLLM's environment holds layersearch without its dependencies (another transformers): the
    script must run there on the standard library, and bad arguments must not need vLLM."""
    tree = ast.parse(SCRIPT.read_text())
    imported = {(alias.name if isinstance(node, ast.Import) else node.module or "", node.col_offset)
                for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names}
    assert not [name for name, _ in imported if name.split(".")[0] == "layersearch"]
    top = {name for name, column in imported if column == 0}
    assert not top & {"vllm", "torch", "transformers"}
    worker = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "worker")
    assert any(isinstance(n, ast.ImportFrom) and n.module == "vllm" for n in ast.walk(worker))


def test_held_out_rows_are_the_ones_layersearch_never_searches():
    """The script's copy of the split hash agrees with layersearch's on every row of code40, and
    the held-out rows its docstring lists are those."""
    from layersearch.data.splits import split_of
    from layersearch.data.user import read_rows

    script = load("vllm_serve")
    rows = read_rows(str(CODE40), distinct=False)
    texts = script.read_prompts(str(CODE40))
    assert [script.row_split(text) for text in texts] == [split_of(f"user/{row.id}") for row in rows]
    held_out = script.resolve_rows("held-out", "held-out", tuple(script.row_split(t) for t in texts))
    assert ", ".join(map(str, held_out[:-1])) + f" and {held_out[-1]}" in " ".join(script.__doc__.split())


def test_schedules_alternate_the_rounds_and_start_each_engine_as_they_say():
    steps = load("vllm_serve").steps
    alive = steps("alive", ["a", "b"], 2)
    assert [s for s in alive if s[0] == "round"] == [("round", "a", 0), ("round", "b", 0), ("round", "b", 1), ("round", "a", 1)]
    assert [s[0] for s in alive].count("start") == 2
    restart = steps("restart", ["a", "b"], 2)
    assert restart[:3] == [("start", "a", 0), ("round", "a", 0), ("stop", "a", 0)] and len(restart) == 12
    sequential = steps("sequential", ["a", "b"], 2)
    assert [s[1] for s in sequential if s[0] == "round"] == ["a", "a", "b", "b"]


class FakeEngine:
    """An engine answering rounds without vLLM: each row's tokens are its row number, repeated; the
    configuration named ``differs`` changes row 1's last token."""

    def __init__(self, config, job, logs, alive):
        self.config, self.job = config, job

    def ready(self):
        return {"startup_s": 1.0, "rss_bytes": 2**30, "mem_available_drop": 0, "gpu": None}

    def round(self, repeat):
        waves = []
        for c in self.job.concurrency:
            for start in range(0, len(self.job.rows), c):
                rows = list(range(start, min(start + c, len(self.job.rows))))
                tokens = [[row] * 4 for row in rows]
                if self.config.name == "differs" and 1 in rows:
                    tokens[rows.index(1)][-1] = 99
                drafting = self.config.speculative is not None
                waves.append({"concurrency": c, "rows": rows, "seconds": (0.5 if drafting else 1.0) / c, "tokens": tokens,
                              "request_tpot_s": [0.1] * len(rows),
                              "spec": {"drafts": 4 * drafting, "draft_tokens": 12 * drafting, "accepted": 6 * drafting,
                                       "per_position": [3, 2, 1] if drafting else []}})
        return waves

    def stop(self):
        pass


def test_the_table_and_raw_json_compare_every_configuration_with_plain(folders, tmp_path, monkeypatch, capsys):
    """Engines faked: speedups are ratios to plain at the same concurrency, acceptance and mean
    accepted length come from the counters, and a float32 row that differs from plain fails the run."""
    model, _, mine, _, _ = folders
    script = load("vllm_serve")
    monkeypatch.setattr(script, "Engine", FakeEngine)
    monkeypatch.setattr(script, "check_vllm", lambda: None)
    differs = export_folder(tmp_path / "differs", model)
    out = tmp_path / "raw.json"
    status = script.main(["--model", str(model), "--exports", f"{mine},{differs}", "--rows", "32:35",
                          "--concurrency", "1,2", "--repeats", "2", "--max-new-tokens", "4", "--schedule", "alive",
                          "--out", str(out)])
    printed, err = capsys.readouterr()
    assert status == 1 and "float32: differs at concurrency 1 gives other tokens than plain in 2 of 6 rows" in err
    assert "| mine | 2 | 24.0 [24.0-24.0] | 62.5 / 100.0 | 2.00x / 2.00x | 0.50 | 2.50 | 6/6 | 6/6 |" in printed
    assert "row 34 is in the file's train split" in printed
    report = json.loads(out.read_text())
    assert report["argv"][0] == "vllm_serve.py" and set(report["versions"]) >= {"vllm", "torch", "transformers"}
    assert report["settings"]["rows"] == [32, 33, 34] and report["settings"]["row_splits"] == ["validation", "test", "train"]
    assert [c["name"] for c in report["configs"]] == ["plain", "ngram k=4", "mine", "differs"]
    assert len(report["rounds"]) == 8 and report["rounds"][0]["waves"][0]["tokens"] == [[0, 0, 0, 0]]
    assert script.main(["--model", str(model), "--out", str(out)]) == 2  # never overwritten


@pytest.fixture(scope="module")
def vllm_python() -> str:
    if not VLLM_PYTHON:
        pytest.skip("LAYERSEARCH_VLLM_PYTHON names no python with vLLM (layersearch vllm-env DIR "
                    "makes one and prints it)")
    return VLLM_PYTHON


@pytest.mark.embedded
def test_vllm_serves_the_int8_self_draft_with_plains_tokens(vllm_python, tmp_path):
    """The embedded model in float32: vLLM plain, ngram and the exported int8 self-draft, two rows at
    concurrency 1 and 2. Every row is plain's, and the export's acceptance is reported (~3 min)."""
    from layersearch.decoder.spec import DecoderSpec, DrafterSpec, LookaheadSpec, ModelRef, ModelSpec
    from layersearch.integrations.vllm_export import export_vllm
    from layersearch.models.loading import embedded_model_dir

    spec = DecoderSpec(ModelSpec(ModelRef("smollm2-135m")), drafter=DrafterSpec(quant="int8"),
                       lookahead=LookaheadSpec("static", 3))
    export = export_vllm(spec, tmp_path / "int8-self")
    out = tmp_path / "raw.json"
    done = serve(vllm_python, "--model", str(embedded_model_dir()), "--exports", str(export.folder), "--rows", "32:34",
                 "--max-new-tokens", "16", "--concurrency", "1,2", "--repeats", "1", "--kv-cache-gib", "1",
                 "--schedule", "sequential", "--out", str(out), timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = {(s["config"], s["concurrency"]): s for s in report["summary"]}
    assert set(rows) == {(name, c) for name in ("plain", "ngram k=4", "int8-self") for c in (1, 2)}
    assert all(s["identical_to_plain"] == [2, 2] for s in rows.values()), report["summary"]
    for c in (1, 2):
        assert rows["int8-self", c]["spec"]["draft_tokens"] > 0 and 0 < rows["int8-self", c]["acceptance"] <= 1
        assert rows["int8-self", c]["mean_accepted_length"] >= 1
    assert all(0 < len(t) <= 16 for r in report["rounds"] for w in r["waves"] for t in w["tokens"])
    assert report["commit"] and report["versions"]["vllm"] and report["machine"]["cpu"]
    assert "| int8-self | 2 |" in done.stdout
