"""The benchmark's machinery on a tiny model: side-by-side runs, identical outputs, target columns."""

from __future__ import annotations

import statistics

import pytest
import torch

from layersearch.evaluation.bench import LOOP, PLAIN, configs, format_table, run_domain, summarize
from layersearch.masks.mask import ModelInfo, SkipMask
from layersearch.profiling.profile import LatencyProfile
from layersearch.runtime.draft_policy import DraftPolicy


def test_bench_rows_cover_plain_peers_and_masks(tiny_llama):
    info = ModelInfo("tiny", 4, 64, "x")
    profile = LatencyProfile(info, "cpu", "float32", torch.__version__, 1e-6, 1e-3, 1e-3, 2e-3, (1.0, 1.5, 1.8))
    masks = [SkipMask.none(4), SkipMask.uniform(4, 0.5).with_provenance(label="uniform 0.5")]
    cfgs = configs(tiny_llama, masks, DraftPolicy(4, 0.0), peers=True)
    prompts = [torch.tensor([[5, 9, 11, 3]]), torch.tensor([[7, 1, 2]])]
    measured = run_domain(cfgs, prompts, 12, 2, lambda message: None)
    rows = {c.name: summarize(c.name, measured[c.name], profile, 10, c.mask, measured[LOOP]) for c in cfgs}
    assert rows[PLAIN]["speedup"] == 1.0
    ours = rows["ours: uniform 0.5"]
    assert ours["identical_to_plain"] is True and rows["ours: nothing skipped"]["identical_to_plain"] is True
    assert ours["speedup"] > 0 and ours["predicted_speedup"] > 0 and 0 <= ours["overhead_share"] < 1
    loop_totals, our_totals = measured[LOOP].totals, measured["ours: uniform 0.5"].totals
    assert ours["speedup_vs_loop"] == statistics.median(a / b for a, b in zip(loop_totals, our_totals))
    decode = statistics.median((a - sa.prefill_seconds) / (b - sb.prefill_seconds) for a, sa, b, sb in
                               zip(loop_totals, measured[LOOP].stats, our_totals, measured["ours: uniform 0.5"].stats))
    assert ours["decode_speedup_vs_loop"] == pytest.approx(decode)
    assert ours["realized_over_predicted"] == ours["decode_speedup_vs_loop"] / ours["predicted_speedup"]
    assert ours["draft_forward_ms"]["measured"] > 0 and ours["verify_ms"]["predicted"] > 0
    assert len(measured[PLAIN].totals) == 2  # every repeat measured every configuration
    table = format_table("tiny", list(rows.values()))
    assert "ours: uniform 0.5" in table and PLAIN in table


def test_bench_rows_for_our_other_drafters_are_identical_to_plain(tiny_llama):
    info = ModelInfo("tiny", 4, 64, "x")
    profile = LatencyProfile(info, "cpu", "float32", torch.__version__, 1e-6, 1e-3, 1e-3, 2e-3, (1.0, 1.5, 1.8))
    masks = [SkipMask.none(4), SkipMask.uniform(4, 0.5).with_provenance(label="uniform 0.5")]
    cfgs = configs(tiny_llama, masks, DraftPolicy(4, 0.0), peers=("prompt-lookup",), drafters=("prompt-lookup", "hybrid"))
    names = [c.name for c in cfgs]
    assert names == [PLAIN, "hf prompt-lookup (10)", "ours: nothing skipped", "ours: uniform 0.5",
                     "ours: prompt-lookup (<=4)", "ours: hybrid (uniform 0.5)"]
    prompts = [torch.tensor([[5, 9, 11, 5, 9, 11, 5]]), torch.tensor([[7, 1, 2, 7, 1]])]
    measured = run_domain(cfgs, prompts, 12, 1, lambda message: None)
    rows = {c.name: summarize(c.name, measured[c.name], profile, 10, c.mask) for c in cfgs}
    for name in names[1:]:
        assert rows[name]["identical_to_plain"] is True, name


def test_order_rotates_so_no_configuration_is_always_first(tiny_llama):
    from layersearch.evaluation.bench import Configuration
    from layersearch.runtime.baseline import hf_generate

    calls: list[str] = []

    def recording(name):
        def generate(ids, n):
            calls.append(name)
            return hf_generate(tiny_llama, ids, n)

        return generate

    cfgs = [Configuration(name, recording(name)) for name in (PLAIN, "b", "c")]
    measured = run_domain(cfgs, [torch.tensor([[5, 9, 11]])], 3, 3, lambda message: None)
    assert [calls[i] for i in (0, 3, 6)] == [PLAIN, "b", "c"]  # each one opens a round
    assert all(len(measured[c.name].speedups) == 3 for c in cfgs)
    assert measured[PLAIN].speedups == [1.0, 1.0, 1.0]  # ratios are taken within each round
    assert all(measured[c.name].identical for c in cfgs)


def test_each_prompt_runs_under_every_configuration_back_to_back(tiny_llama):
    from layersearch.evaluation.bench import Configuration
    from layersearch.runtime.baseline import hf_generate

    calls: list[tuple[str, int]] = []

    def recording(name):
        def generate(ids, n):
            calls.append((name, ids.shape[1]))
            return hf_generate(tiny_llama, ids, n)

        return generate

    cfgs = [Configuration(name, recording(name)) for name in (PLAIN, "b", "c")]
    prompts = [torch.tensor([[5, 9, 11]]), torch.tensor([[7, 1, 2, 4]])]
    run_domain(cfgs, prompts, 3, 2, lambda message: None)
    # repeat 0: prompt 1 under every config, then prompt 2; the first config rotates per prompt and repeat
    assert calls[:6] == [(PLAIN, 3), ("b", 3), ("c", 3), ("b", 4), ("c", 4), (PLAIN, 4)]
    assert [name for name, _ in calls[6:9]] == ["b", "c", PLAIN]


def test_generate_times_its_prefill_apart_so_decode_phases_compare(tiny_llama):
    from layersearch.runtime.baseline import hf_generate

    stats = hf_generate(tiny_llama, torch.tensor([[5, 9, 11, 3]]), 12).stats
    assert 0 < stats.prefill_seconds < stats.total_seconds
    assert stats.prefill_seconds + stats.verify_seconds == pytest.approx(stats.total_seconds)
    masks = [SkipMask.none(4)]
    cfgs = configs(tiny_llama, masks, DraftPolicy(4, 0.0), peers=False)
    measured = run_domain(cfgs, [torch.tensor([[5, 9, 11, 3]])], 12, 3, lambda message: None)
    plain, loop = measured[PLAIN], measured[LOOP]
    row = summarize(LOOP, loop, None, 10, masks[0], loop, plain)
    expected = statistics.median((a - sa.prefill_seconds) / (b - sb.prefill_seconds)
                                 for a, sa, b, sb in zip(plain.totals, plain.stats, loop.totals, loop.stats))
    assert row["decode_speedup"] == pytest.approx(expected)
    assert summarize(PLAIN, plain, None, 10, None, loop, plain)["decode_speedup"] == 1.0


def test_bench_rows_with_a_draft_model_are_identical_to_plain(tiny_llama):
    from layersearch.models.tiny import build_tiny_model

    small = build_tiny_model("llama", num_layers=1, hidden_size=32, vocab_size=128, seed=5)
    small.generation_config.eos_token_id = None
    small.generation_config.pad_token_id = 0
    masks = [SkipMask.none(4), SkipMask.uniform(4, 0.5).with_provenance(label="uniform 0.5")]
    cfgs = configs(
        tiny_llama, masks, DraftPolicy(4, 0.0), peers=("assisted:dir/small",), drafters=("model:dir/small", "hybrid:dir/small"),
        draft_models={"dir/small": small}, lookaheads=("confidence", "heuristic"),
    )
    names = [c.name for c in cfgs]
    assert names == [PLAIN, "hf assisted (small)", "ours: nothing skipped", "ours: uniform 0.5 [confidence]",
                     "ours: uniform 0.5 [heuristic]", "ours: model (small) [confidence]", "ours: model (small) [heuristic]",
                     "ours: hybrid (small) [confidence]"]
    prompts = [torch.tensor([[5, 9, 11, 5, 9, 11, 5]]), torch.tensor([[7, 1, 2, 7, 1]])]
    measured = run_domain(cfgs, prompts, 12, 1, lambda message: None)
    rows = {c.name: summarize(c.name, measured[c.name], None, 10, c.mask) for c in cfgs}
    for name in names[1:]:
        assert "error" not in rows[name], rows[name]
        assert rows[name]["identical_to_plain"] is True, name
    drafted = {name: combine_drafted(measured[name]) for name in names[2:]}
    assert drafted["ours: model (small) [heuristic]"] > 0 and drafted["ours: hybrid (small) [confidence]"] > 0


def combine_drafted(measurement) -> int:
    return sum(stats.drafted for stats in measurement.stats)


def test_bench_rows_with_a_reduced_draft_head_are_identical_to_plain(tiny_llama):
    from layersearch.models.tiny import build_tiny_model
    from layersearch.frspec.head import VocabSubset

    small = build_tiny_model("llama", num_layers=1, hidden_size=32, vocab_size=128, seed=5)
    vocab = VocabSubset(tuple(range(0, 128, 2)), "tiny", 64)
    masks = [SkipMask.none(4), SkipMask.uniform(4, 0.5).with_provenance(label="uniform 0.5")]
    cfgs = configs(tiny_llama, masks, DraftPolicy(4, 0.0), peers=(), drafters=("model:small",),
                   draft_models={"small": small}, vocab=vocab)
    names = [c.name for c in cfgs]
    assert names == [PLAIN, "ours: nothing skipped", "ours: uniform 0.5", "ours: uniform 0.5 vocab 64",
                     "ours: model (small)", "ours: model (small) vocab 64"]
    measured = run_domain(cfgs, [torch.tensor([[5, 9, 11, 3]])], 12, 1, lambda message: None)
    for name in names[1:]:
        assert measured[name].identical, name


def test_bench_rows_run_captured_when_asked(tiny_llama):
    """``compile``: every row of ours builds a captured decoder; on a CPU the baseline stays plain generate."""
    from layersearch.evaluation.bench import baseline_name
    from layersearch.runtime.loop import SpeculativeDecoder

    rows = configs(tiny_llama, [SkipMask.none(4), SkipMask.uniform(4, 0.5)], DraftPolicy(), peers=False,
                   drafters=("prompt-lookup", "hybrid"), compile=True)
    ours = [row.generate.__self__ for row in rows if isinstance(getattr(row.generate, "__self__", None), SpeculativeDecoder)]
    assert len(ours) == 4 and all(decoder.compile for decoder in ours)
    assert baseline_name(rows) == PLAIN


# ----- GPU rows, built and checked on the CPU -------------------------------------------------------
def test_assisted_static_peer_is_transformers_assisted_generation_over_a_static_cache(tiny_llama):
    """The CUDA peer row (added there beside the static-cache baseline): built and run here."""
    from layersearch.evaluation.bench import _peer_configs, assisted_static_row
    from layersearch.runtime.baseline import hf_generate

    assert [c.name for c in _peer_configs(tiny_llama, ["assisted:d"], {"d": tiny_llama})] == ["hf assisted (d)"]
    rows = _peer_configs(tiny_llama, ["assisted:d"], {"d": tiny_llama}, static=True)
    assert [c.name for c in rows] == ["hf assisted (d)", "hf assisted static (d)"]
    prompt = torch.tensor([[5, 9, 11, 3]])
    row = assisted_static_row(tiny_llama, "d", tiny_llama)
    assert list(row.generate(prompt, 6).token_ids) == list(hf_generate(tiny_llama, prompt, 6).token_ids)


def test_every_configuration_is_warmed_on_the_longest_prompt_and_static_rows_on_every_prompt():
    from layersearch.evaluation.bench import STATIC, warm_ups
    from layersearch.evaluation.measure import Configuration

    rows = [Configuration(PLAIN, None), Configuration(STATIC, None), Configuration("hf assisted static (d)", None),
            Configuration(LOOP, None)]
    short, long_, middle = torch.zeros(1, 3), torch.zeros(1, 9), torch.zeros(1, 5)
    assert warm_ups(rows[:1] + rows[3:], [short, long_], compiled=False) == []  # nothing compiles: no warm-up
    runs = warm_ups(rows, [short, long_, middle], compiled=False)
    assert [(c.name, ids.shape[1]) for c, ids in runs[:4]] == [(c.name, 9) for c in rows]
    assert sorted((c.name, ids.shape[1]) for c, ids in runs[4:]) == sorted(
        (name, n) for name in (STATIC, "hf assisted static (d)") for n in (3, 5))


def test_rows_keep_raw_timings_and_name_the_device_a_given_profile_predicts_for(tiny_llama):
    from dataclasses import replace

    info = ModelInfo("tiny", 4, 64, "x")
    profile = replace(LatencyProfile(info, "cpu", "float32", torch.__version__, 1e-6, 1e-3, 1e-3, 2e-3, (1.0, 1.5, 1.8)),
                      device="cuda: NVIDIA H100 80GB HBM3", compile_mode="captured:inductor")
    masks = [SkipMask.none(4), SkipMask.uniform(4, 0.5).with_provenance(label="uniform 0.5")]
    cfgs = configs(tiny_llama, masks, DraftPolicy(4, 0.0), peers=())
    measured = run_domain(cfgs, [torch.tensor([[5, 9, 11, 3]])], 8, 3, lambda message: None)
    row = summarize("ours: uniform 0.5", measured["ours: uniform 0.5"], profile, 10, masks[1], measured[LOOP])
    assert row["predicted_on"] == "cuda: NVIDIA H100 80GB HBM3"
    assert len(row["seconds_per_repeat"]) == 3 and row["speedup_min"] <= row["speedup"] <= row["speedup_max"]
    assert "on cuda: NVIDIA H100 80GB HBM3" in format_table("tiny", [row])
