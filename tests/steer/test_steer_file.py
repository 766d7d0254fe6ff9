"""The steering file: safetensors + metadata, round trip and one-line refusals."""

from __future__ import annotations

import json

import pytest
import torch

from layersearch.errors import LayersearchError
from layersearch.mask import ModelInfo, SkipMask
from layersearch.steer import SteeringFile, SteeringParams

VERIFIER = ModelInfo("verifier", 4, 64, "aaaa")
DRAFTER = ModelInfo("drafter", 2, 48, "bbbb")


def trained(drafter=None, width=64) -> SteeringParams:
    params = SteeringParams((0, 2, 3), 64, width, 96)
    with torch.no_grad():
        params.s.weight.normal_()
        params.hml.weight.add_(0.1)
    return params


def test_round_trip_self_and_independent(tmp_path):
    mask = SkipMask.uniform(4, 0.5)
    for file in (
        SteeringFile(trained(), VERIFIER, None, mask, {"steps": 3}),
        SteeringFile(trained(width=48), VERIFIER, DRAFTER, None, {"steps": 1}),
    ):
        path = tmp_path / "s.safetensors"
        file.save(path)
        back = SteeringFile.load(path, VERIFIER, file.drafter)
        assert back == file and dict(back.training) == dict(file.training)
        assert back.params.layers == (0, 2, 3)
        for name, tensor in file.params.state_dict().items():
            torch.testing.assert_close(back.params.state_dict()[name], tensor)


def test_wrong_models_are_refused(tmp_path):
    path = tmp_path / "s.safetensors"
    SteeringFile(trained(), VERIFIER, None, SkipMask.uniform(4, 0.5)).save(path)
    other = ModelInfo("other", 4, 64, "cccc")
    with pytest.raises(LayersearchError, match=r"s\.safetensors: steering was trained for verifier 'verifier'"):
        SteeringFile.load(path, other)
    with pytest.raises(LayersearchError, match="trained for the layer-skip self-drafter"):
        SteeringFile.load(path, VERIFIER, DRAFTER)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "not a safetensors file"),
        (b'{"num_layers": 4}', "not a safetensors file"),
        ("no-meta", "not a steering file"),
        ("bad-shape", "hml.weight"),
        ("extra-tensor", "expected tensors"),
        ("nan", "non-finite"),
        ("bad-layer", "outside the verifier"),
    ],
)
def test_malformed_files_are_one_error(tmp_path, content, message):
    from safetensors.torch import save

    good = SteeringFile(trained(), VERIFIER, None, SkipMask.uniform(4, 0.5))
    meta = good.metadata()
    tensors = {k: v.clone() for k, v in good.params.state_dict().items()}
    if content == "no-meta":
        content = save(tensors)
    elif content == "bad-shape":
        tensors["hml.weight"] = torch.zeros(64, 100)
        content = save(tensors, metadata={"layersearch": json.dumps(meta)})
    elif content == "extra-tensor":
        tensors["x"] = torch.zeros(1)
        content = save(tensors, metadata={"layersearch": json.dumps(meta)})
    elif content == "nan":
        tensors["s.weight"][0, 0] = float("nan")
        content = save(tensors, metadata={"layersearch": json.dumps(meta)})
    elif content == "bad-layer":
        meta["layers"] = [0, 2, 9]
        content = save(tensors, metadata={"layersearch": json.dumps(meta)})
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(LayersearchError, match=message) as info:
        SteeringFile.load(path)
    assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(LayersearchError, match="no such steering file"):
        SteeringFile.load(tmp_path / "none.safetensors")
    with pytest.raises(LayersearchError, match="is a directory"):
        SteeringFile.load(tmp_path)
