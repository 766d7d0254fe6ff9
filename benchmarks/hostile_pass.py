"""A hostile user's pass over every command: 100+ bad invocations, each in a fresh copy of a
working folder, run as a real process with a timeout.

Counts what must never happen: a traceback, the CLI's internal-error line (the
``LAYERSEARCH_DEBUG`` marker), exit 0 on a bad file or value, any other exit status than 2,
more than one line on stderr, files left behind or changed (a FIFO is never read: it is
marked, not opened), and slow refusals: more than
``--slow`` (10) seconds of CPU time (user + system: the work done before refusing, whatever
else the machine runs), or killed at ``--timeout``. Wall time over 10 s is counted too
(``over-10s-wall``, not a failure by itself: on a shared 2-core machine importing torch alone
can wait 5-15 s); the wall and CPU time of a good model-loading command (the start-up floor)
is measured every 25 cases for comparison. A few cases are good commands whose result is
checked instead (``check``: a merged file, the modes a umask gives): they must exit 0, and a
wrong result counts as ``wrong-result``. Prints one line per failing case and the counts;
``--json`` writes them.

    OMP_NUM_THREADS=1 python benchmarks/hostile_pass.py [--only SUBSTRING] [--json counts.json]

The working folder holds a tiny random Llama (4 layers, a character tokenizer) and one good
file of each kind (mask, prompts, steering, DISCO classifier, DISCO rows, KNN router); each
case breaks one file or one option. Run from the repository root (the cwd's ``layersearch``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
MARKER = "LAYERSEARCH_DEBUG"


@dataclass(frozen=True)
class Case:
    """One bad invocation: a name, argv (after ``python -m layersearch``), and an optional
    step that plants the bad file in the working folder first."""

    name: str
    argv: tuple[str, ...]
    plant: Callable[[Path], None] | None = None
    #: a good command: what is wrong with its result (None: right), checked after it exits 0
    check: Callable[[Path], str | None] | None = None
    umask: int | None = None  # the umask it runs under (None: this process's)
    env: tuple[tuple[str, str], ...] = ()  # extra environment (a path relative to the working folder)
    #: a case that must now succeed (exit 0, no traceback), e.g. input that used to crash; its outputs may appear
    expect_ok: bool = False
    #: extra environment (e.g. LAYERSEARCH_CACHE inside the working folder, for cases planting a cache)
    env: tuple[tuple[str, str], ...] = ()
    #: a case judged by what it says: exit 2 with this text on stderr (progress lines allowed), e.g.
    #: "converting" where a stale conversion must be redone and the planted file cannot convert
    expect_text: str | None = None
    #: "refused" (exit 2, one line, nothing changed), "ok" (a large but good input: exit 0 within
    #: --slow CPU seconds, no traceback) or "interrupt" (SIGINT once stderr shows ``interrupt_on``:
    #: exit 130, no traceback)
    expect: str = "refused"
    interrupt_on: str = ""
    #: argv is ``python -c SCRIPT`` (the Python API) instead of ``python -m layersearch ...``
    api: bool = False


# ----- the working folder ------------------------------------------------------------------------
def build_base(folder: Path) -> None:
    """The good files every case starts from."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from layersearch.disco.classifier import Classifier
    from layersearch.disco.collect import Rows
    from layersearch.disco.features import NUM_FEATURES
    from layersearch.disco.file import DiscoFile
    from layersearch.knn.router import DomainMask, Router
    from layersearch.masks.mask import SkipMask
    from layersearch.models.loading import load_model
    from layersearch.models.tiny import build_tiny_model, char_tokenizer
    from layersearch.steer import SteeringFile, SteeringParams, default_layers
    from layersearch.steer.hooks import intermediate_size

    model = build_tiny_model("llama", num_layers=4, seed=0)
    model.config.max_position_embeddings = 2048
    model.save_pretrained(folder / "model")
    char_tokenizer().save_pretrained(folder / "model")
    info = load_model(str(folder / "model")).info
    mask = SkipMask(4, (1,), (2,), info)
    mask.save(folder / "mask.json")
    (folder / "prompts.jsonl").write_text('{"prompt": "w1 w2"}\n')
    params = SteeringParams(default_layers(4), 64, 64, intermediate_size(model))
    SteeringFile(params, info, None, mask).save(folder / "steer.safetensors")
    hidden = 4
    classifier = Classifier((0.0,) * NUM_FEATURES, (1.0,) * NUM_FEATURES, ((0.1,) * NUM_FEATURES,) * hidden,
                            (0.0,) * hidden, (0.5,) * hidden, 0.0)
    DiscoFile(info, mask, classifier, 0.5, 4).save(folder / "disco.json")
    rng = np.random.default_rng(0)
    n = 40
    Rows(rng.normal(size=(n, NUM_FEATURES)).astype(np.float32), rng.random(n) < 0.5, rng.random(n).astype(np.float32),
         np.repeat(np.arange(4), n // 4), np.tile(np.arange(1, n // 4 + 1), 4)).save(folder / "rows.npz")
    Router(info, (DomainMask("translation", mask),), rng.normal(size=(3, 64)).astype(np.float32),
           np.zeros(3, dtype=np.int64), 0.5).save(folder / "router.json")
    # A draft-model folder whose config has zero layers (weights of the good model).
    shutil.copytree(folder / "model", folder / "zero")
    _edit_json(folder / "zero" / "config.json", num_hidden_layers=0)
    # A decoder spec with a steering file (round three: a FIFO in its place) and Self-SD's mask format.
    from layersearch.cli import main as cli_main

    assert cli_main(["generate", "--model", str(folder / "model"), "--steering", str(folder / "steer.safetensors"),
                     "--prompt", "w1 w2", "--max-new-tokens", "2", "--save-spec", str(folder / "steer_spec.json")]) == 0
    (folder / "paper.json").write_text('{"llama-2-13b": {"attention": [1], "mlp": [2]}}')


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


# ----- bad files -------------------------------------------------------------------------------
def steering_bytes(tensors: dict[str, tuple[str, tuple[int, ...], bytes]], metadata: str) -> bytes:
    """A safetensors file written by hand: {name: (dtype code, shape, raw bytes)} and the metadata string."""
    header, offset, blobs = {"__metadata__": {"layersearch": metadata}}, 0, []
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def good_steering(work: Path) -> tuple[dict, dict]:
    """The good steering file's metadata object and tensors {name: (shape, float32 bytes)}."""
    from safetensors import safe_open

    with safe_open(str(work / "steer.safetensors"), "pt") as handle:
        meta = json.loads(handle.metadata()["layersearch"])
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}
    return meta, tensors


def steering_variant(name: str, *, dtype: str | None = None, meta_change: dict | None = None,
                     metadata: str | None = None, fill: float | None = None) -> Callable[[Path], None]:
    """Plant ``name``: the good steering file with its tensors in ``dtype``, its metadata changed
    (or replaced by ``metadata``), or its tensors filled with ``fill``."""
    def plant(work: Path) -> None:
        import torch
        from safetensors.torch import _TYPES  # noqa: F401  (the dtype codes below are safetensors')

        meta, tensors = good_steering(work)
        meta.update(meta_change or {})
        out = {}
        for key, tensor in tensors.items():
            if fill is not None:
                tensor = torch.full_like(tensor, fill)
            code = dtype or "F32"
            converted = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
                         "I32": torch.int32, "I64": torch.int64, "BOOL": torch.bool, "U8": torch.uint8,
                         "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}[code]
            raw = tensor.to(converted).contiguous().view(torch.uint8).numpy().tobytes()
            out[key] = (code, tuple(tensor.shape), raw)
        (work / name).write_bytes(steering_bytes(out, metadata if metadata is not None else json.dumps(meta)))
    return plant


def disco_variant(name: str, change: Callable[[dict], None], raw: str | None = None) -> Callable[[Path], None]:
    """Plant ``name``: the good DISCO file with ``change`` applied to its JSON object (or ``raw`` text)."""
    def plant(work: Path) -> None:
        data = json.loads((work / "disco.json").read_text())
        change(data)
        (work / name).write_text(raw if raw is not None else json.dumps(data))
    return plant


def router_variant(name: str, change: Callable[[dict], None], raw: Callable[[str], str] | None = None) -> Callable[[Path], None]:
    """Plant ``name``: the good router with ``change`` applied (``raw``: a text substitution after)."""
    def plant(work: Path) -> None:
        data = json.loads((work / "router.json").read_text())
        change(data)
        text = json.dumps(data)
        (work / name).write_text(raw(text) if raw else text)
    return plant


def rows_variant(name: str, arrays: Callable[[dict], dict] | None = None, data: bytes | None = None,
                 npy: bool = False) -> Callable[[Path], None]:
    """Plant ``name``: the good rows with ``arrays`` changed, raw ``data``, or a plain ``.npy`` of x."""
    def plant(work: Path) -> None:
        import numpy as np

        if data is not None:
            (work / name).write_bytes(data)
            return
        with np.load(work / "rows.npz") as loaded:
            good = {k: loaded[k] for k in loaded.files}
        if npy:
            with open(work / name, "wb") as handle:
                np.save(handle, good["x"])
            return
        with open(work / name, "wb") as handle:
            np.savez(handle, **arrays(good))
    return plant


def _setitem(path: tuple, value) -> Callable[[dict], None]:
    def change(data: dict) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# ----- the cases ---------------------------------------------------------------------------------
def cases() -> list[Case]:
    M = ("--model", "model")
    gen = ("generate", *M, "--prompt", "w1 w2", "--max-new-tokens", "2")
    found: list[Case] = []

    def add(name, argv, plant=None, **options):
        found.append(Case(name, tuple(argv), plant, **options))

    # steering files, read by generate --steering and steer eval
    steering = {
        "float16 tensors": steering_variant("s.safetensors", dtype="F16"),
        "bfloat16 tensors": steering_variant("s.safetensors", dtype="BF16"),
        "float64 tensors": steering_variant("s.safetensors", dtype="F64"),
        "int32 tensors": steering_variant("s.safetensors", dtype="I32"),
        "int64 tensors": steering_variant("s.safetensors", dtype="I64"),
        "bool tensors": steering_variant("s.safetensors", dtype="BOOL"),
        "uint8 tensors": steering_variant("s.safetensors", dtype="U8"),
        "float8 e4m3 tensors": steering_variant("s.safetensors", dtype="F8_E4M3"),
        "float8 e5m2 tensors": steering_variant("s.safetensors", dtype="F8_E5M2"),
        "NaN values": steering_variant("s.safetensors", fill=float("nan")),
        "infinite values": steering_variant("s.safetensors", fill=float("inf")),
        "repeated layer": steering_variant("s.safetensors", meta_change={"layers": [2, 2]}),
        "repeated layer x3": steering_variant("s.safetensors", meta_change={"layers": [0, 0]}),
        "negative layer": steering_variant("s.safetensors", meta_change={"layers": [-1, 2]}),
        "layer out of range": steering_variant("s.safetensors", meta_change={"layers": [0, 99]}),
        "layer as a string": steering_variant("s.safetensors", meta_change={"layers": ["0", 2]}),
        "layer as a float": steering_variant("s.safetensors", meta_change={"layers": [0.0, 2]}),
        "enormous hidden size": steering_variant("s.safetensors", meta_change={"verifier": {
            "name": "x", "num_layers": 4, "hidden_size": 10**15, "fingerprint": "0"}}),
        "large hidden size": steering_variant("s.safetensors", meta_change={"verifier": {
            "name": "x", "num_layers": 4, "hidden_size": 200_000, "fingerprint": "0"}}),
        "enormous layer count": steering_variant("s.safetensors", meta_change={"verifier": {
            "name": "x", "num_layers": 10**15, "hidden_size": 64, "fingerprint": "0"}}),
        "metadata nested 5000 deep": steering_variant("s.safetensors", metadata=_nested(5000)),
        "metadata training nested 5000 deep": steering_variant(
            "s.safetensors", metadata='{"schema_version": 1, "kind": "sd2-steering", "training": ' + _nested(5000) + "}"),
        "metadata with a 5000-digit integer": steering_variant(
            "s.safetensors", metadata='{"schema_version": 1, "kind": "sd2-steering", "layers": [' + "9" * 5000 + "]}"),
        "training a list": steering_variant("s.safetensors", meta_change={"training": [1, 2]}),
        "drafter weights a string": steering_variant("s.safetensors", meta_change={"training": {"drafter_weights": "x"}}),
        "schema version as a string": steering_variant("s.safetensors", meta_change={"schema_version": "1"}),
        "truncated": lambda w: (w / "s.safetensors").write_bytes((w / "steer.safetensors").read_bytes()[:300]),
        "header length lies": lambda w: (w / "s.safetensors").write_bytes(struct.pack("<Q", 2**60) + b"{}"),
    }
    for label, plant in steering.items():
        add(f"generate --steering: {label}", (*gen, "--steering", "s.safetensors"), plant)
    for label in ("int32 tensors", "float8 e4m3 tensors", "repeated layer", "enormous hidden size", "metadata nested 5000 deep"):
        add(f"steer eval --steering: {label}", ("steer", "eval", *M, "--steering", "s.safetensors", "--domain", "translation",
                                                "--prompts", "1", "--max-new-tokens", "2", "--seeds", "1"), steering[label])

    # DISCO classifier files, read by generate --lookahead disco:FILE
    nan, inf = float("nan"), float("inf")
    disco = {
        "NaN weight": disco_variant("d.json", _setitem(("classifier", "b2"), nan)),
        "NaN in w1": disco_variant("d.json", lambda d: d["classifier"]["w1"][0].__setitem__(0, nan)),
        "infinite mean": disco_variant("d.json", lambda d: d["classifier"]["mean"].__setitem__(0, inf)),
        "overflowing literal 1e999": disco_variant("d.json", lambda d: None,
                                                   raw=None),
        "string weight": disco_variant("d.json", lambda d: d["classifier"]["w2"].__setitem__(0, "0.5")),
        "string b2": disco_variant("d.json", _setitem(("classifier", "b2"), "0.5")),
        "bool weight": disco_variant("d.json", lambda d: d["classifier"]["b1"].__setitem__(0, True)),
        "zero scale": disco_variant("d.json", lambda d: d["classifier"]["scale"].__setitem__(0, 0.0)),
        "tau NaN": disco_variant("d.json", _setitem(("tau",), nan)),
        "tau as a string": disco_variant("d.json", _setitem(("tau",), "0.5")),
        "sl_max huge": disco_variant("d.json", _setitem(("sl_max",), 10**20)),
        "sl_max a float": disco_variant("d.json", _setitem(("sl_max",), 4.0)),
        "training a string": disco_variant("d.json", _setitem(("training",), "x")),
        "features a list": disco_variant("d.json", _setitem(("features",), [1])),
        "mask of another size": disco_variant("d.json", _setitem(("mask", "num_layers"), 5)),
    }
    # 1e999 and -Infinity written as raw text
    disco["overflowing literal 1e999"] = lambda w: (w / "d.json").write_text(
        (w / "disco.json").read_text().replace('"b2": 0.0', '"b2": 1e999'))
    disco["-Infinity literal"] = lambda w: (w / "d.json").write_text(
        (w / "disco.json").read_text().replace('"tau": 0.5', '"tau": -Infinity'))
    for label, plant in disco.items():
        add(f"generate --lookahead disco: {label}", (*gen, "--mask", "uniform:0.5", "--lookahead", "disco:d.json"), plant)

    # DISCO training rows, read by disco train --rows
    train = ("disco", "train", *M, "--domain", "translation", "--val-prompts", "1", "--max-new-tokens", "2", "--out", "d_out.json")
    rows = {
        "malformed": rows_variant("r.npz", data=b"PK\x03\x04 not really a zip"),
        "empty": rows_variant("r.npz", data=b""),
        "text": rows_variant("r.npz", data=b"hello\n" * 50),
        "a plain .npy": rows_variant("r.npz", npy=True),
        "a pickle": rows_variant("r.npz", data=b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00K\x01."),
        "x of the wrong width": rows_variant("r.npz", lambda a: {**a, "x": a["x"][:, :3]}),
        "x one-dimensional": rows_variant("r.npz", lambda a: {**a, "x": a["x"][:, 0]}),
        "labels shorter": rows_variant("r.npz", lambda a: {**a, "label": a["label"][:5]}),
        "prompt ids shorter": rows_variant("r.npz", lambda a: {**a, "prompt": a["prompt"][:5]}),
        "no rows": rows_variant("r.npz", lambda a: {k: v[:0] for k, v in a.items()}),
        "missing tv": rows_variant("r.npz", lambda a: {k: v for k, v in a.items() if k != "tv"}),
        "NaN features": rows_variant("r.npz", lambda a: {**a, "x": a["x"] * float("nan")}),
        "string labels": rows_variant("r.npz", lambda a: {**a, "label": a["label"].astype(str)}),
        "object arrays": rows_variant("r.npz", lambda a: {**a, "tv": a["tv"].astype(object)}),
        "float prompt ids": rows_variant("r.npz", lambda a: {**a, "prompt": a["prompt"] + 0.5}),
        "complex features": rows_variant("r.npz", lambda a: {**a, "x": a["x"].astype(complex)}),
    }
    for label, plant in rows.items():
        add(f"disco train --rows: {label}", (*train, "--rows", "r.npz"), plant)

    # KNN routers, read by generate --mask router:FILE and knn bench --router
    routers = {
        "label too large for an integer": router_variant("k.json", _setitem(("anchor_domains",), [10**25, 0, 0])),
        "negative label": router_variant("k.json", _setitem(("anchor_domains",), [-1, 0, 0])),
        "label as a float": router_variant("k.json", _setitem(("anchor_domains",), [0.0, 0, 0])),
        "NaN anchor": router_variant("k.json", lambda d: d["anchors"][0].__setitem__(0, float("nan"))),
        "string anchor value": router_variant("k.json", lambda d: d["anchors"][0].__setitem__(0, "1")),
        "anchor of another width": router_variant("k.json", lambda d: d["anchors"].__setitem__(0, [1.0] * 63)),
        "zero anchor": router_variant("k.json", lambda d: d["anchors"].__setitem__(0, [0.0] * 64)),
        "threshold as a string": router_variant("k.json", _setitem(("threshold",), "0.5")),
        "threshold infinite": router_variant("k.json", lambda d: None, raw=lambda t: t.replace('"threshold": 0.5', '"threshold": Infinity')),
        "domain name a number": router_variant("k.json", lambda d: d["domains"][0].__setitem__("name", 3)),
        "build nested deep": router_variant("k.json", lambda d: None, raw=lambda t: t.replace('"build": {}', '"build": ' + _nested(3000))),
        "enormous hidden size": router_variant("k.json", _setitem(("model", "hidden_size"), 10**15)),
    }
    for label, plant in routers.items():
        add(f"generate --mask router: {label}", (*gen, "--mask", "router:k.json"), plant)
    for label in ("label too large for an integer", "NaN anchor", "threshold as a string"):
        add(f"knn bench --router: {label}", ("knn", "bench", *M, "--router", "k.json", "--instances", "2", "--out", "kb.json"),
            routers[label])

    # draft-model folders
    add("generate --draft-model: zero-layer config", (*gen, "--draft-model", "zero"))
    for label, change in {"negative layers": {"num_hidden_layers": -1}, "layers as a string": {"num_hidden_layers": "2"},
                          "enormous hidden size": {"hidden_size": 10**12}, "enormous vocabulary": {"vocab_size": 10**13},
                          "config not JSON": None}.items():
        def plant(work: Path, change=change) -> None:
            shutil.copytree(work / "model", work / "bad")
            if change is None:
                (work / "bad" / "config.json").write_text("{nope")
            else:
                _edit_json(work / "bad" / "config.json", **change)
        add(f"generate --draft-model: {label}", (*gen, "--draft-model", "bad"), plant)
    add("steer train --drafter: zero-layer config", ("steer", "train", *M, "--drafter", "zero", "--domain", "translation",
                                                       "--prompts", "1", "--new-tokens", "2", "--steps", "1", "--out", "s_out.safetensors"))

    # numeric options
    st = ("steer", "train", *M, "--skip-ratio", "0.5", "--domain", "translation", "--prompts", "1", "--new-tokens", "2",
          "--steps", "1", "--val-prompts", "0", "--out", "s_out.safetensors")
    for value in ("inf", "nan", "-1", "1e308", "1e30"):
        add(f"steer train --lr {value}", (*st, "--lr", value))
    for value in (str(2**80), "-1", str(2**64)):
        add(f"steer train --seed {value}", (*st, "--seed", value))
    add("steer train --skip-ratio nan", (*st[:4], "--skip-ratio", "nan", *st[6:]))
    add("steer train --new-tokens 10**9", (*st, "--new-tokens", str(10**9)))
    add("steer train --max-offset 10**12", (*st, "--max-offset", str(10**12)))
    add("steer train --drafter-lr inf", (*st, "--drafter", "model", "--finetune-drafter", "ft", "--drafter-lr", "inf"))
    ev = ("steer", "eval", *M, "--steering", "steer.safetensors", "--domain", "translation", "--prompts", "1",
          "--max-new-tokens", "2", "--seeds", "1")
    for value in (str(2**80), "-1"):
        add(f"steer eval --seed {value}", (*ev, "--seed", value))
    add("steer eval --max-new-tokens 10**9", (*ev[:-4], "--max-new-tokens", str(10**9), "--seeds", "1"))
    add("steer eval --seeds 10**9", (*ev[:-2], "--seeds", str(10**9)))
    dc = ("disco", "collect", *M, "--domain", "translation", "--prompts", "1", "--max-new-tokens", "2", "--out", "r_out.npz")
    add("disco collect --out a directory", (*dc[:-1], "adir"), lambda w: (w / "adir").mkdir())
    add("disco collect --out in a missing folder", (*dc[:-1], "missing/r.npz"))
    add("disco collect --seed -1", (*dc, "--seed", "-1"))
    add("disco collect --seed 2**80", (*dc, "--seed", str(2**80)))
    add("disco collect --skip-ratio nan", (*dc, "--skip-ratio", "nan"))
    add("disco collect --skip-ratio inf", (*dc, "--skip-ratio", "inf"))
    add("disco collect --skip-ratio 2", (*dc, "--skip-ratio", "2"))
    add("disco collect --max-new-tokens 10**9", (*dc, "--max-new-tokens", str(10**9)))
    add("disco train --max-draft 100000", (*train, "--train-prompts", "1", "--max-draft", "100000"))
    add("disco train --max-draft 5000", (*train, "--train-prompts", "1", "--max-draft", "5000"))
    add("disco train --out a directory", (*train[:-1], "adir", "--train-prompts", "1"), lambda w: (w / "adir").mkdir())
    add("disco train --out in a missing folder", (*train[:-1], "missing/d.json", "--train-prompts", "1"))
    add("disco train --seed -5", (*train, "--train-prompts", "1", "--seed", "-5"))
    db = ("disco", "bench", *M, "--domains", "translation", "--train-prompts", "1", "--val-prompts", "1", "--test-prompts", "1",
          "--max-new-tokens", "2")
    add("disco bench --out a directory", (*db, "--out", "adir"), lambda w: (w / "adir").mkdir())
    add("disco bench --out in a missing folder", (*db, "--out", "missing/b.json"))
    add("disco bench --max-draft 100000", (*db, "--max-draft", "100000", "--out", "b.json"))
    kb = ("knn", "build", *M, "--domain", "translation=mask.json", "--samples", "1", "--out", "k_out.json")
    for value in ("-1", str(2**80), str(2**40)):
        add(f"knn build --seed {value}", (*kb, "--seed", value))
    for value in ("nan", "inf", "-inf"):
        add(f"knn build --threshold-margin {value}", (*kb, "--threshold-margin", value))
    add("knn build --samples 10**9", (*kb[:-4], "--samples", str(10**9), "--out", "k_out.json"))
    add("knn build --out in a missing folder", (*kb[:-1], "missing/k.json"))
    kn = ("knn", "bench", *M, "--router", "router.json", "--instances", "2", "--out", "kb.json")
    for value in ("-1", str(2**80)):
        add(f"knn bench --seed {value}", (*kn, "--seed", value))
    add("knn bench --draft-threshold nan", (*kn, "--draft-threshold", "nan"))
    add("knn bench --max-draft 10**9", (*kn, "--max-draft", str(10**9)))
    add("knn bench --mix-ratios nan", (*kn, "--mix-ratios", "nan"))
    add("knn bench --instances 10**9", (*kn[:-4], "--instances", str(10**9), "--out", "kb.json"))
    add("knn bench --out in a missing folder", (*kn[:-1], "missing/kb.json"))
    for option, value in (("--temperature", "nan"), ("--temperature", "-1"), ("--top-p", "nan"), ("--top-p", "inf"),
                          ("--seed", "-1"), ("--seed", str(2**70)), ("--draft-threshold", "nan"), ("--skip-ratio", "nan"),
                          ("--skip-ratio", "inf"), ("--max-draft", str(10**9)), ("--max-new-tokens", str(10**12)),
                          ("--reselect-every", "0")):
        add(f"generate {option} {value}", (*gen, option, value))
    # --out the same everywhere
    outs = {"a directory": ("adir", lambda w: (w / "adir").mkdir()), "in a missing folder": ("missing/x.out", None),
            "under a file": ("afile/x.out", lambda w: (w / "afile").write_text("mine"))}
    for label, (path, plant) in outs.items():
        add(f"steer train --out {label}", (*st[:-1], path.replace(".out", ".safetensors")), plant)
        add(f"steer eval --out {label}", (*ev, "--out", path.replace(".out", ".json")), plant)
        add(f"mask create --out {label}", ("mask", "create", *M, "--attention", "1", "--out", path.replace(".out", ".json")), plant)
        add(f"profile --out {label}", ("profile", *M, "--contexts", "8", "--repeats", "1", "--out", path.replace(".out", ".json")), plant)
    add("steer train --out a/b/c.safetensors", (*st[:-1], "a/b/c.safetensors"))
    add("steer shrink --out in a missing folder", ("steer", "shrink", *M, "--keep-layers", "2", "--out", "missing/small"))
    add("steer train --finetune-drafter in a missing folder",
        (*st[:4], "--drafter", "model", *st[6:], "--finetune-drafter", "missing/ft"))
    # prompt files
    for label, text in {"chat messages in prompt": '{"prompt": [{"role": "user", "content": "hi"}]}\n',
                        "prompt a number": '{"prompt": 3}\n', "NaN prompt": '{"prompt": NaN}\n',
                        "nested prompt": '{"prompt": ' + _nested(5000) + "}\n"}.items():
        add(f"generate --prompts: {label}", ("generate", *M, "--prompts", "p.jsonl", "--max-new-tokens", "2"),
            lambda w, text=text: (w / "p.jsonl").write_text(text))
    # round two (issue 26): this turn's new inputs, each name starting "new:"
    gguf_head = lambda version=3, tensors=1, kv=1, rest=b"": b"GGUF" + struct.pack("<IQQ", version, tensors, kv) + rest
    for label, data in {"not GGUF": b"hello\n" * 50, "truncated header": gguf_head()[:12],
                        "huge string length": gguf_head(rest=struct.pack("<Q", 2**62)), "wrong version": gguf_head(version=99),
                        "zero tensors": gguf_head(tensors=0, kv=0), "huge tensor count": gguf_head(tensors=2**62, kv=0)}.items():
        add(f"new: generate --model GGUF {label}", ("generate", "--model", "m.gguf", "--prompt", "w1 w2", "--max-new-tokens", "2"),
            lambda w, data=data: (w / "m.gguf").write_bytes(data))
    add("new: generate --model missing .gguf", ("generate", "--model", "nope.gguf", "--prompt", "w1 w2", "--max-new-tokens", "2"))
    add("new: generate --draft-model a directory x.gguf", (*gen, "--draft-model", "x.gguf"), lambda w: (w / "x.gguf").mkdir())
    spec = ("generate", "--spec", "s.json", "--prompt", "w1 w2", "--max-new-tokens", "2")
    for label, text in {"malformed": '{"kind": ', "a mask": None, "format 2": '{"kind": "layersearch-decoder-spec", "format": 2}',
                        "unknown field": '{"kind": "layersearch-decoder-spec", "format": 1, "extra": 1}'}.items():
        add(f"new: generate --spec {label}", spec, lambda w, text=text: (w / "s.json").write_text(text if text is not None else (w / "mask.json").read_text()))
    add("new: generate --spec a symlink to a directory", spec, lambda w: (w / "d").mkdir() or os.symlink("d", w / "s.json"))
    user = lambda text: (lambda w: (w / "u.jsonl").write_text(text))
    for label, text in {"wrong role": '{"messages": [{"role": "robot", "content": "hi"}]}\n',
                        "chat rows without a chat template": "".join(f'{{"messages": [{{"role": "user", "content": "q{i}"}}]}}\n' for i in range(40)),
                        "empty file": "", "too few rows": '{"prompt": "a b"}\n'}.items():
        add(f"new: bench --prompts {label}", ("bench", *M, "--prompts", "u.jsonl", "--prompts-per-domain", "1", "--max-new-tokens", "2",
                                              "--repeats", "1", "--peers", "", "--drafters", "", "--out", "b.json"), user(text))
        add(f"new: tune --prompts {label}", ("tune", *M, "--prompts", "u.jsonl", "--budget", "1", "--out", "t.json"), user(text))
    forty = user("".join(f'{{"prompt": "w{i} w{i + 1}"}}\n' for i in range(40)))
    for value in ("-1", str(10**12), "128"):
        add(f"new: generate --draft-vocab {value}", (*gen, "--draft-vocab", value))
    add("new: generate --kernels gpu", (*gen, "--kernels", "gpu"))
    for value in ("1e308", "inf", "-1"):
        add(f"new: tune --budget {value}", ("tune", *M, "--prompts", "u.jsonl", "--budget", value, "--out", "t.json"), forty)
    # masks and profiles with non-finite numbers
    add("mask show: NaN num_layers", ("mask", "show", "m.json"),
        lambda w: (w / "m.json").write_text('{"schema_version": 1, "num_layers": NaN, "attention": [], "mlp": []}'))
    found.extend(round_three_io(M, gen))
    found.extend(value_cases())
    return found


# ----- round three (issue 33), inputs and outputs: each name starting "io:" -----------------------------
def _fifo(name: str) -> Callable[[Path], None]:
    return lambda w: os.mkfifo(w / name)


def _modes(folder: str, files: int, dirs: int) -> Callable[[Path], str | None]:
    """Check: ``folder`` has mode ``dirs`` and every file in it ``files``."""
    def check(work: Path) -> str | None:
        top = work / folder
        wrong = [f"{p.name} {oct(p.stat().st_mode & 0o777)}" for p in top.iterdir() if p.stat().st_mode & 0o777 != files]
        if top.stat().st_mode & 0o777 != dirs:
            wrong.insert(0, f"{folder}/ {oct(top.stat().st_mode & 0o777)}")
        return f"modes {', '.join(wrong)} (want {oct(files)} / {oct(dirs)})" if wrong else None
    return check


def round_three_io(M: tuple[str, ...], gen: tuple[str, ...]) -> list[Case]:
    """Issue 33's classes 1-5 and 8 and the weak spots in their reach: an output onto an input or
    another output, a .log that is no Optuna journal, mask export merging into its file, the modes
    of steer shrink's files, a FIFO anywhere a file is read or written, an empty option value."""
    found: list[Case] = []

    def add(name, argv, plant=None, **more):
        found.append(Case(f"io: {name}", tuple(argv), plant, **more))

    # 1. an output onto an input (by name, ./name, a symlink, a hard link) or onto another output
    prompts = lambda w: (w / "p.jsonl").write_text('{"prompt": "w1 w2"}\n') and None  # None: `prompts(w) or more(w)`
    save = (*gen[:3], "--mask", "mask.json", "--prompts", "p.jsonl", "--max-new-tokens", "2", "--save-spec")
    for label, (value, plant) in {
        "the --prompts file": ("p.jsonl", prompts), "the --mask file": ("mask.json", prompts),
        "./ the --prompts file": ("./p.jsonl", prompts),
        "a symlink to the --prompts file": ("l.jsonl", lambda w: prompts(w) or os.symlink("p.jsonl", w / "l.jsonl")),
        "a hard link to the --mask file": ("h.json", lambda w: prompts(w) or os.link(w / "mask.json", w / "h.json")),
        "sub/.. the --mask file": ("sub/../mask.json", lambda w: prompts(w) or (w / "sub").mkdir()),
    }.items():
        add(f"generate --save-spec onto {label}", (*save, value), plant)
    forty = lambda w: (w / "u.jsonl").write_text("".join(f'{{"prompt": "w{i} w{i + 1}"}}\n' for i in range(40))) and None
    bench = ("bench", *M, "--prompts", "u.jsonl", "--prompts-per-domain", "1", "--max-new-tokens", "2", "--repeats", "1",
             "--no-peers", "--drafters", "", "--masks", "mask.json")
    add("bench --out onto the --prompts file", (*bench, "--out", "u.jsonl"), forty)
    add("bench --out onto the --masks file", (*bench, "--out", "mask.json"), forty)
    tune = ("tune", *M, "--prompts", "u.jsonl", "--budget", "1")
    add("tune --out onto its own default report", (*tune, "--out", "spec.md"), forty)
    add("tune --report onto the --prompts file", (*tune, "--out", "t.json", "--report", "u.jsonl"), forty)
    add("tune --report onto --out", (*tune, "--out", "t.json", "--report", "t.json"), forty)
    add("tune --report onto the --storage file", (*tune, "--out", "t.json", "--storage", "s.log", "--report", "s.log"),
        lambda w: forty(w) or (w / "s.log").write_text(""))
    add("mask export --out onto its input", ("mask", "export", "mask.json", "--format", "selfsd", "--key", "m", "--out", "mask.json"))
    add("mask import --out onto its input", ("mask", "import", "paper.json", "--format", "selfsd", "--key", "llama-2-13b",
                                             "--num-layers", "4", "--out", "paper.json"))
    add("knn build --out onto the --domain mask", ("knn", "build", *M, "--domain", "translation=mask.json", "--samples", "1",
                                                   "--out", "mask.json"))
    add("transfer --out-prefix onto the --mask file", ("transfer", *M, "--mask", "translation=mask.json", "--domains",
                                                      "translation", "--samples", "1", "--out-prefix", "mask"))
    add("steer shrink --out onto --model", ("steer", "shrink", "--model", "zero", "--keep-layers", "2", "--out", "zero"))
    add("steer eval --out onto --steering", ("steer", "eval", *M, "--steering", "steer.safetensors", "--domain", "translation",
                                            "--prompts", "1", "--max-new-tokens", "2", "--seeds", "1", "--out", "steer.safetensors"))

    # 2. a .log that is no Optuna journal: never opened as one, never "repaired"
    logs = {"a text .log": b"app started\nready\n", "a binary .log": bytes(range(256)) * 4,
            "a foreign JSON-lines .log": b'{"level": "info", "msg": "up"}\n',
            "a cut-off record only": b'{"op_code":0,"worker_id":"x', "text, then a record": b'app\n{"op_code":0,"worker_id":"x"}\n'}
    create = ("study", "create", "--name", "x", *M, "--strategy", "random", "--objective", "matchness", "--domain", "code",
              "--samples", "1", "--max-new-tokens", "2", "--storage")
    for label, data in logs.items():
        plant = lambda w, data=data: (w / "n.log").write_bytes(data)
        add(f"study create --storage {label}", (*create, "n.log"), plant)
        add(f"study list --storage {label}", ("study", "list", "--storage", "n.log"), plant)
        add(f"study run --storage {label}", ("study", "run", "--name", "x", "--storage", "n.log", "--trials", "1"), plant)
    add("study create --storage journal:/// of a text file", (*create, "journal:///n.log"), lambda w: (w / "n.log").write_text("app\n"))
    add("tune --storage a text .log", (*tune, "--out", "t.json", "--storage", "n.log"),
        lambda w: forty(w) or (w / "n.log").write_text("app started\n"))

    # 3. mask export onto an existing file of the format: merged (its other keys kept); onto another file: refused
    def merged(work: Path) -> str | None:
        data = json.loads((work / "paper.json").read_text())
        return None if set(data) == {"llama-2-13b", "mine"} else f"keys {sorted(data)} (want llama-2-13b and mine)"
    add("mask export --format selfsd merges into its file", ("mask", "export", "mask.json", "--format", "selfsd", "--key", "mine",
                                                           "--out", "paper.json"), check=merged)
    add("mask export --format selfsd onto a prompt file", ("mask", "export", "mask.json", "--format", "selfsd", "--key", "m",
                                                          "--out", "p.jsonl"), prompts)
    add("mask export --format knapspec (no key) onto a selfsd file", ("mask", "export", "mask.json", "--format", "knapspec",
                                                                     "--out", "paper.json"))

    # 4. steer shrink: the modes the user's umask gives, an existing empty folder's own kept
    shrink = ("steer", "shrink", *M, "--keep-layers", "2", "--out", "small")
    add("steer shrink under umask 022", shrink, umask=0o022, check=_modes("small", 0o644, 0o755))
    add("steer shrink under umask 077", shrink, umask=0o077, check=_modes("small", 0o600, 0o700))
    add("steer shrink into an empty 0700 folder", shrink, lambda w: (w / "small").mkdir(0o700), umask=0o022,
        check=_modes("small", 0o644, 0o700))

    # 5. a FIFO read or written: refused at once, never waited on
    fifo = _fifo("f.json")
    for label, argv in {
        "generate --spec": ("generate", "--spec", "f.json", "--prompt", "w1 w2"),
        "mask show": ("mask", "show", "f.json"),
        "generate --mask": (*gen, "--mask", "f.json"),
        "generate --router": (*gen, "--router", "f.json"),
        "generate --lookahead disco:": (*gen, "--skip-ratio", "0.5", "--lookahead", "disco:f.json"),
        "generate --profile": (*gen, "--skip-ratio", "0.5", "--profile", "f.json"),
        "generate --prompts": ("generate", *M, "--prompts", "f.json"),
        "generate --steering": (*gen, "--steering", "f.json"),
        "generate --save-spec": (*gen, "--save-spec", "f.json"),
        "bench --specs": ("bench", *M, "--specs", "f.json", "--domains", "code", "--skip-ratios", "", "--no-peers",
                          "--drafters", "", "--out", "b.json"),
        "bench --prompts": ("bench", *M, "--prompts", "f.json", "--no-peers", "--drafters", "", "--out", "b.json"),
        "bench --out": ("bench", *M, "--domains", "code", "--no-peers", "--drafters", "", "--out", "f.json"),
        "plot bench": ("plot", "bench", "f.json", "--out", "b.png"),
        "mask import": ("mask", "import", "f.json", "--format", "selfsd", "--num-layers", "4", "--out", "m2.json"),
        "mask create --out": ("mask", "create", *M, "--attention", "1", "--out", "f.json"),
        "knn build --domain": ("knn", "build", *M, "--domain", "translation=f.json", "--samples", "1", "--out", "k.json"),
        "steer eval --steering": ("steer", "eval", *M, "--steering", "f.json", "--domain", "translation", "--prompts", "1"),
        "disco train --rows": (*("disco", "train", *M, "--domain", "translation", "--val-prompts", "1", "--max-new-tokens", "2",
                                 "--out", "d_out.json"), "--rows", "f.json"),
        "tune --prompts": ("tune", *M, "--prompts", "f.json", "--budget", "1", "--out", "t.json"),
        "study create --prompts": ("study", "create", "--name", "x", *M, "--prompts", "f.json", "--strategy", "random",
                                   "--objective", "matchness", "--storage", "s.db"),
    }.items():
        add(f"FIFO as {label}", argv, fifo)
    add("FIFO as a steering file inside a spec", ("generate", "--spec", "steer_spec.json", "--prompt", "w1 w2"),
        lambda w: os.mkfifo(w / "s.fifo") or _edit_json(w / "steer_spec.json", steering="s.fifo"))
    add("FIFO as --model .gguf", ("generate", "--model", "f.gguf", "--prompt", "w1 w2"), _fifo("f.gguf"))
    add("FIFO as --storage .db", ("study", "list", "--storage", "f.db"), _fifo("f.db"))
    add("FIFO as --storage .log", (*create, "f.log"), _fifo("f.log"))
    add("FIFO as a model folder's config.json", ("generate", "--model", "cfg", "--prompt", "w1 w2"),
        lambda w: shutil.copytree(w / "model", w / "cfg") and ((w / "cfg" / "config.json").unlink() or os.mkfifo(w / "cfg" / "config.json")))

    # 8. an empty value: refused, never taken as the option left out
    empties = {
        "generate --spec ''": ("generate", "--spec", "", "--prompt", "w1 w2"),
        "generate --save-spec ''": (*gen, "--save-spec", ""),
        "generate --mask ''": (*gen, "--mask", ""),
        "generate --router ''": (*gen, "--router", ""),
        "generate --lookahead ''": (*gen, "--skip-ratio", "0.5", "--lookahead", ""),
        "generate --profile ''": (*gen, "--profile", ""),
        "generate --steering ' '": (*gen, "--steering", " "),
        "generate --device ''": (*gen, "--device", ""),
        "generate --prompt ''": ("generate", *M, "--prompt", ""),
        "bench --domains ''": ("bench", *M, "--domains", "", "--no-peers", "--drafters", "", "--out", "b.json"),
        "bench --prompts ''": ("bench", *M, "--prompts", "", "--out", "b.json"),
        "bench --profile ''": ("bench", *M, "--profile", "", "--out", "b.json"),
        "bench --spec-bench ''": ("bench", *M, "--spec-bench", "", "--out", "b.json"),
        "transfer --prompts ''": ("transfer", *M, "--mask", "translation=mask.json", "--prompts", ""),
        "transfer --mask ''": ("transfer", *M, "--mask", ""),
        "profile --contexts ''": ("profile", *M, "--contexts", "", "--out", "p.json"),
        "tune --name ''": (*tune, "--out", "t.json", "--name", ""),
        "study create --domain file:": ("study", "create", "--name", "x", *M, "--strategy", "random", "--objective", "matchness",
                                        "--domain", "file:", "--storage", "s.db"),
        "study list --storage ''": ("study", "list", "--storage", ""),
        "mask show ''": ("mask", "show", ""),
        "knn build --fallback ''": ("knn", "build", *M, "--domain", "translation=mask.json", "--fallback", "", "--out", "k.json"),
    }
    for label, argv in empties.items():
        add(f"empty value: {label}", argv, forty if "tune" in label else None)
    # also weak: a file where the model cache's folder must be (the embedded model converts into it)
    add("a file in place of the model cache folder", ("generate", "--prompt", "w1 w2", "--max-new-tokens", "1"),
        lambda w: (w / "cachefile").write_text("mine"), env=(("LAYERSEARCH_CACHE", "cachefile/sub"),))
    _models_cases(add, gen)
    return found


# ----- issue 33, classes 11 and 12 and their weak items (harden-models); names start "r3-models:" ---
def _model_copy(config: dict | None = None, weights: Callable[[dict], None] | None = None,
                files: dict[str, str] | None = None) -> Callable[[Path], None]:
    """Plant ``bad``: the good model folder with ``config`` merged into config.json, ``weights``
    applied to its tensors, ``files`` written into it."""
    def plant(work: Path) -> None:
        shutil.copytree(work / "model", work / "bad")
        if config:
            _edit_json(work / "bad" / "config.json", **config)
        if weights is not None:
            from safetensors.torch import load_file, save_file

            tensors = load_file(str(work / "bad" / "model.safetensors"))
            weights(tensors)
            save_file(tensors, str(work / "bad" / "model.safetensors"), metadata={"format": "pt"})
        for name, text in (files or {}).items():
            (work / "bad" / name).write_text(text)
    return plant


def _stray_weight(tensors: dict) -> None:
    import torch

    tensors["model.extra_head.weight"] = torch.zeros(4, 64)


def _small_gguf(layers_held: int = 1, layers_claimed: int | None = None, big: bool = False) -> bytes:
    """A complete small llama GGUF (no real model): ``layers_held`` layers of tensors, a block_count
    of ``layers_claimed`` (default: as held), with ``big`` a 4 MiB tensor."""
    import numpy as np
    from gguf import GGUFWriter

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.gguf"
        writer = GGUFWriter(path, "llama")
        writer.add_block_count(layers_held if layers_claimed is None else layers_claimed)
        writer.add_embedding_length(8)
        writer.add_token_list(["a", "b", "c", "d"])
        writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
        for index in range(layers_held):
            writer.add_tensor(f"blk.{index}.attn_norm.weight", np.ones(8, dtype=np.float32))
        if big:
            writer.add_tensor("blk.0.ffn_up.weight", np.ones((1024, 1024), dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path.read_bytes()


def _plant_conversion(work: Path, gguf_name: str, damage: bool = False, rewrite: bool = False) -> None:
    """Write a big GGUF file and put the good model folder in the cache (``work/cache``) as its
    conversion; ``damage``: garbage in the cached weights; ``rewrite``: then change one float in
    the middle of the GGUF in place and put its modification time back (a stale conversion)."""
    sys.path.insert(0, str(ROOT))
    from layersearch.models import loading

    gguf = work / gguf_name
    gguf.write_bytes(_small_gguf(big=True))
    saved = os.environ.get("LAYERSEARCH_CACHE")
    os.environ["LAYERSEARCH_CACHE"] = str(work / "cache")  # where the case will look (Case.env)
    try:
        target = loading.gguf_cache_dir(gguf)
    finally:
        os.environ.pop("LAYERSEARCH_CACHE") if saved is None else os.environ.update(LAYERSEARCH_CACHE=saved)
    shutil.copytree(work / "model", target)
    identity = {**loading._conversion_marker(gguf.resolve()), "source_path": str(gguf.resolve())}
    (target / loading._MARKER).write_text(json.dumps(
        {**identity, "source_stat": loading._stat_key(gguf), "source_sha256": loading._content_digest(gguf)}, sort_keys=True))
    if damage:
        (target / "model.safetensors").write_bytes(b"\xff" * 64)
    if rewrite:
        before = gguf.stat()
        with gguf.open("r+b") as handle:
            handle.seek(before.st_size // 2 // 4 * 4)
            handle.write(struct.pack("<f", 2.0))
        os.utime(gguf, ns=(before.st_atime_ns, before.st_mtime_ns))


def _models_cases(add: Callable[..., None], gen: tuple[str, ...]) -> None:
    """Config/weight disagreements (class 11) and the generic fallbacks (class 12) with the weak
    items next to them: spec errors that must name the spec file, options named as options, the
    conversion cache, tokenizer files, content parts, plot labels."""
    M = ("--model", "model")
    folders = {
        "config one layer short of its weights": _model_copy({"num_hidden_layers": 3}),
        "config one layer past its weights": _model_copy({"num_hidden_layers": 5}),
        "MLP width other than the weights'": _model_copy({"intermediate_size": 100}),
        "vocabulary other than the weights'": _model_copy({"vocab_size": 100}),
        "a weight deleted": _model_copy(weights=lambda t: t.pop("model.norm.weight")),
        "a stray weight added": _model_copy(weights=_stray_weight),
        "heads that do not divide the width": _model_copy({"num_attention_heads": 5}),
        "tokenizer.json malformed": _model_copy(files={"tokenizer.json": "{nope"}),
        "tokenizer.json of another shape": _model_copy(files={"tokenizer.json": '{"version": "1.0", "model": 5}'}),
    }
    prompt = ("--prompt", "w1 w2", "--max-new-tokens", "2")
    for label, plant in folders.items():
        add(f"r3-models: generate --model folder: {label}", ("generate", "--model", "bad", *prompt), plant)
        add(f"r3-models: generate --draft-model folder: {label}", (*gen, "--draft-model", "bad"), plant)
    for label in ("config one layer short of its weights", "config one layer past its weights"):
        add(f"r3-models: steer train --drafter: {label}", ("steer", "train", *M, "--drafter", "bad", "--domain", "translation",
                                                          "--prompts", "1", "--new-tokens", "2", "--steps", "1",
                                                          "--out", "s_out.safetensors"), folders[label])
    gguf = ("generate", "--model", "m.gguf", *prompt)
    nested = lambda depth: b"GGUF" + struct.pack("<IQQ", 3, 1, 2) + _kv("general.x", 9, struct.pack("<IQ", 9, 1) * (depth - 1)
                                                                      + struct.pack("<IQ", 4, 0)) \
        + _kv("general.architecture", 8, struct.pack("<Q", 5) + b"llama")
    for label, data in {"arrays nested 5000 deep": lambda: nested(5000), "arrays nested 50 deep": lambda: nested(50),
                        "block_count one short of its layers": lambda: _small_gguf(2, 1),
                        "block_count two short of its layers": lambda: _small_gguf(3, 1)}.items():
        add(f"r3-models: generate --model GGUF {label}", gguf, lambda w, data=data: (w / "m.gguf").write_bytes(data()))
        add(f"r3-models: generate --draft-model GGUF {label}", (*gen, "--draft-model", "m.gguf"),
            lambda w, data=data: (w / "m.gguf").write_bytes(data()))
    cache = (("LAYERSEARCH_CACHE", "cache"),)
    add("r3-models: GGUF conversion damaged in the cache", ("generate", "--model", "big.gguf", *prompt),
        lambda w: _plant_conversion(w, "big.gguf", damage=True), env=cache)
    # the stale conversion must be redone: "converting" said (the planted file then cannot convert: refused)
    add("r3-models: GGUF rewritten in place, mtime restored (stale conversion)", ("generate", "--model", "big.gguf", *prompt),
        lambda w: _plant_conversion(w, "big.gguf", rewrite=True), env=cache, expect_text="converting big.gguf")
    add("r3-models: GGUF conversion reused (control)", ("generate", "--model", "big.gguf", *prompt),
        lambda w: _plant_conversion(w, "big.gguf"), env=cache, expect_ok=True)
    # decoder specs: errors checked before the model load, naming the spec file
    spec = ("generate", "--spec", "s.json", "--prompt", "w1 w2", "--max-new-tokens", "2")
    bench = ("bench", *M, "--specs", "s.json", "--domains", "code", "--prompts-per-domain", "1", "--max-new-tokens", "2",
             "--repeats", "1", "--skip-ratios", "", "--no-peers", "--drafters", "", "--out", "b.json")
    specs = {
        "SWIFT setting unknown": lambda d: d.update(mask_source={"kind": "swift", "swift": {"bogus": 1}}),
        "SWIFT window zero": lambda d: d.update(mask_source={"kind": "swift", "swift": {"window": 0}}),
        "SWIFT kappa a string": lambda d: d.update(mask_source={"kind": "swift", "swift": {"kappa": "2"}}),
        "knapsack reselect_every zero": lambda d: d.update(mask_source={"kind": "knapsack", "reselect_every": 0}),
        "device tpu": lambda d: d["model"].update(device="tpu"),
        "device cuda:x": lambda d: d["model"].update(device="cuda:x"),
        "dtype float8": lambda d: d["model"].update(dtype="float8"),
        "dtype a number": lambda d: d["model"].update(dtype=16),
        "inline mask with a negative layer": lambda d: d["mask_source"]["mask"].update(attention=[-1]),
        "drafter vocab enormous": lambda d: d["drafter"].update(vocab=10**12),
        "another model's fingerprint": lambda d: d["model"]["info"].update(fingerprint="0123456789abcdef"),
    }
    for label, change in specs.items():
        plant = _spec_variant(change)
        add(f"r3-models: generate --spec {label}", spec, plant)
        if label not in ("another model's fingerprint",):
            add(f"r3-models: bench --specs {label}", bench, plant)
    # options named as options (never as the spec field they become)
    for option, value in (("--device", ""), ("--dtype", ""), ("--dtype", "float8"), ("--steering", ""), ("--profile", ""),
                          ("--max-new-tokens", "100000"), ("--draft-vocab", str(10**6))):
        add(f"r3-models: generate {option} {value!r}", (*gen, option, value))
    add("r3-models: bench --spec-bench --answers in a missing folder (before the model load)",
        ("bench", "--model", "mask.json", "--spec-bench", "prompts.jsonl", "--answers", "missing/a", "--skip-ratios", "0.5",
         "--out", "b.json"))
    add("r3-models: mask import: a negative layer index", ("mask", "import", "p.json", "--format", "selfsd", "--key", "m",
                                                           "--num-layers", "4", "--out", "o.json"),
        lambda w: (w / "p.json").write_text('{"m": {"attention": [-1], "mlp": [2]}}'))
    add("r3-models: profile with kernels gpu", (*gen, "--skip-ratio", "0.5", "--profile", "p.json"), _profile_with_kernels("gpu"))
    # prompt files: OpenAI-style content parts
    forty = lambda row: (lambda w: (w / "u.jsonl").write_text("".join(json.dumps(row).replace("Q", f"q{i}") + "\n"
                                                                     for i in range(40))))
    ub = ("bench", *M, "--prompts", "u.jsonl", "--prompts-per-domain", "1", "--max-new-tokens", "2", "--repeats", "1",
          "--no-peers", "--drafters", "", "--out", "b.json")
    for label, content in {"an image part": [{"type": "image_url", "image_url": {"url": "Q.png"}}],
                           "parts not objects": ["Q"], "a text part without text": [{"type": "text", "Q": 1}]}.items():
        add(f"r3-models: bench --prompts content {label}", ub, forty({"messages": [{"role": "user", "content": content}]}))
    # must work now: labels from user data drawn as text (matplotlib's mathtext would fail on them)
    add("r3-models: plot bench a domain named $x^{$ (must draw)", ("plot", "bench", "r.json", "--out", "r.png"),
        lambda w: (w / "r.json").write_text(json.dumps({"domains": {"$x^{$": {"rows": [
            {"config": "a $\\frac{$", "speedup": 1.2, "decode_speedup": 1.3}]}}})), expect_ok=True)
    add("r3-models: generate --mask knapsack (no FutureWarning)",
        (*gen, "--mask", "knapsack", "--profile", "p.json"), _profile_with_kernels("stock"), expect_ok=True)


def _kv(key: str, value_type: int, value: bytes) -> bytes:
    raw = key.encode()
    return struct.pack("<Q", len(raw)) + raw + struct.pack("<I", value_type) + value


def _spec_variant(change: Callable[[dict], None]) -> Callable[[Path], None]:
    """Plant ``s.json``: the spec ``generate --save-spec`` writes for the good mask, with ``change`` applied."""
    def plant(work: Path) -> None:
        if not _GOOD_SPEC:  # saved once (a model load), then copied: its paths are relative to the folder
            env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
            subprocess.run([sys.executable, "-m", "layersearch", "generate", "--model", "model", "--mask", "mask.json",
                            "--prompt", "w1 w2", "--max-new-tokens", "2", "--save-spec", "s.json"], cwd=work, env=env,
                           check=True, capture_output=True)
            _GOOD_SPEC.append((work / "s.json").read_text())
        data = json.loads(_GOOD_SPEC[0])
        change(data)
        (work / "s.json").write_text(json.dumps(data))
    return plant


_GOOD_SPEC: list[str] = []


def _profile_with_kernels(kernels: str) -> Callable[[Path], None]:
    """Plant ``p.json``: a latency profile of the good model naming ``kernels``."""
    def plant(work: Path) -> None:
        sys.path.insert(0, str(ROOT))
        from layersearch.masks.mask import ModelInfo
        from layersearch.profiling.profile import LatencyProfile

        info = ModelInfo.from_dict(json.loads((work / "mask.json").read_text())["model"])
        LatencyProfile(model=info, device="cpu", dtype="float32", torch_version="test", attention_slope=1e-7,
                       attention_intercept=2e-4, mlp_seconds=2e-4, base_seconds=3e-4,
                       verify_ratios=(1.0, 1.1, 1.2, 1.3)).save(work / "p.json")
        _edit_json(work / "p.json", kernels=kernels)
    return plant


# ----- issue 33, round three: values (each name starts "values:") ---------------------------------
_API = """import sys, torch, layersearch
from layersearch.common.errors import LayersearchError
try:
    {setup}
    {call}
except LayersearchError as exc:
    print(f"layersearch: error: {{exc}}", file=sys.stderr)
    sys.exit(2)
"""
_DECODER = ("from layersearch.decoder.spec import DecoderSpec, ModelSpec, ModelRef; "
            "d = layersearch.load_decoder(DecoderSpec(ModelSpec(ModelRef('model', True))))")


def _api(name: str, call: str, setup: str = _DECODER) -> Case:
    """A Python API call that must raise LayersearchError (printed as one line, exit 2)."""
    return Case(name, ("-c", _API.format(setup=setup, call=call)), api=True, expect="api")


def value_cases() -> list[Case]:
    """Issue 33's classes 6, 7, 9, 10, 13, 14, 15, the small prompt file and the weak spots of the values."""
    M = ("--model", "model")
    found: list[Case] = []

    def add(name, argv, plant=None, **kw):
        found.append(Case("values: " + name, tuple(argv), plant, **kw))

    rows = lambda name, text, n=40: (lambda w: (w / name).write_text("".join(text.replace("{i}", str(i)) + "\n" for i in range(n))))
    long_text = " ".join(["w1"] * 2100)  # a token per word (and per character): past the model's context of 2048
    long_rows = rows("long.jsonl", '{"prompt": "{i} ' + long_text + '"}')
    forty = rows("u.jsonl", '{"prompt": "w{i} w1"}')
    bench = ("bench", *M, "--prompts-per-domain", "1", "--max-new-tokens", "2", "--repeats", "1", "--no-peers", "--drafters", "",
             "--out", "b.json")
    tune = ("tune", *M, "--budget", "1", "--out", "t.json")
    create = ("study", "create", "--name", "v", *M, "--strategy", "random", "--objective", "matchness", "--samples", "1",
              "--max-new-tokens", "2", "--storage", "v.db")
    # 6: prompt + new tokens against the context, in every command and the API
    add("bench --prompts rows longer than the context", (*bench, "--prompts", "long.jsonl"), long_rows)
    add("bench --max-new-tokens 1000000", (*bench, "--prompts", "u.jsonl", "--max-new-tokens", "1000000"), forty)
    add("tune --max-new-tokens 100000", (*tune, "--prompts", "u.jsonl", "--max-new-tokens", "100000"), forty)
    add("tune --prompts rows longer than the context", (*tune, "--prompts", "long.jsonl"), long_rows)
    add("study create --max-new-tokens 1000000", (*create, "--domain", "translation", "--max-new-tokens", "1000000"))
    add("study create --prompts rows longer than the context", (*create, "--prompts", "long.jsonl"), long_rows)
    add("transfer --max-new-tokens 1000000", ("transfer", *M, "--mask", "translation=mask.json", "--samples", "1",
                                              "--max-new-tokens", "1000000", "--out-prefix", "tr"))
    add("bench --spec-bench question longer than the context",
        ("bench", *M, "--spec-bench", "q.jsonl", "--answers", "ans", "--skip-ratios", "0.5", "--max-new-tokens", "2", "--out", "b.json"),
        lambda w: (w / "q.jsonl").write_text(json.dumps({"question_id": 1, "category": "qa", "turns": [long_text]}) + "\n"))
    found.append(_api("values: API generate max_new_tokens=10**9", "d.generate('hi', max_new_tokens=10**9)"))
    found.append(_api("values: API a 3,000-message chat", "d.tokenizer.chat_template = \"{% for m in messages %}{{ m['content'] }} "
                      "{% endfor %}\"; d.generate([{'role': 'user', 'content': 'w1 w2'}] * 3000, max_new_tokens=2)"))
    # 7: a huge bench report is drawn bounded (a good input: it must finish, and say what it left out)
    add("plot bench a 100,000-row report", ("plot", "bench", "big.json", "--out", "big.png"),
        lambda w: (w / "big.json").write_text(json.dumps({"domains": {"code": {"rows": [
            {"config": f"c{i}", "speedup": 1 + i / 1e5, "decode_speedup": 1.0} for i in range(100_000)]}}})), expect="ok")
    # 9: text that is not valid Unicode: typed, in prompt rows, in questions, through the API
    add("generate --prompt with byte 0xff", ("generate", *M, "--prompt", "x \udcff y", "--max-new-tokens", "2"))
    surrogate = rows("s.jsonl", '{"prompt": "bad {i} \\ud800"}')
    add("bench --prompts a lone surrogate", (*bench, "--prompts", "s.jsonl"), surrogate)
    add("tune --prompts a lone surrogate", (*tune, "--prompts", "s.jsonl"), surrogate)
    add("study create --prompts a lone surrogate", (*create, "--prompts", "s.jsonl"), surrogate)
    add("transfer --prompts a lone surrogate", ("transfer", *M, "--mask", "translation=mask.json", "--prompts", "s.jsonl",
                                                "--samples", "1", "--max-new-tokens", "2", "--out-prefix", "tr"), surrogate)
    add("generate --prompts a lone surrogate", ("generate", *M, "--prompts", "s.jsonl", "--max-new-tokens", "2"), surrogate)
    add("bench --prompts a chat with a lone surrogate", (*bench, "--prompts", "c.jsonl"),
        rows("c.jsonl", '{"messages": [{"role": "user", "content": "{i} \\udfff"}]}'))
    add("bench --spec-bench a lone surrogate in a turn",
        ("bench", *M, "--spec-bench", "q.jsonl", "--answers", "ans", "--skip-ratios", "0.5", "--max-new-tokens", "2", "--out", "b.json"),
        lambda w: (w / "q.jsonl").write_text('{"question_id": 1, "category": "qa", "turns": ["bad \\ud800"]}\n'))
    found.append(_api("values: API generate a lone surrogate", "d.generate('bad \\ud800', max_new_tokens=2)"))
    found.append(_api("values: API chat content a lone surrogate", "d.generate([{'role': 'user', 'content': '\\udc80'}], 2)"))
    # 10: --threads bounded by the machine, in the shared option check
    for value in ("100000", str(2**63), "-3"):
        add(f"generate --threads {value}", ("generate", *M, "--prompt", "w1", "--max-new-tokens", "2", "--threads", value))
    add("bench --threads 100000", (*bench, "--prompts", "u.jsonl", "--threads", "100000"), forty)
    add("steer shrink --threads 9223372036854775808", ("steer", "shrink", *M, "--keep-layers", "2", "--out", "small",
                                                        "--threads", str(2**63)))
    # 13: infinities in every float option and every number read from a file
    gen = ("generate", *M, "--prompt", "w1", "--max-new-tokens", "2")
    for option in ("--swift-kappa", "--swift-target", "--swift-tolerance"):
        add(f"generate {option} inf", (*gen, "--on-the-fly", "swift", option, "inf"))
    add("study create --kappa inf", (*create, "--domain", "translation", "--strategy", "selfsd-bo", "--kappa", "inf"))
    add("study run --timeout inf", ("study", "run", "--name", "v", "--storage", "v.db", "--timeout", "inf"))
    add("tune --budget -inf", (*tune[:3], "--budget=-inf", "--out", "t.json", "--prompts", "u.jsonl"), forty)
    report = {"domains": {"code": {"rows": [{"config": "plain generate", "speedup": 1.0, "decode_speedup": 1.0}]}}}
    for label, text in {"Infinity speedup": json.dumps(report).replace("1.0,", "Infinity,", 1),
                        "1e999 speedup": json.dumps(report).replace("1.0,", "1e999,", 1),
                        "schema_version 99": json.dumps({**report, "schema_version": 99}),
                        "no object": "[]"}.items():
        add(f"plot bench {label}", ("plot", "bench", "r.json", "--out", "r.png"), lambda w, text=text: (w / "r.json").write_text(text))
    add("mask show: Infinity num_layers", ("mask", "show", "m.json"),
        lambda w: (w / "m.json").write_text('{"schema_version": 1, "num_layers": Infinity, "attention": [], "mlp": []}'))
    # 14: the Python API validates its arguments
    for label, call in {"load_decoder(123)": "layersearch.load_decoder(123)", "load_decoder(None)": "layersearch.load_decoder(None)",
                        "load_decoder(dict)": "layersearch.load_decoder(dict)", "load_decoder('')": "layersearch.load_decoder('')",
                        "load_decoder(kernels='gpu')": "layersearch.load_decoder('s.json', kernels='gpu')"}.items():
        found.append(_api(f"values: API {label}", call, setup="pass"))
    found.append(_api("values: API model=(None, None)", "layersearch.load_decoder(DecoderSpec(ModelSpec(ModelRef('model', True))), "
                      "model=(None, None))", setup="from layersearch.decoder.spec import DecoderSpec, ModelSpec, ModelRef"))
    for label, call in {"generate([10**12])": "d.generate([10**12], 2)", "generate([-1])": "d.generate([-1], 2)",
                        "a float id tensor": "d.generate(torch.tensor([[1.0, 2.0]]), 2)",
                        "a 3-D id tensor": "d.generate(torch.ones(1, 2, 3, dtype=torch.long), 2)",
                        "a batch of two prompts": "d.generate(torch.ones(2, 3, dtype=torch.long), 2)",
                        "bytes": "d.generate(b'abc', 2)", "do_sample='yes'": "d.generate('hi', 2, do_sample='yes')",
                        "a streamer without put": "d.generate('hi', 2, streamer=object())",
                        "max_new_tokens=True": "d.generate('hi', True)", "max_new_tokens=2.5": "d.generate('hi', 2.5)",
                        "temperature=inf": "d.generate('hi', 2, do_sample=True, temperature=float('inf'))",
                        "top_p=0": "d.generate('hi', 2, top_p=0)", "seed=-1": "d.generate('hi', 2, seed=-1)",
                        "an empty prompt": "d.generate([], 2)"}.items():
        found.append(_api(f"values: API {label}", call))
    # 15: Ctrl-C during a search: "interrupted", no traceback
    add("tune interrupted by Ctrl-C", (*tune, "--prompts", "u.jsonl", "--budget", "60", "--max-new-tokens", "4"), forty,
        expect="interrupt", interrupt_on="searching for")
    # small files are normal: a first tune on 12 prompts runs (its counts adapted and said)
    add("tune on a 12-prompt file", (*tune, "--prompts", "u.jsonl", "--max-new-tokens", "2", "--finalists", "1", "--repeats", "1"),
        rows("u.jsonl", '{"prompt": "w{i} w2"}', 12), expect="ok")
    add("tune on a 1-prompt file", (*tune, "--prompts", "u.jsonl"), rows("u.jsonl", '{"prompt": "w1 w2"}', 1))
    # the weak spots of the values
    add("bench --drafters model:MODEL@int4", (*bench, "--prompts", "u.jsonl", "--drafters", "model:smollm2-135m@int4"), forty)
    spec = lambda change: (lambda w: (w / "s.json").write_text(json.dumps(change(_good_spec(w)))))
    add("generate --spec format true", ("generate", "--spec", "s.json", "--prompt", "w1", "--max-new-tokens", "2"),
        spec(lambda d: {**d, "format": True}))
    add("generate --spec info.num_layers wrong", ("generate", "--spec", "s.json", "--prompt", "w1", "--max-new-tokens", "2"),
        spec(lambda d: {**d, "model": {**d["model"], "info": {**d["model"]["info"], "num_layers": 5}}}))
    return found


def _good_spec(work: Path) -> dict:
    """A good decoder spec of the working folder's model (written by generate --save-spec)."""
    from layersearch.cli import main as cli

    old = os.getcwd()
    os.chdir(work)
    try:
        assert cli(["generate", "--model", "model", "--prompt", "w1", "--max-new-tokens", "1", "--save-spec", "good.json"]) == 0
        data = json.loads(Path("good.json").read_text())
        os.unlink("good.json")
    finally:
        os.chdir(old)
    return data


# ----- running ----------------------------------------------------------------------------------
def snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` with its content's digest."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            rel = os.path.relpath(path, folder)
            if path.is_dir() or not path.is_file():  # a FIFO: reading it would wait forever
                found[rel] = "dir" if path.is_dir() else "special"
            else:
                found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@dataclass(frozen=True)
class Result:
    """What one case did."""

    case: str
    status: int | None
    seconds: float
    stderr: str
    changed: tuple[str, ...]
    cpu_seconds: float = 0.0  # user + system time of the process: its work, whatever the machine's load
    good: bool = False  # a good command (Case.check): exit 0 expected, its changes are its output
    wrong: str | None = None  # what its check found wrong
    expect_ok: bool = False  # the case must succeed (see Case.expect_ok)
    expect_text: str | None = None  # see Case.expect_text
    expect: str = "refused"  # the case's expectation (Case.expect)

    def problems(self, slow: float) -> list[str]:
        """The rules this case broke; ``slow``: the CPU seconds a refusal may take (wall time
        over ``slow`` is reported as ``over-10s-wall``: on a shared machine it is mostly waiting)."""
        found = []
        if self.expect_ok:  # must work: any failure is counted by its kind, outputs are expected
            if "Traceback" in self.stderr:
                found.append("traceback")
            if MARKER in self.stderr:
                found.append("internal-error")
            if self.status != 0:
                found.append(f"status-{self.status}")
            elif "Warning" in self.stderr:  # a library's warning leaking to the user
                found.append("not-one-line")
            return found
        if self.expect_text is not None:
            if "Traceback" in self.stderr:
                found.append("traceback")
            if self.status != 2:
                found.append("exit-0" if self.status == 0 else f"status-{self.status}")
            elif self.expect_text not in self.stderr:
                found.append("not-one-line")  # refused, but not for the reason the case is about
            if self.changed:
                found.append("leftover")
            return found
        if "Traceback" in self.stderr:
            found.append("traceback")
        if MARKER in self.stderr:
            found.append("internal-error")
        if self.good:  # its exit 0 and its output are the point: only its result is judged
            if self.status != 0:
                found.append(f"status-{self.status}")
            elif self.wrong:
                found.append("wrong-result")
            return found
        if self.expect == "interrupt":  # exit 130 after Ctrl-C; progress lines before it are fine
            if self.status != 130:
                found.append(f"status-{self.status}")
            if not self.stderr.strip().endswith("layersearch: interrupted"):
                found.append("not-one-line")
            return found
        if self.expect == "api":  # a script's LayersearchError, printed as its last line (loading bars may come first)
            if self.status != 2:
                found.append("exit-0" if self.status == 0 else f"status-{self.status}")
            if not (self.stderr.strip().splitlines() or [""])[-1].startswith("layersearch: error: "):
                found.append("not-one-line")
            if self.changed:
                found.append("leftover")
            return found
        if self.expect == "ok":  # a large good input: it finishes, bounded, and may leave its output
            if self.status != 0:
                found.append(f"status-{self.status}")
            if self.cpu_seconds > slow or self.status is None:
                found.append("slow")
            return found
        if self.status == 0:
            found.append("exit-0")
        elif self.status != 2:
            found.append(f"status-{self.status}")
        lines = self.stderr.strip().splitlines()
        if self.status == 2 and (len(lines) != 1 or not lines[0].startswith("layersearch: error: ")):
            found.append("not-one-line")
        if self.changed:
            found.append("leftover")
        if self.cpu_seconds > slow or self.status is None:
            found.append("slow")
        if self.seconds > slow:
            found.append("over-10s-wall")
        return found


def run_case(case: Case, base: Path, scratch: Path, timeout: float) -> Result:
    """Run one case in a fresh copy of ``base``."""
    work = scratch / "work"
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(base, work)
    if case.plant:
        case.plant(work)
    before = snapshot(work)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **{k: str(work / v) for k, v in case.env}}
    env.pop(MARKER, None)
    argv = [sys.executable, *case.argv] if case.api else [sys.executable, "-m", "layersearch", *case.argv]
    umask = None if case.umask is None else (lambda: os.umask(case.umask))
    start, cpu_start = time.perf_counter(), _children_cpu()
    if case.expect == "interrupt":
        status, stderr = _interrupted(argv, work, env, timeout, case.interrupt_on)
    else:
        try:
            proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=timeout, preexec_fn=umask)
            status, stderr = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as exc:
            status, stderr = None, (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu_start
    after = snapshot(work)
    changed = tuple(sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)))
    if case.check is not None:
        wrong = case.check(work) if status == 0 else None
        return Result(case.name, status, seconds, stderr, (), cpu, good=True, wrong=wrong)
    return Result(case.name, status, seconds, stderr, changed, cpu, expect_ok=case.expect_ok,
                  expect_text=case.expect_text, expect=case.expect)


def _interrupted(argv: list[str], work: Path, env: dict, timeout: float, when: str) -> tuple[int | None, str]:
    """Run ``argv``, send SIGINT once its stderr shows ``when`` (as Ctrl-C would), and return
    (status, stderr); None when it did not end within ``timeout``."""
    import signal
    import threading

    # SIGINT restored: a pass started in the background (``&``) passes SIGINT on ignored, and
    # Python then never raises KeyboardInterrupt; a user's terminal has it.
    proc = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)
            if when in line and proc.poll() is None:
                time.sleep(1.0)  # inside the search, not at its first line
                proc.send_signal(signal.SIGINT)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        status = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        status = None
    reader.join(5)
    return status, "".join(lines)


def _children_cpu() -> float:
    """User + system seconds of every child waited for so far (one runs at a time)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


COUNTS = ("traceback", "internal-error", "exit-0", "other-status", "not-one-line", "leftover", "slow", "wrong-result",
          "over-10s-wall")

#: A good command that loads the model and decodes one token: the floor every model-loading
#: refusal pays on this machine (interpreter, torch and transformers imports, the model load).
FLOOR_ARGV = ("generate", "--model", "model", "--prompt", "w1 w2", "--max-new-tokens", "1", "--baseline")


def floor_seconds(base: Path, scratch: Path, timeout: float) -> tuple[float, float]:
    """Wall and CPU seconds of :data:`FLOOR_ARGV` (a success, so it measures start-up, not a refusal)."""
    result = run_case(Case("floor", FLOOR_ARGV), base, scratch, timeout)
    return result.seconds, result.cpu_seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a case is killed (default 60)")
    parser.add_argument("--slow", type=float, default=10.0, help="a refusal slower than this counts as slow (default 10)")
    parser.add_argument("--json", help="write the counts and failing cases here")
    parser.add_argument("--list", action="store_true", help="list the cases and stop")
    args = parser.parse_args()
    selected = [c for c in cases() if args.only in c.name]
    if args.list:
        print("\n".join(c.name for c in selected))
        return 0
    counts = dict.fromkeys(COUNTS, 0)
    failing, times, cpus, slowest = [], [], [], ""
    with tempfile.TemporaryDirectory(prefix="hostile-") as scratch:
        base = Path(scratch) / "base"
        base.mkdir()
        build_base(base)
        floors = []
        for number, case in enumerate(selected, 1):
            if number % 25 == 1:  # the machine's load drifts: measure the floor again now and then
                floors.append(floor_seconds(base, Path(scratch), args.timeout))
                print(f"start-up floor: {floors[-1][0]:.1f}s wall, {floors[-1][1]:.1f}s CPU", flush=True)
            result = run_case(case, base, Path(scratch), args.timeout)
            problems = result.problems(args.slow)
            for problem in problems:
                counts["other-status" if problem.startswith("status-") else problem] += 1
            problems = [p for p in problems if p != "over-10s-wall"]  # reported, not a failure by itself
            if problems:
                last = (result.wrong or (result.stderr.strip().splitlines() or [""])[-1])[:200]
                failing.append({"case": case.name, "problems": problems, "status": result.status,
                                "seconds": round(result.seconds, 1), "stderr": last, "changed": list(result.changed)})
                print(f"[{number}/{len(selected)}] FAIL {case.name}: {', '.join(problems)} "
                      f"({result.seconds:.1f}s, {result.cpu_seconds:.1f}s CPU) "
                      f"{last}{' changed ' + ', '.join(result.changed) if result.changed else ''}", flush=True)
            else:
                print(f"[{number}/{len(selected)}] ok   {case.name} ({result.seconds:.1f}s, {result.cpu_seconds:.1f}s CPU)",
                      flush=True)
            times.append(result.seconds)
            cpus.append(result.cpu_seconds)
            if result.cpu_seconds >= max(cpus):
                slowest = case.name
    print(f"{len(selected)} cases: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    walls, floor_cpus = [f[0] for f in floors], [f[1] for f in floors]
    print(f"start-up floor (a good model-loading command): {min(walls):.1f}-{max(walls):.1f}s wall, "
          f"{min(floor_cpus):.1f}-{max(floor_cpus):.1f}s CPU; refusals: longest wall {max(times):.1f}s, "
          f"most CPU {max(cpus):.1f}s ({slowest})")
    if args.json:
        Path(args.json).write_text(json.dumps({"cases": len(selected), "counts": counts, "floors": floors,
                                               "max_wall": max(times), "max_cpu": [slowest, max(cpus)],
                                               "failing": failing}, indent=2) + "\n")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
