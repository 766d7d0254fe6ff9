"""The maintained scripts of benchmarks/ answer ``--help`` and run end to end on tiny inputs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from layersearch.masks.mask import SkipMask

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
#: the scripts this suite runs (pg_scale end to end in tests/study/postgres); the GPU scripts need CUDA
TOOLS = ("mask_patterns", "pg_scale", "hf_overhead", "step_time", "bf16_divergence", "kernel_cost", "vllm_serve")


def load(name: str):
    """Import benchmarks/NAME.py as a module (the GPU scripts import their shared module from there)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_script_is_a_tool_here_or_a_gpu_script():
    scripts = {p.stem for p in BENCHMARKS.glob("*.py")}
    assert scripts - {"gpu_report", "gpu_plans", "gpu_common", "tool_args"} == set(TOOLS)


@pytest.mark.parametrize("name", ["gpu_report", "gpu_plans"])
def test_the_gpu_scripts_answer_help_on_a_cpu(name, capsys):
    with pytest.raises(SystemExit) as done:
        load(name).main(["--help"])
    assert done.value.code == 0 and "usage:" in capsys.readouterr().out


def test_the_gpu_report_prints_its_table_from_a_stored_run(capsys):
    """docs/results.md's GPU table comes from this command over the stored H100 run."""
    stored = BENCHMARKS.parent / "docs" / "gpu" / "captured-h100.json"
    assert load("gpu_report").main(["--table", str(stored)]) == 0
    out = capsys.readouterr().out
    assert "cache_implementation='static'" in out  # the baseline is named
    assert "8b | plain loop, captured:" in out and "exact mask k=4" in out and "realized/predicted" in out


@pytest.mark.parametrize("name", TOOLS)
def test_help(name, capsys):
    with pytest.raises(SystemExit) as done:
        load(name).main(["--help"])
    assert done.value.code == 0 and "usage:" in capsys.readouterr().out


def test_mask_patterns_on_two_masks(tmp_path, capsys):
    SkipMask(4, (1, 2), (3,)).save(tmp_path / "a.json")
    SkipMask(4, (1,), (3,)).save(tmp_path / "b.json")
    load("mask_patterns").main([str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--published", str(tmp_path / "none")])
    out = capsys.readouterr().out
    assert "3 of 8" in out and "a ~ b: 0.67" in out  # {A1, A2, M3} and {A1, M3}: 2 shared of 3


def test_hf_overhead_on_a_tiny_model(tiny_word_models, tmp_path, capsys):
    """Both sides decode the same tokens (checked per pair); the table and the raw JSON come out."""
    import json

    out = tmp_path / "overhead.json"
    assert load("hf_overhead").main(["--model", str(tiny_word_models[0]), "--max-new-tokens", "4", "--rounds", "2",
                                     "--prompts", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| Decoder.generate |" in printed and "overhead of generate(custom_generate=...)" in printed
    report = json.loads(out.read_text())
    assert len(report["seconds"]["Decoder.generate"]) == 2 and report["argv"][1:3] == ["--model", str(tiny_word_models[0])]
    assert set(report["versions"]) >= {"torch", "transformers", "layersearch"}
    for bad in (["--rounds", "0"], ["--prompts", "9"], ["--out", str(out)]):
        assert load("hf_overhead").main(bad) == 2


@pytest.mark.parametrize("part", [1, 2])
def test_the_gpu_reports_int4_parts_run_end_to_end_on_a_cpu_with_a_tiny_shape(part, tmp_path, capsys):
    """Both prepared GPU runs on the tiny shape, captured with dynamo's eager backend: the table
    names its baseline, and the int4 rows say why they are skipped where int4 is absent."""
    import json

    report = load("gpu_report")
    out = tmp_path / "int4.json"
    assert report.main(["--device", "cpu", "--shapes", "tiny", "--sections", "int4", "--part", str(part), "--backend", "eager",
                        "--repeats", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    stored = json.loads(out.read_text())
    assert stored["argv"][-1] == str(out) and stored["commit"] and stored["transformers"]  # auditable
    assert "cache_implementation='static'" in printed
    missing = report.int4_missing()
    if missing:
        assert f"int4 rows skipped: {missing}" in printed
    if part == 1:
        row = stored["int4_shapes"][0]
        assert len(row["seconds"]["hf_static"]["raw"]) == 2 and "HF static per call" in printed
        assert row["parts"]["verify_ratio"]["1"] == 1.0  # each ratio divides by verify(1) of the same sweep
        assert "plain loop, captured:" in printed
        assert report.main(["--table", str(out)]) == 0 and "plain loop, captured:" in capsys.readouterr().out
    elif not missing:
        assert "exact-int4" in printed and report.CEILING in printed


@pytest.mark.parametrize("given, runs", [((), 200), (("--sampling-runs", "7"), 7)])
def test_the_tiny_shape_takes_the_sampling_runs_given(given, runs, monkeypatch, capsys):
    """``--shapes tiny`` is a smoke test with fewer sampling runs by default, never in place of the user's."""
    report = load("gpu_report")
    asked = []
    monkeypatch.setattr(report, "captured_greedy_section", lambda *args: {})
    monkeypatch.setattr(report, "captured_sampling_section",
                        lambda device, n: asked.append(n) or {"runs": n, "p_target": 0.5, "p_draft_law": 0.0})
    assert report.main(["--device", "cpu", "--shapes", "tiny", "--checks", "only", "--backend", "eager", *given]) == 0
    assert asked == [runs] and f"{runs} runs" in capsys.readouterr().out


def test_int4_grid_rounds_onto_sixteen_levels_per_group_and_is_a_fixed_point():
    """The exact-int4 model's weights: at most 16 values per group, and rounding them again changes nothing."""
    import torch

    grid = load("gpu_report").int4_grid
    weight = torch.randn(8, 256, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    rounded = grid(weight, 128)
    assert rounded.dtype == torch.bfloat16 and rounded.shape == weight.shape
    assert all(len(set(group.tolist())) <= 16 for group in rounded.float().view(8, 2, 128).reshape(16, 128))
    assert (rounded.float() - weight.float()).abs().max() <= (weight.float().abs().max() * 2 / 15)
    assert torch.equal(grid(rounded, 128), rounded)


@pytest.mark.slow
def test_step_time_compares_a_tree_with_itself(tmp_path, capsys):
    """Two runs of this checkout, interleaved: each one's loop is this tree's, their tokens agree."""
    tree = str(BENCHMARKS.parent)
    out = tmp_path / "step_time.json"
    assert load("step_time").main(["--tree", tree, "--tree", tree, "--rounds", "2", "--repeats", "1",
                                   "--new-tokens", "8", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [len(run["ms_per_step"]) for run in report["trees"]] == [2, 2] and len(report["pair_ratios"]) == 2
    assert report["argv"][0] == "step_time.py" and all(run["commit"] for run in report["trees"])
    assert "second / first" in capsys.readouterr().out


def test_kernel_cost_times_both_kernel_sets_on_a_tiny_model(tmp_path, capsys):
    out = tmp_path / "kernel_cost.json"
    assert load("kernel_cost").main(["--tiny", "llama", "--context", "20", "--verify", "4", "--repeats", "2",
                                     "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| 1 token |" in printed and "| verify 4 |" in printed and "tiny-llama, bfloat16" in printed
    report = json.loads(out.read_text())
    assert [len(report["seconds"][name]["4"]) for name in ("stock", "numba")] == [2, 2] and report["commit"]
    for bad in (["--verify", "1"], ["--tiny", "gpt"], ["--dtype", "float8"], ["--out", str(out)]):
        assert load("kernel_cost").main(bad) == 2
