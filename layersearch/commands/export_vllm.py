"""``layersearch export-vllm SPEC DIR``: a decoder spec as a vLLM server runs it.

The work is :func:`layersearch.integrations.vllm_export.export_vllm`'s: it maps the spec onto
vLLM's ``speculative_config`` (prompt lookup -> ``ngram``, a draft model or the model's own plan
-> ``draft_model`` with a draft folder built from the weights) and writes ``DIR`` whole, with
the server command in ``DIR/README.md``. What vLLM cannot express is one error naming it.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Add ``export-vllm`` to the CLI's sub-parsers."""
    p = sub.add_parser("export-vllm", help="write DIR for vLLM to serve a spec: the model, the draft and "
                       "the --speculative-config (command in DIR/README.md)")
    p.add_argument("spec", metavar="SPEC", help="a decoder spec file (generate --save-spec, tune --out)")
    p.add_argument("folder", metavar="DIR", help="a new or empty folder to write the export into "
                   "(never written into when it holds anything)")
    p.set_defaults(command="export_vllm")


def run(args: Any) -> int:
    """Write the folder and say what it holds and how to serve it."""
    from layersearch.integrations.vllm_export import check_export_folder, export_vllm

    check_export_folder(args.folder, "DIR")  # /proc, a file, a used folder: one line, before the spec is read
    export = export_vllm(args.spec, args.folder, progress=print)
    print(export.describe())
    return 0
