"""``layersearch export-hf``: the folder runs through ``custom_generate=DIR, trust_remote_code=True``
with plain greedy's output, holds the spec and no code of ours, and never overwrites a file."""

from __future__ import annotations

import json

import pytest
import torch

import layersearch
from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DecoderSpec, LookaheadSpec, MaskSourceSpec, ModelRef, ModelSpec
from layersearch.integrations.export import FILES, export_hf

PROMPT = [[5, 9, 17, 33, 8, 64, 3, 5, 9, 17]]
SPEC = DecoderSpec(ModelSpec(ModelRef("tiny")), mask_source=MaskSourceSpec("uniform", skip_ratio=0.5),
                   lookahead=LookaheadSpec("static", 3))


def test_the_folder_runs_the_spec_with_plain_greedy_output(tiny_llama, tmp_path):
    paths = export_hf(SPEC, tmp_path / "repo")
    assert [p.name for p in paths] == list(FILES) and all(p.parent == tmp_path / "repo" / "custom_generate" for p in paths)
    code = paths[0].read_text()
    assert "from layersearch.integrations.hf_generate import folder_decoding" in code and "class " not in code
    assert DecoderSpec.from_dict(json.loads(paths[2].read_text())) == SPEC
    assert paths[1].read_text().startswith("layersearch")
    ids = torch.tensor(PROMPT)
    plain = tiny_llama.generate(ids, max_new_tokens=12, do_sample=False)
    out = tiny_llama.generate(ids, max_new_tokens=12, do_sample=False, custom_generate=str(tmp_path / "repo"),
                              trust_remote_code=True)
    assert out.tolist() == plain.tolist()
    with pytest.raises(LayersearchError, match="num_beams=2"):  # its refusals are the callable's
        tiny_llama.generate(ids, max_new_tokens=4, num_beams=2, custom_generate=str(tmp_path / "repo"), trust_remote_code=True)


def test_nothing_is_overwritten(tmp_path):
    folder = tmp_path / "model"
    (folder / "custom_generate").mkdir(parents=True)
    mine = folder / "custom_generate" / "requirements.txt"
    mine.write_text("mine\n")
    with pytest.raises(LayersearchError, match="requirements.txt exists: the export never overwrites"):
        export_hf(SPEC, folder)
    assert mine.read_text() == "mine\n" and sorted(p.name for p in (folder / "custom_generate").iterdir()) == ["requirements.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(LayersearchError, match="is a file"):
        export_hf(SPEC, tmp_path / "file")


def test_a_spec_naming_other_files_is_refused(tmp_path):
    from dataclasses import replace

    with pytest.raises(LayersearchError, match="profile names the file p.json, which an exported folder cannot carry"):
        export_hf(replace(SPEC, profile="p.json"), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(LayersearchError, match="export_hf takes a DecoderSpec or a spec file"):
        export_hf(3, tmp_path / "out")


def test_the_command_writes_the_folder_and_refuses_in_one_line(tiny_llama, tmp_path, capsys):
    from layersearch.cli import main

    spec = SPEC.save(tmp_path / "spec.json")
    assert main(["export-hf", str(spec), str(tmp_path / "repo")]) == 0
    out = capsys.readouterr().out
    assert "wrote" in out and 'custom_generate="' in out and (tmp_path / "repo" / "custom_generate" / "generate.py").exists()
    assert main(["export-hf", str(spec), str(tmp_path / "repo")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("layersearch: error:") and "exists" in err and err.count("\n") == 1
    (tmp_path / "bad.json").write_text("{}")
    assert main(["export-hf", str(tmp_path / "bad.json"), str(tmp_path / "other")]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and not (tmp_path / "other").exists()
    layersearch.decoding(spec)  # the spec file the command read stays a valid spec


def test_the_folder_honours_stop_strings_with_generates_tokenizer(tiny_with_embedded_tokenizer, tmp_path):
    """The folder gets generate's own arguments, the tokenizer included: stop strings need nothing more."""
    model, tokenizer, _ = tiny_with_embedded_tokenizer(seed=4)
    export_hf(SPEC, tmp_path / "repo")
    ids = tokenizer("The quick brown fox jumps over the lazy dog. The quick", return_tensors="pt").input_ids
    free = model.generate(ids, max_new_tokens=14)[0, ids.shape[1]:].tolist()
    stop = next(text for text in (tokenizer.decode([t]).strip() for t in free[5:]) if text)
    plain = model.generate(ids, max_new_tokens=14, stop_strings=[stop], tokenizer=tokenizer)
    ours = model.generate(ids, max_new_tokens=14, stop_strings=[stop], tokenizer=tokenizer,
                          custom_generate=str(tmp_path / "repo"), trust_remote_code=True)
    assert ours.tolist() == plain.tolist() and plain.shape[1] < ids.shape[1] + 14
