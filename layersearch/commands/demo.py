"""``layersearch demo``: a short vanilla-vs-speculative run on a few prompts of the embedded model."""

from __future__ import annotations

import argparse
from typing import Any

from layersearch.commands import bench


def run(args: Any) -> int:
    """The benchmark with small settings: 2 domains x 2 prompts, no peers, one ratio."""
    quick = argparse.Namespace(
        model=args.model, device=args.device, dtype=args.dtype, threads=args.threads,
        domains="summarization,code", prompts_per_domain=2, max_new_tokens=args.max_new_tokens,
        skip_ratios="0.15", masks="", repeats=1, profile=None, out="demo.json", no_peers=True,
        max_draft=6, draft_threshold=0.5, adaptive_threshold=False,
    )
    return bench.run(quick)
