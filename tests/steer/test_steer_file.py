"""The steering file: safetensors + metadata, round trip and one-line refusals."""

from __future__ import annotations

import json

import pytest
import torch

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import ModelInfo, SkipMask
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


def _with_meta(path, **changes):
    """The file at ``path`` rewritten with its metadata fields changed."""
    from safetensors import safe_open
    from safetensors.torch import save

    with safe_open(str(path), "pt") as handle:
        info = json.loads(handle.metadata()["layersearch"])
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}
    return save(tensors, metadata={"layersearch": json.dumps({**info, **changes})})


@pytest.mark.parametrize("changes, message", [
    ({"layers": [0, 2, 2]}, "layers repeat layer 2"),
    ({"layers": [0, 2, 4]}, "layer 4 is outside the verifier's 4 layers"),
    # a size claimed in the header is compared with the tensors before anything is allocated from it
    ({"verifier": {"name": "v", "num_layers": 4, "hidden_size": 10**15, "fingerprint": "aaaa"}}, r"hml\.weight is \(64, 192\)"),
    ({"training": {"drafter_weights": "x"}}, "drafter_weights must be an object"),
])
def test_a_bad_header_is_refused_before_allocating(tmp_path, changes, message):
    path = tmp_path / "s.safetensors"
    SteeringFile(trained(), VERIFIER, None, SkipMask.uniform(4, 0.5)).save(path)
    with pytest.raises(LayersearchError, match=message):
        SteeringFile.from_bytes(_with_meta(path, **changes))


@pytest.mark.parametrize("dtype", [torch.float16, torch.int32, torch.bool, torch.float8_e4m3fn])
def test_only_float32_matrices_are_read(tmp_path, dtype):
    from safetensors.torch import save

    file = SteeringFile(trained(), VERIFIER, None, SkipMask.uniform(4, 0.5))
    tensors = {k: v.to(dtype) for k, v in file.params.state_dict().items()}
    data = save(tensors, metadata={"layersearch": json.dumps(file.metadata())})
    with pytest.raises(LayersearchError, match=f"is {str(dtype).removeprefix('torch.')}, expected float32"):
        SteeringFile.from_bytes(data)


def test_matrices_must_fit_the_drafter_model(tiny_llama):
    from layersearch.steer.hooks import intermediate_size

    width = intermediate_size(tiny_llama)
    fits = SteeringFile(SteeringParams((0, 2, 3), 64, 64, width), VERIFIER, None, SkipMask.uniform(4, 0.5))
    fits.check_params(tiny_llama)
    other = SteeringFile(SteeringParams((0, 2, 3), 64, 64, width + 1), VERIFIER, None, SkipMask.uniform(4, 0.5))
    with pytest.raises(LayersearchError, match=rf"the drafter's MLPs need \({width}, 64\)"):
        other.check_params(tiny_llama)
