"""``layersearch export-hf SPEC DIR``: the ``custom_generate/`` folder that runs a spec in transformers.

The work is :func:`layersearch.integrations.export.export_hf`'s: it writes
``DIR/custom_generate/generate.py`` (the spec embedded; the code imported from layersearch),
``requirements.txt`` and ``layersearch_spec.json``, refusing any that exists. Then
``model.generate(..., custom_generate="DIR", trust_remote_code=True)`` runs the spec.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Add ``export-hf`` to the CLI's sub-parsers."""
    p = sub.add_parser("export-hf", help="write DIR/custom_generate/ so transformers' generate runs a spec "
                       "(custom_generate=DIR, trust_remote_code=True)")
    p.add_argument("spec", metavar="SPEC", help="a decoder spec file (generate --save-spec, tune --out)")
    p.add_argument("folder", metavar="DIR", help="the folder to write custom_generate/ into (a model folder, "
                   "or a new one); existing files are never overwritten")
    p.set_defaults(command="export_hf")


def run(args: Any) -> int:
    """Write the folder and say what it wrote and how to use it."""
    from layersearch.common.outputs import check_output_folder
    from layersearch.integrations.export import export_hf

    check_output_folder(args.folder, "DIR")  # /proc, a path under a file: one line, before the spec is read
    paths = export_hf(args.spec, args.folder)
    for path in paths:
        print(f"wrote {path}")
    print(f'use: model.generate(**inputs, custom_generate="{args.folder}", trust_remote_code=True)')
    return 0
