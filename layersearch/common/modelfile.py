"""Files bound to a model: what masks, latency profiles, DISCO files, KNN routers and steering
files share.

Each such file records the :class:`ModelInfo` of the model it was made for. A :class:`FileKind`
describes one kind of file: its ``"kind"`` tag, its format version and how messages name it.
Loading checks the tag and the version, parses, checks the model when one is given, and names
the file in any error (:func:`naming`); writing is atomic (:mod:`layersearch.common.outputs`). JSON
files get all of that from :class:`ModelBoundJson`; the steering file (safetensors, its own
container) uses the pieces.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any, ClassVar, Iterator, TypeVar

from layersearch.common.checks import check_int, check_schema_version
from layersearch.common.errors import LayersearchError
from layersearch.common.jsonfile import read_json_file, write_json_atomic
from layersearch.common.outputs import OutputTarget

_MODEL_FIELDS = ("name", "num_layers", "hidden_size", "fingerprint")


@dataclass(frozen=True)
class ModelInfo:
    """What identifies a model for a file bound to it: its name and structure fingerprint."""

    name: str
    num_layers: int
    hidden_size: int
    fingerprint: str

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return {
            "name": self.name,
            "num_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "model") -> "ModelInfo":
        """Parse and validate the ``model`` object of a file (``where`` names it in errors)."""
        if not isinstance(data, dict):
            raise LayersearchError(f"{where}: expected an object with name, num_layers, hidden_size, fingerprint")
        missing = [k for k in _MODEL_FIELDS if k not in data]
        if missing:
            raise LayersearchError(f"{where}: missing {', '.join(missing)}")
        check_int(data["num_layers"], f"{where}.num_layers", minimum=1)
        check_int(data["hidden_size"], f"{where}.hidden_size", minimum=1)
        if not isinstance(data["name"], str) or not isinstance(data["fingerprint"], str):
            raise LayersearchError(f"{where}: name and fingerprint must be strings")
        return cls(data["name"], data["num_layers"], data["hidden_size"], data["fingerprint"])

    def same_model(self, other: "ModelInfo") -> bool:
        """True when ``other`` has this structure (the name is informational: an exported model
        and the embedded copy of it are the same model)."""
        return (self.fingerprint, self.num_layers, self.hidden_size) == (
            other.fingerprint, other.num_layers, other.hidden_size
        )


@dataclass(frozen=True)
class FileKind:
    """One kind of model-bound file.

    ``tag`` is the file's ``"kind"`` field (None: the file carries none, as mask files);
    ``called`` names the file in read errors ("mask", "KNN-SSD router"); ``made_for`` opens the
    message for another model ("router was built for")."""

    tag: str | None
    called: str
    made_for: str
    schema_version: int = 1

    def check_tag(self, data: Any) -> None:
        """Raise unless ``data`` is an object carrying this kind's tag."""
        if not isinstance(data, dict) or data.get("kind") != self.tag:
            raise LayersearchError(f"not a {self.called} file (expected \"kind\": \"{self.tag}\")")

    def check_version(self, data: dict[str, Any]) -> None:
        """Raise unless ``data`` declares this kind's format version (``true`` is not 1)."""
        check_schema_version(data.get("schema_version"), (self.schema_version,))

    def header(self) -> dict[str, Any]:
        """The leading fields of the file's JSON object: its version and, if any, its tag."""
        if self.tag is None:
            return {"schema_version": self.schema_version}
        return {"schema_version": self.schema_version, "kind": self.tag}

    def check_model(self, made: ModelInfo, given: ModelInfo, what: str = "model") -> None:
        """Raise unless ``given`` is the model ``made`` describes (``what``: "model", "verifier"...)."""
        if not made.same_model(given):
            raise LayersearchError(
                f"{self.made_for} {what} {made.name!r} (fingerprint {made.fingerprint}), "
                f"not {given.name!r} (fingerprint {given.fingerprint})"
            )


@contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """Prefix any LayersearchError raised inside with ``path``: one line naming the file."""
    try:
        yield
    except LayersearchError as exc:
        raise LayersearchError(f"{path}: {exc}") from None


_Loaded = TypeVar("_Loaded", bound="ModelBoundJson")


class ModelBoundJson:
    """Save, load and the model check of a JSON file bound to a model.

    A subclass (a frozen dataclass) sets ``FILE``, has a ``model`` field (:class:`ModelInfo`)
    and defines ``to_dict`` and ``from_dict``; ``from_dict`` validates everything but the model.
    """

    FILE: ClassVar[FileKind]

    def check_model(self, model: ModelInfo) -> None:
        """Raise unless this file was made for ``model``."""
        self.FILE.check_model(self.model, model)  # type: ignore[attr-defined]

    def save(self, path: str | Path | OutputTarget) -> Path:
        """Write the file atomically (a crash never leaves a partial file); returns the path given."""
        if not isinstance(path, (str, PathLike)):
            raise LayersearchError(f"{self.FILE.called} file must be a path (str or Path), got {type(path).__name__}")
        return write_json_atomic(path, self.to_dict())  # type: ignore[attr-defined]

    @classmethod
    def load(cls: type[_Loaded], path: str | Path, model: ModelInfo | None = None) -> _Loaded:
        """Read and validate a file; with ``model``, also check it was made for that model."""
        if not isinstance(path, (str, PathLike)):
            raise LayersearchError(f"{cls.FILE.called} file must be a path (str or Path), got {type(path).__name__}")
        if model is not None and not isinstance(model, ModelInfo):
            raise LayersearchError(f"model must be a ModelInfo or None, got {type(model).__name__}")
        path = Path(path)  # errors name the file as the read errors do
        data = read_json_file(path, cls.FILE.called)
        with naming(path):
            loaded = cls.from_dict(data)  # type: ignore[attr-defined]
            if model is not None:
                loaded.check_model(model)
        return loaded


__all__ = ["FileKind", "ModelBoundJson", "ModelInfo", "naming"]
