"""DecodeStats: compiling is its own figure, out of tokens/s, "other" and the speedups."""

from __future__ import annotations

import pytest

from layersearch.evaluation.measure import stats_speedup
from layersearch.runtime.stats import DecodeStats, combine


def _stats(compile_seconds: float) -> DecodeStats:
    return DecodeStats(new_tokens=12, target_forwards=5, drafted=8, accepted=6, prefill_seconds=1.0, draft_seconds=1.0,
                       verify_seconds=2.0, total_seconds=6.0 + compile_seconds, compile_seconds=compile_seconds)


def test_compile_seconds_stay_out_of_the_decode_figures():
    compiled, warm = _stats(4.0), _stats(0.0)
    assert compiled.run_seconds == warm.run_seconds == 6.0
    assert compiled.tokens_per_second == warm.tokens_per_second == 2.0
    assert compiled.other_seconds == warm.other_seconds == 2.0  # 6 - prefill 1 - draft 1 - verify 2
    assert compiled.decode_seconds == warm.decode_seconds == 5.0
    assert stats_speedup(warm, compiled) == 1.0
    assert compiled.to_dict()["compile_seconds"] == 4.0  # reported apart
    assert combine([compiled, warm]).tokens_per_second == pytest.approx(24 / 12)
