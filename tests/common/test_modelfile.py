"""The base of files bound to a model: every kind (mask, latency profile, DISCO file, KNN
router, steering file) refuses another model with the same one line, refuses a version it does
not know, and saves and loads through the same code."""

from __future__ import annotations

import json

import numpy as np
import pytest

from layersearch.disco.classifier import Classifier
from layersearch.disco.features import NUM_FEATURES
from layersearch.disco.file import DiscoFile
from layersearch.common.errors import LayersearchError
from layersearch.knn.router import DomainMask, Router
from layersearch.masks.mask import SkipMask
from layersearch.common.modelfile import FileKind, ModelBoundJson, ModelInfo, naming
from layersearch.profiling.profile import LatencyProfile
from layersearch.steer import SteeringFile, SteeringParams

INFO = ModelInfo("tiny", 4, 64, "abc123")
MASK = SkipMask(4, (1,), (3,), INFO)


def _disco() -> DiscoFile:
    hidden = 4
    classifier = Classifier(
        (0.0,) * NUM_FEATURES, (1.0,) * NUM_FEATURES, ((0.1,) * NUM_FEATURES,) * hidden, (0.0,) * hidden, (0.5,) * hidden, 0.0
    )
    return DiscoFile(INFO, MASK, classifier, 0.5, 4)


def _router() -> Router:
    anchors = np.eye(2, 64, dtype=np.float32)  # [2, 64]: one anchor per domain
    return Router(INFO, (DomainMask("a", MASK), DomainMask("b", SkipMask.none(4, INFO))), anchors, np.array([0, 1]))


def _profile() -> LatencyProfile:
    return LatencyProfile(INFO, "cpu", "float32", "x", 1e-6, 1e-3, 2e-3, 4e-3, (1.0, 1.5))


JSON_FILES = {"mask": lambda: MASK, "profile": _profile, "disco": _disco, "router": _router}


def _steering() -> SteeringFile:
    return SteeringFile(SteeringParams((0, 3), 64, 64, 96), INFO, None, MASK)


def test_every_json_kind_uses_the_base():
    for make in JSON_FILES.values():
        assert isinstance(make(), ModelBoundJson)


@pytest.mark.parametrize("kind", sorted(JSON_FILES))
def test_round_trip_and_the_file_written_starts_with_its_header(kind, tmp_path):
    original = JSON_FILES[kind]()
    path = tmp_path / f"{kind}.json"
    assert original.save(path) == path
    data = json.loads(path.read_text())
    assert list(data)[: len(original.FILE.header())] == list(original.FILE.header())
    loaded = type(original).load(path, INFO)
    assert loaded.to_dict() == original.to_dict()


# Same fingerprint string, another structure: only a hand-edited file can say so, and it is refused.
OTHERS = [ModelInfo("other", 4, 64, "ffff"), ModelInfo("other", 4, 32, "abc123")]


@pytest.mark.parametrize("other", OTHERS, ids=["fingerprint", "width"])
@pytest.mark.parametrize("kind", sorted(JSON_FILES))
def test_another_model_is_one_line_naming_the_file(kind, other, tmp_path):
    original = JSON_FILES[kind]()
    path = original.save(tmp_path / f"{kind}.json")
    with pytest.raises(LayersearchError) as caught:
        type(original).load(path, other)
    message = str(caught.value)
    assert "\n" not in message
    if kind == "profile":  # a profile is bound to the architecture (its costs), not to the weights
        assert message.startswith(f"{path}: {original.FILE.made_for} architecture tiny (4 layers, hidden 64; "
                                  f"fingerprint abc123), not other (4 layers, hidden {other.hidden_size}; "
                                  f"fingerprint {other.fingerprint})")
        return
    assert message == (
        f"{path}: {original.FILE.made_for} model 'tiny' (fingerprint abc123), not 'other' (fingerprint {other.fingerprint})"
    )


@pytest.mark.parametrize("other", OTHERS, ids=["fingerprint", "width"])
def test_steering_refuses_another_verifier_with_the_same_wording(other, tmp_path):
    path = tmp_path / "s.safetensors"
    _steering().save(path)
    with pytest.raises(LayersearchError) as caught:
        SteeringFile.load(path, other)
    assert str(caught.value) == (
        f"{path}: steering was trained for verifier 'tiny' (fingerprint abc123), not 'other' (fingerprint {other.fingerprint})"
    )


@pytest.mark.parametrize("version", [True, 2, None, "1"])
@pytest.mark.parametrize("kind", sorted(JSON_FILES))
def test_an_unknown_schema_version_is_refused(kind, version, tmp_path):
    original = JSON_FILES[kind]()
    # mask files: 1 (skip masks), 2 (int8 plans), 3 (int4 plans); profiles: 1, 2 (provenance)
    expected = {"mask": "1, 2, 3", "profile": "1, 2"}.get(kind, "1")
    version = 9 if version == 2 else version  # a version no reader knows
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps({**original.to_dict(), "schema_version": version}))
    message = rf"^{path}: unsupported schema_version {version!r} \(expected {expected}\)$"
    if version == 9:  # every file from a newer layersearch says so, in one wording
        newest = expected.split(", ")[-1]
        message = (rf"^{path}: written by a newer layersearch \(schema_version 9; this version reads up to {newest}\): "
                   r"upgrade layersearch to read it$")
    with pytest.raises(LayersearchError, match=message):
        type(original).load(path)


def test_file_kind_tag_and_header():
    kind = FileKind("thing", "thing", "thing was made for", schema_version=3)
    assert kind.header() == {"schema_version": 3, "kind": "thing"}
    assert FileKind(None, "mask", "mask was made for").header() == {"schema_version": 1}
    kind.check_tag({"kind": "thing"})
    for data in ({"kind": "other"}, {}, ["thing"]):
        with pytest.raises(LayersearchError, match='^not a thing file \\(expected "kind": "thing"\\)$'):
            kind.check_tag(data)


def test_the_name_of_a_model_is_informational():
    kind = FileKind(None, "mask", "mask was made for")
    kind.check_model(INFO, ModelInfo("HuggingFaceTB/tiny", 4, 64, "abc123"))
    with pytest.raises(LayersearchError, match="^mask was made for draft model 'tiny'"):
        kind.check_model(INFO, ModelInfo("tiny", 2, 64, "abc123"), "draft model")


def test_naming_prefixes_only_layersearch_errors():
    with pytest.raises(LayersearchError, match="^f.json: bad$"):
        with naming("f.json"):
            raise LayersearchError("bad")
    with pytest.raises(ValueError, match="^other$"):
        with naming("f.json"):
            raise ValueError("other")


@pytest.mark.parametrize("kind", [*sorted(JSON_FILES), "steering"])
def test_a_failed_save_leaves_the_old_file_whole(kind, tmp_path, monkeypatch):
    original = _steering() if kind == "steering" else JSON_FILES[kind]()
    path = tmp_path / kind
    path.write_bytes(b"old")

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("layersearch.common.outputs.os.fsync", disk_full)
    with pytest.raises(LayersearchError, match="No space left on device; nothing was written"):
        original.save(path)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == [kind]  # no temporary file left beside it
