"""``knapspec bench`` end to end on a tiny model saved with the embedded model's tokenizer."""

from __future__ import annotations

import argparse
import json

import pytest

from layersearch.commands import knapspec
from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.profiling.profile import LatencyProfile


def test_parser_defaults():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    knapspec.add_parser(sub, argparse.ArgumentParser)
    args = parser.parse_args(["knapspec", "bench"])
    assert args.command == "knapspec" and args.action == "bench" and args.contexts == "256,1024,2048,4096"
    assert args.max_new_tokens == 32 and args.profile is None and args.interval == 64
    assert args.space == "skips"  # the paper's; plans on request
    assert parser.parse_args(["knapspec", "bench", "--space", "plans"]).space == "plans"


@pytest.mark.parametrize("mask", [
    SkipMask(30, (3, 4, 5, 9), (0, 1, 28)),
    SkipMask(30, (), ()),
    SkipMask(30, (2,), ()).with_int8((0, 1, 3, 4, 5), tuple(range(28)), True),
    SkipMask.none(30).kept_in_int8(head=False),
])
def test_masks_and_plans_come_back_from_their_short_strings(mask):
    from layersearch.experiments.knapspec import _mask_from_string

    assert _mask_from_string(mask.short_string(), 30) == mask


def bench_args(folder, path, out, *extra):
    parser = argparse.ArgumentParser()
    knapspec.add_parser(parser.add_subparsers(dest="command"), argparse.ArgumentParser)
    return parser.parse_args(["knapspec", "bench", "--model", str(folder), "--contexts", "24,48", "--max-new-tokens", "6",
                              "--profile", str(path), "--out", str(out), "--interval", "2", "--max-draft", "4", *extra])


@pytest.mark.embedded
def test_bench_selects_plans(tmp_path, capsys, tiny_with_embedded_tokenizer):
    from layersearch.common.errors import LayersearchError
    from layersearch.models.loading import describe_model

    model, _, folder = tiny_with_embedded_tokenizer(seed=1)
    info: ModelInfo = describe_model(model, str(folder))
    ratios = (1.0, 1.05, 1.1, 1.15, 1.2)
    profile = LatencyProfile(info, "cpu", "float32", "x", 5e-5, 0.0, 1e-3, 2e-4, ratios, int8_attention_slope=1.5e-5,
                             int8_attention_intercept=0.0, int8_mlp_seconds=3e-4, int8_head_saving=1e-4)
    out = tmp_path / "bench.json"
    assert knapspec.run(bench_args(folder, profile.save(tmp_path / "p.json"), out, "--space", "plans")) == 0
    report = json.loads(out.read_text())
    assert report["settings"]["space"] == "plans"
    first = report["contexts"][0]
    assert {r["run"] for r in first["runs"]} >= {"plain", "knapsack", "knapsack-draft", "fixed-short"}
    assert "bound-draft" not in {r["run"] for r in first["runs"]} and "bound" not in first["analysis"]
    assert first["reselection_cost"]["method"] == "plans" and first["reselection_cost"]["other_method"] == "hidden"
    assert "int8" in first["analysis"]["decoupled"]["mask"]  # int8 is cheaper here: the pick runs some of it
    assert "knapsack solver" in capsys.readouterr().out
    # A profile without int8 timings: one line saying what to do, before any measurement.
    skip_only = LatencyProfile(info, "cpu", "float32", "x", 5e-5, 0.0, 1e-3, 2e-4, ratios).save(tmp_path / "s.json")
    with pytest.raises(LayersearchError, match="re-run .layersearch profile.") as excinfo:
        knapspec.run(bench_args(folder, skip_only, tmp_path / "b2.json", "--space", "plans"))
    assert "\n" not in str(excinfo.value) and not (tmp_path / "b2.json").exists()


@pytest.mark.embedded
def test_bench_runs_on_a_tiny_model(tmp_path, capsys, tiny_with_embedded_tokenizer):
    from layersearch.models.loading import describe_model

    model, _, folder = tiny_with_embedded_tokenizer(seed=1)
    info: ModelInfo = describe_model(model, str(folder))
    profile = LatencyProfile(info, "cpu", "float32", "x", 5e-5, 0.0, 1e-3, 2e-4, (1.0, 1.05, 1.1, 1.15, 1.2))
    path = profile.save(tmp_path / "profile.json")
    parser = argparse.ArgumentParser()
    knapspec.add_parser(parser.add_subparsers(dest="command"), argparse.ArgumentParser)
    out = tmp_path / "bench.json"
    args = parser.parse_args(["knapspec", "bench", "--model", str(folder), "--contexts", "24,48", "--max-new-tokens", "6",
                              "--profile", str(path), "--out", str(out), "--interval", "2", "--max-draft", "4",
                              "--check-candidates", "3"])
    assert knapspec.run(args) == 0
    report = json.loads(out.read_text())
    assert [c["context"] for c in report["contexts"]] == [24, 48]
    runs = {r["run"] for r in report["contexts"][0]["runs"]}
    assert {"plain", "knapsack", "knapsack-draft", "bound-draft"} <= runs
    assert report["solver"]["speedup"] > 1 and len(report["summary"]) == 2
    check = report["contexts"][0]["analysis"]["candidate_check"]
    contenders = sorted(report["contexts"][0]["analysis"]["contenders"], key=lambda r: -r["tpt"])
    assert [r["mask"] for r in check["rows"]] == [r["mask"] for r in contenders[:3]]  # the top 3 by prediction
    assert all(r["measured_tokens_per_second"] > 0 for r in check["rows"])
    fastest = max(r["measured_tokens_per_second"] for r in check["rows"])
    assert check["predicted_best_over_fastest"] == check["rows"][0]["measured_tokens_per_second"] / fastest
    output = capsys.readouterr().out
    assert "knapsack solver" in output and "predicted best is the fastest" in output
