"""No output of a command onto its inputs (layersearch/commands/outputs.py)."""

from __future__ import annotations

import pytest

from layersearch.common.errors import LayersearchError


def test_check_overwrites_takes_options_by_name_and_the_derived_outputs(tmp_path):
    from layersearch.commands.outputs import check_overwrites

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("{}\n")
    check_overwrites({"prompts": str(prompts), "out": str(tmp_path / "new.json")})
    with pytest.raises(LayersearchError, match="--out"):
        check_overwrites({"prompts": str(prompts), "out": str(prompts)})
    with pytest.raises(LayersearchError, match="--report"):
        check_overwrites({"mask": f"code={prompts}"}, {"--report": str(prompts)})  # a path inside NAME=FILE
