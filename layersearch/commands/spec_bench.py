"""``layersearch bench --spec-bench FILE``: Spec-Bench answer files and its per-group table.

Methods: ``vanilla`` (transformers' plain greedy ``generate``) and ``ours`` with each mask
(``--skip-ratios`` uniform masks and ``--masks`` files). Each question is answered by every
method back to back (so drift on a shared machine hits them alike); each method's answers
go to ``DIR/<model>-<method>.jsonl`` in Spec-Bench's row format.
"""

from __future__ import annotations

import sys
from typing import Any


def run(args: Any, loaded: Any) -> int:
    """Answer the chosen questions with vanilla and each mask (:func:`layersearch.specbench.run_spec_bench`)."""
    from layersearch.specbench import SpecBenchRun, run_spec_bench

    run_ = SpecBenchRun(args.spec_bench, args.answers, args.out, args.categories, args.limit, args.split, args.skip_ratios,
                        args.masks, args.max_new_tokens, args.max_draft, args.draft_threshold, args.adaptive_threshold)
    paths = run_spec_bench(run_, loaded, _say, lambda text: print(text, flush=True))
    print(f"wrote {', '.join(str(p) for p in paths[:-1])} and {paths[-1]}")
    return 0


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
