"""``layersearch generate``'s options -> a DecoderSpec (layersearch/commands/generate_options.py)."""

from __future__ import annotations

import pytest

from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DrafterSpec, ModelRef


def test_generate_and_tune_read_the_suffix(capsys, tmp_path):
    from layersearch.cli import build_parser, main
    from layersearch.commands.generate_options import spec_from_options

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(f'{{"prompt": "row {i}"}}\n' for i in range(20)))
    args = build_parser().parse_args(["generate", "--prompt", "hi", "--draft-model", "smollm2-135m@int8"])
    assert spec_from_options(args, {}).drafter == DrafterSpec("layer-skip", ModelRef("smollm2-135m"), 0, "int8")
    for argv, message in (
        (["generate", "--prompt", "hi", "--draft-model", "smollm2-135m@int8", "--draft-quant", "int8", "--dtype", "float16"],
         "int8"),
        (["tune", "--prompts", str(prompts), "--budget", "5", "--out", str(tmp_path / "spec.json"), "--draft-model",
          "smollm2-135m@int8"], "tune searches the draft model's own and int8"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("layersearch: error:") and message in err[0], err



def test_generate_options_become_a_spec_and_a_spec_file_takes_no_decoder_option(tmp_path):
    from layersearch.cli import build_parser
    from layersearch.commands.generate_options import parse_mask_option, spec_from_options
    from layersearch.decoder.fragments import named_spec

    parse = build_parser().parse_args
    spec = spec_from_options(parse(["generate", "--prompt", "hi", "--mask", "uniform:0.3", "--lookahead", "static"]))
    assert (spec.mask_source.kind, spec.mask_source.skip_ratio, spec.lookahead.name) == ("uniform", 0.3, "static")
    assert parse_mask_option("swift:0.4") == ("swift", "0.4") and parse_mask_option("./knapsack") == ("mask", "./knapsack")
    path = tmp_path / "spec.json"
    spec.save(path)
    defaults = vars(parse(["generate", "--prompt", "-"]))
    assert spec_from_options(parse(["generate", "--prompt", "x", "--spec", str(path)]), defaults) == spec
    with pytest.raises(LayersearchError, match=r"--spec .* describes the decoder; it takes no --mask"):
        spec_from_options(parse(["generate", "--prompt", "x", "--spec", str(path), "--mask", "uniform:0.1"]), defaults)
    with pytest.raises(LayersearchError, match=r"^s.json: bad$"), named_spec("s.json"):
        raise LayersearchError("bad")
