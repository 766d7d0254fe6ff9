"""The steering file: W_hml and W_s as safetensors, with JSON metadata in its header.

The header's ``layersearch`` entry is one JSON object (schema_version 1)::

    {"schema_version": 1, "kind": "sd2-steering", "verifier": {name, num_layers, hidden_size, fingerprint},
     "drafter": null | {...the independent drafter's ModelInfo...}, "layers": [3, 15, 28],
     "mask": null | {...mask file object: the self-drafter's mask...}, "training": {...settings...}}

``drafter: null`` means the self-drafter (the verifier with ``mask``). Loading validates the
header, the tensors' names and shapes and, given the models, their fingerprints: any problem
is one LayersearchError naming the file. Writing is atomic (never a partial file).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping

import torch

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.common.modelfile import FileKind, ModelInfo, naming
from layersearch.common.outputs import write_output
from layersearch.steer.params import SteeringParams

if TYPE_CHECKING:
    from transformers import PreTrainedModel

SCHEMA_VERSION = 1
KIND = "sd2-steering"
#: The header's metadata is this kind's JSON object; the container is safetensors, so the
#: file has its own reading and writing (of bytes) around the shared checks.
STEERING_FILE = FileKind(tag=KIND, called="steering", made_for="steering was trained for", schema_version=SCHEMA_VERSION)
MAX_FILE_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class SteeringFile:
    """Trained steering for one verifier and one drafter (the self-drafter with ``mask``, or a model)."""

    params: SteeringParams = field(compare=False)
    verifier: ModelInfo
    drafter: ModelInfo | None
    mask: SkipMask | None
    training: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if (self.drafter is None) == (self.mask is None):
            raise LayersearchError("a steering file has a mask (self-drafter) or a drafter model, not both or neither")
        for i in self.params.layers:
            if not 0 <= i < self.verifier.num_layers:
                raise LayersearchError(f"layer {i} is outside the verifier's {self.verifier.num_layers} layers")
        if self.params.hml.in_features != len(self.params.layers) * self.verifier.hidden_size:
            raise LayersearchError(
                f"hml.weight takes {self.params.hml.in_features} inputs, expected "
                f"{len(self.params.layers)} layers x hidden size {self.verifier.hidden_size}"
            )
        drafter_width = (self.drafter or self.verifier).hidden_size
        if self.params.hml.out_features != drafter_width:
            raise LayersearchError(f"hml.weight gives {self.params.hml.out_features} outputs, the drafter is {drafter_width} wide")
        if self.mask is not None:
            self.mask.check_model(self.verifier)
        object.__setattr__(self, "training", MappingProxyType(dict(self.training)))

    def check_models(
        self, verifier: ModelInfo, drafter: ModelInfo | None = None, drafter_model: torch.nn.Module | None = None
    ) -> None:
        """Raise unless this steering was trained for ``verifier`` (and ``drafter``, None: the
        self-drafter); given the loaded ``drafter_model``, also check its weights."""
        self.check_verifier(verifier)
        if (drafter is None) != (self.drafter is None):
            trained = "the layer-skip self-drafter" if self.drafter is None else f"draft model {self.drafter.name!r}"
            raise LayersearchError(f"steering was trained for {trained}")
        if drafter is not None and self.drafter is not None:  # both or neither, checked above
            STEERING_FILE.check_model(self.drafter, drafter, "draft model")
        if drafter_model is not None:
            self.check_drafter_weights(drafter_model)

    def check_params(self, draft_model: PreTrainedModel) -> None:
        """Raise unless the matrices fit ``draft_model`` (the masked verifier or the independent
        drafter): W_hml gives its hidden size, W_s its MLPs' width."""
        from layersearch.steer.hooks import intermediate_size

        width, hidden = intermediate_size(draft_model), draft_model.config.hidden_size
        if (self.params.s.out_features, self.params.s.in_features) != (width, hidden):
            raise LayersearchError(
                f"s.weight is {tuple(self.params.s.weight.shape)}, the drafter's MLPs need ({width}, {hidden})"
            )

    def check_drafter_weights(self, model: torch.nn.Module) -> None:
        """Raise unless the draft model holds the weights this steering was trained with.

        The fingerprint covers the structure only, so it cannot tell a fine-tuned drafter from
        the model it was tuned from; ``training.drafter_weights`` (files written since it was
        added) can. It is compared when the drafter is loaded in the dtype it was trained in
        (another dtype rounds the weights, so their digest differs anyway)."""
        trained = self.training.get("drafter_weights")
        if self.drafter is None or not isinstance(trained, dict) or trained.get("dtype") != str(model.dtype):
            return
        if trained.get("digest") != weights_digest(model):
            raise LayersearchError(
                "the draft model's weights differ from those the steering was trained with "
                "(the model before its fine-tuning, or one tuned since?)"
            )

    def check_verifier(self, verifier: ModelInfo) -> None:
        """Raise unless this steering was trained for ``verifier`` (any drafter)."""
        STEERING_FILE.check_model(self.verifier, verifier, "verifier")

    def metadata(self) -> dict[str, Any]:
        """The header's JSON object."""
        return {
            **STEERING_FILE.header(), "verifier": self.verifier.to_dict(),
            "drafter": None if self.drafter is None else self.drafter.to_dict(), "layers": list(self.params.layers),
            "mask": None if self.mask is None else self.mask.to_dict(), "training": dict(self.training),
        }

    def to_bytes(self) -> bytes:
        """The safetensors file's bytes."""
        from safetensors.torch import save

        tensors = {name: t.detach().float().contiguous().cpu() for name, t in self.params.state_dict().items()}
        return save(tensors, metadata={"layersearch": json.dumps(self.metadata())})

    def save(self, path: str | Path) -> None:
        """Write atomically."""
        write_output(path, self.to_bytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> "SteeringFile":
        """Parse and validate; raises LayersearchError naming the problem.

        Everything is checked before anything is allocated from it: the header's fields and
        types, the tensors' names, dtype and shapes against the header's models (whose sizes
        are only claims), then the values (finite)."""
        from safetensors import SafetensorError
        from safetensors.torch import load

        info = _metadata(data)
        verifier = ModelInfo.from_dict(info["verifier"], "verifier")
        drafter = None if info["drafter"] is None else ModelInfo.from_dict(info["drafter"], "drafter")
        mask = None if info["mask"] is None else SkipMask.from_dict(info["mask"])
        layers = _layers(info["layers"], verifier)
        training = _training(info.get("training"))
        try:
            tensors = load(data)  # shapes are bounded by the file's size (safetensors checks the offsets)
        except (SafetensorError, ValueError, TypeError, RuntimeError) as exc:
            raise LayersearchError(f"not a safetensors file ({' '.join(str(exc).split())[:200]})") from None
        params = _params(tensors, layers, verifier, drafter)
        return cls(params, verifier, drafter, mask, training)

    @classmethod
    def load(cls, path: str | Path, verifier: ModelInfo | None = None, drafter: ModelInfo | None = None) -> "SteeringFile":
        """Read and validate a steering file; with ``verifier``, check it was trained for it (and ``drafter``)."""
        data = _read(path)
        with naming(path):
            loaded = cls.from_bytes(data)
            if verifier is not None:
                loaded.check_models(verifier, drafter)
        return loaded


def weights_record(model: torch.nn.Module) -> dict[str, str]:
    """What ``training.drafter_weights`` stores: the weights' dtype and :func:`weights_digest`."""
    return {"dtype": str(model.dtype), "digest": weights_digest(model)}


def weights_digest(model: torch.nn.Module, samples: int = 4096) -> str:
    """A short digest of a model's weights: every parameter's name, shape and ``samples``
    values spread over it (cheap for any size; fine-tuning moves all of them)."""
    import hashlib

    digest = hashlib.sha256()
    with torch.no_grad():
        for name, weight in model.named_parameters():
            flat = weight.detach().reshape(-1)
            picked = flat[:: max(1, flat.numel() // samples)].float().cpu().contiguous()  # [<= ~samples]
            digest.update(f"{name}:{tuple(weight.shape)}".encode())
            digest.update(picked.numpy().tobytes())
    return digest.hexdigest()[:16]


def _read(path: str | Path) -> bytes:
    from layersearch.common.inputs import open_input

    p = Path(path)
    try:
        if p.is_dir():
            raise LayersearchError(f"{path}: is a directory, not a steering file")
        if not p.exists():
            raise FileNotFoundError(path)
        with open_input(p, "steering") as handle:  # a FIFO or device refused, not waited on
            if os.fstat(handle.fileno()).st_size > MAX_FILE_BYTES:
                raise LayersearchError(f"{path}: larger than {MAX_FILE_BYTES // 2**20} MiB; not a steering file")
            return handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise LayersearchError(f"{path}: no such steering file") from None
    except OSError as exc:
        raise LayersearchError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _metadata(data: bytes) -> dict[str, Any]:
    """The header's ``layersearch`` object with its required fields; the header is read with
    the same bounds as every JSON input (size, nesting, integer length)."""
    from layersearch.common.inputs import parse_json

    if len(data) < 8:
        raise LayersearchError("not a safetensors file (shorter than its 8-byte header length)")
    size = int.from_bytes(data[:8], "little")  # safetensors layout: 8-byte length, then the JSON header
    if size > len(data) - 8:
        raise LayersearchError(f"not a safetensors file (its header claims {size} bytes, the file has {len(data) - 8})")
    try:
        text = data[8 : 8 + size].decode("utf-8")
    except UnicodeDecodeError:
        raise LayersearchError("not a safetensors file (its header is not UTF-8 text)") from None
    header = _json(text, "header")
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    raw = meta.get("layersearch") if isinstance(meta, dict) else None
    info = _json(raw, "metadata") if isinstance(raw, str) else None
    if not isinstance(info, dict) or info.get("kind") != KIND:
        raise LayersearchError(f"not a steering file (no layersearch {KIND!r} metadata)")
    STEERING_FILE.check_version(info)
    missing = [k for k in ("verifier", "drafter", "layers", "mask") if k not in info]
    if missing:
        raise LayersearchError(f"missing {', '.join(missing)}")
    return info


def _json(text: str, where: str) -> Any:
    from layersearch.common.inputs import parse_json

    try:
        return parse_json(text, where)
    except LayersearchError as exc:
        raise LayersearchError(f"not a steering file ({exc})") from None


def _layers(layers: Any, verifier: ModelInfo) -> tuple[int, ...]:
    """The verifier layers the steering reads: distinct indices of the verifier's layers."""
    if not isinstance(layers, list) or not layers or not all(isinstance(i, int) and not isinstance(i, bool) for i in layers):
        raise LayersearchError("layers must be a non-empty list of layer indices")
    outside = [i for i in layers if not 0 <= i < verifier.num_layers]
    if outside:
        raise LayersearchError(f"layer {outside[0]} is outside the verifier's {verifier.num_layers} layers")
    if len(set(layers)) != len(layers):
        repeated = sorted({i for i in layers if layers.count(i) > 1})
        raise LayersearchError(f"layers repeat layer {', '.join(map(str, repeated))}: each verifier layer is read once")
    return tuple(layers)


def _training(training: Any) -> dict[str, Any]:
    """The ``training`` record: an object; the fields layersearch reads back have their types."""
    training = {} if training is None else training
    if not isinstance(training, dict):
        raise LayersearchError("training must be an object")
    weights = training.get("drafter_weights")
    if weights is not None and not (
        isinstance(weights, dict) and isinstance(weights.get("dtype"), str) and isinstance(weights.get("digest"), str)
    ):
        raise LayersearchError("training.drafter_weights must be an object with dtype and digest strings")
    if training.get("finetuned_from") is not None:
        ModelInfo.from_dict(training["finetuned_from"], "training.finetuned_from")
    return training


def _params(tensors: dict[str, torch.Tensor], layers: tuple[int, ...], verifier: ModelInfo, drafter: ModelInfo | None) -> SteeringParams:
    """The matrices as SteeringParams, their names, dtype and shapes checked against the header
    before the module (sized from them) is built."""
    if set(tensors) != {"hml.weight", "s.weight"}:
        raise LayersearchError(f"expected tensors hml.weight and s.weight, found {', '.join(sorted(tensors)) or 'none'}")
    hml, s = tensors["hml.weight"], tensors["s.weight"]
    for name, tensor in (("hml.weight", hml), ("s.weight", s)):
        if tensor.dtype != torch.float32:  # what save writes; ints, bools, float8 are no trained weights
            raise LayersearchError(f"{name} is {str(tensor.dtype).removeprefix('torch.')}, expected float32")
    if hml.dim() != 2 or s.dim() != 2 or s.shape[1] != hml.shape[0] or 0 in hml.shape or 0 in s.shape:
        raise LayersearchError(f"malformed matrices: hml.weight {tuple(hml.shape)}, s.weight {tuple(s.shape)}")
    drafter_width = (drafter or verifier).hidden_size
    expected = (drafter_width, len(layers) * verifier.hidden_size)
    if tuple(hml.shape) != expected:
        raise LayersearchError(
            f"hml.weight is {tuple(hml.shape)}, expected {expected} for {len(layers)} layers of hidden size "
            f"{verifier.hidden_size} into a drafter {drafter_width} wide"
        )
    if not (torch.isfinite(hml).all() and torch.isfinite(s).all()):
        raise LayersearchError("the matrices hold non-finite values")
    params = SteeringParams(layers, verifier.hidden_size, hml.shape[0], s.shape[0])  # sizes now those of the tensors
    params.load_state_dict({"hml.weight": hml, "s.weight": s})
    return params.requires_grad_(False)
