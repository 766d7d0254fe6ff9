"""Every command against a table of bad inputs: one ``layersearch: error:`` line, exit 2, no
traceback, and not one byte changed in the working folder (no output created or replaced, no
storage or study touched).

A command joins by adding one :class:`Command` to :data:`COMMANDS`: its argv with
placeholders (``{mask}``, ``{out}``, ``{storage}``...) for the inputs it takes, and arguments
it must refuse. :func:`test_every_command_is_in_the_table` fails when a command of
``layersearch --help`` is missing here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import pytest

from layersearch.cli import build_parser, main
from layersearch.models.tiny import build_tiny_model

MODEL = "{model}"
#: A placeholder, alone or after a source prefix (``router:{router}``, as ``generate --mask`` takes it).
SLOT = re.compile(r"([a-z]+:)?\{(\w+)\}")


@dataclass(frozen=True)
class Command:
    """One leaf command: argv with placeholders, and bad argument lists to try as well."""

    argv: tuple[str, ...]
    bad_args: tuple[tuple[str, ...], ...] = ()
    #: placeholder -> kind of bad values tried there (default: the placeholder's own name)
    kinds: dict[str, str] = field(default_factory=dict)

    def slots(self) -> list[str]:
        return [match[2] for part in self.argv if part != MODEL and (match := SLOT.fullmatch(part))]


NUMBERS = (("--threads", "0"), ("--max-new-tokens", "0"))
COMMANDS: dict[str, Command] = {
    "generate": Command(
        ("generate", "--model", MODEL, "--mask", "{mask}", "--prompts", "{prompts}", "--max-new-tokens", "2"),
        NUMBERS + (("--temperature", "inf"), ("--temperature", "1", "--seed", str(2**80)), ("--top-p", "0"),
                   ("--max-draft", "0"), ("--draft-threshold", "2"), ("--max-new-tokens", "100000"), ("--temperature", "nan"),
                   ("--top-p", "nan"), ("--seed", "-1"), ("--seed", str(2**40)), ("--draft-threshold", "nan"),
                   ("--max-draft", "100000"), ("--threads", "-1"), ("--temperature", "1", "--top-k", "-1"),
                   ("--kernels", "gpu"), ("--kernels", "NUMBA")),
    ),
    # FR-Spec's reduced draft head: no mask option, so each refusal is the --draft-vocab value's.
    "generate --draft-vocab": Command(
        ("generate", "--model", MODEL, "--prompt", "w1 w2", "--max-new-tokens", "2"),
        (("--draft-vocab", "-1"), ("--draft-vocab", str(10**12)), ("--draft-vocab", "128"), ("--draft-vocab", "4", "--baseline"),
         ("--draft-vocab", "4", "--drafter", "prompt-lookup"), ("--draft-vocab", "x"), ("--draft-vocab", "4", "--kernels", "gpu")),
    ),
    "generate --profile": Command(
        ("generate", "--model", MODEL, "--mask", "uniform:0.5", "--prompt", "w1 w2", "--profile", "{profile}",
         "--max-new-tokens", "2"), (("--mask", "uniform:1.5"),),
    ),
    # The mask sources of generate's one --mask option: a bad value of each is one line.
    "generate --mask uniform": Command(
        ("generate", "--model", MODEL, "--mask", "uniform:0.5", "--prompt", "w1 w2", "--max-new-tokens", "2"),
        (("--mask", "uniform:"), ("--mask", "uniform:x"), ("--mask", "uniform:nan"), ("--mask", "uniform:-0.1"),
         ("--mask", "knapsack:2"), ("--mask", "router:"), ("--mask", "swift:"), ("--baseline",)),
    ),
    # SWIFT on the fly.
    "generate --mask swift": Command(
        ("generate", "--model", MODEL, "--mask", "swift", "--prompts", "{prompts}", "--max-new-tokens", "2"),
        (("--swift-window", "0"), ("--swift-target", "2"), ("--swift-kappa", "-1"), ("--swift-patience", "0"),
         ("--swift-bo-interval", "0"), ("--mask", "swift:1.5"), ("--mask", "swift:x"), ("--swift-min-skip-ratio", "0.9"),
         ("--baseline",)),
    ),
    "swift stream": Command(
        ("swift", "stream", "--model", MODEL, "--domains", "translation", "--per-domain", "1", "--max-new-tokens", "2",
         "--search-trials", "0", "--search-prompts", "1", "--methods", "plain,swift", "--out", "{out}", "--plot", "{png}"),
        NUMBERS + (("--per-domain", "0"), ("--domains", "nope"), ("--domains", ","), ("--methods", "magic"),
                   ("--search-trials", "-1"), ("--swift-window", "0"), ("--skip-ratio", "2"), ("--max-draft", "0")),
    ),
    "mask create": Command(("mask", "create", "--model", MODEL, "--attention", "1", "--out", "{out}"),
                           (("--attention", "1,x"), ("--attention", "99"), ("--mlp", "1,1"))),
    "mask show": Command(("mask", "show", "{mask}")),
    "mask import": Command(("mask", "import", "{paper}", "--format", "selfsd", "--key", "m", "--num-layers", "4", "--out", "{out}"),
                           (("--key", "nope"), ("--num-layers", "2"), ("--format", "nope")), kinds={"paper": "prompts"}),
    "mask export": Command(("mask", "export", "{mask}", "--format", "selfsd", "--key", "m", "--out", "{out}"),
                           (("--format", "nope"),)),
    # DISCO's commands (their --out is checked before any work, like every command's).
    "disco collect": Command(
        ("disco", "collect", "--model", MODEL, "--domain", "translation", "--prompts", "1", "--max-new-tokens", "2",
         "--out", "{out}"),
        (("--prompts", "0"), ("--domain", "nope"), ("--max-draft", "0"), ("--threads", "0"), ("--seed", "-1"),
         ("--seed", str(2**80)), ("--skip-ratio", "nan"), ("--skip-ratio", "inf"), ("--skip-ratio", "1"),
         ("--max-new-tokens", str(10**9))),
    ),
    "disco train": Command(
        ("disco", "train", "--model", MODEL, "--domain", "translation", "--train-prompts", "1", "--val-prompts", "1",
         "--max-new-tokens", "2", "--out", "{out}"),
        (("--train-prompts", "0"), ("--domain", "nope"), ("--max-draft", "0"), ("--rows", "missing.npz"),
         ("--max-draft", "100000"), ("--max-draft", "65"), ("--seed", "-5"), ("--skip-ratio", "-0.1")),
    ),
    "disco train --rows": Command(
        ("disco", "train", "--model", MODEL, "--domain", "translation", "--val-prompts", "1", "--max-new-tokens", "2",
         "--rows", "{rows}", "--out", "disco_out.json"),
    ),
    "disco bench": Command(
        ("disco", "bench", "--model", MODEL, "--domains", "translation", "--train-prompts", "1", "--val-prompts", "1",
         "--test-prompts", "1", "--max-new-tokens", "2", "--out", "{out}"),
        (("--test-prompts", "0"), ("--domains", ","), ("--max-draft", "0"), ("--repeats", "0"), ("--max-draft", "100000")),
    ),
    "generate --lookahead disco": Command(
        ("generate", "--model", MODEL, "--mask", "uniform:0.5", "--lookahead", "{disco}", "--prompt", "w1 w2",
         "--max-new-tokens", "2"),
    ),
    "transfer": Command(
        ("transfer", "--model", MODEL, "--mask", "translation={mask}", "--domains", "translation", "--samples", "1",
         "--max-new-tokens", "2", "--out-prefix", "{prefix}"),
        NUMBERS + (("--samples", "0"), ("--domains", "nope"), ("--split", "dev"), ("--repeats", "0")),
    ),
    # KNN-SSD: a mask file is no router, so every router case fails; the mask slots try the bad files.
    "knn build": Command(
        ("knn", "build", "--model", MODEL, "--domain", "translation=mask.json", "--samples", "1", "--fallback", "{mask}",
         "--out", "{out}"),
        (("--samples", "0"), ("--clusters", "2"), ("--anchors", "0"), ("--threshold-margin", "-1"), ("--domain", "nope=mask.json"),
         ("--domain", "translation"), ("--domain", "translation=study:"), ("--domain", "translation=study:absent@studies.db"),
         ("--pca", "out.jpg"), ("--seed", "-1"), ("--seed", str(2**40)), ("--threshold-margin", "nan"),
         ("--threshold-margin", "inf"), ("--pca", "missing/p.png")),
    ),
    "knn bench": Command(
        ("knn", "bench", "--model", MODEL, "--router", "{mask}", "--instances", "2", "--out", "{out}"),
        (("--instances", "0"), ("--mix-ratios", "0,x"), ("--mix-ratios", "1.5"), ("--mix-ratios", ","), ("--test-prompts", "0"),
         ("--max-draft", "0"), ("--plot", "out.jpg"), ("--routing-prompts", "0", "--pca", "p.png"), ("--ood-domains", "math"),
         ("--pca", "p.png")),
    ),
    "knn bench --router": Command(
        ("knn", "bench", "--model", MODEL, "--router", "{router}", "--instances", "2", "--out", "{out}"),
        (("--seed", "-1"), ("--seed", str(2**80)), ("--draft-threshold", "nan"), ("--max-draft", str(10**9)),
         ("--mix-ratios", "nan"), ("--plot", "missing/plot.png")),
    ),
    "generate --mask router file": Command(
        ("generate", "--model", MODEL, "--mask", "router:{router}", "--prompt", "w1 w2", "--max-new-tokens", "2"),
    ),
    "generate --mask router": Command(
        ("generate", "--model", MODEL, "--mask", "router:{mask}", "--prompt", "w1 w2", "--max-new-tokens", "2"),
        (("--baseline",),),
    ),
    "profile": Command(("profile", "--model", MODEL, "--contexts", "8", "--repeats", "1", "--out", "{out}"),
                       (("--threads", "0"), ("--repeats", "0"), ("--contexts", "0"), ("--contexts", "100000"))),
    "profile --validate": Command(
        ("profile", "--model", MODEL, "--validate", "{profile}", "--contexts", "8", "--repeats", "1", "--masks",
         "uniform:0.5", "--out", "{out}"),
        (("--masks", "uniform:2"), ("--masks", "uniform:x"), ("--masks", "nope.json"), ("--repeats", "0"),
         ("--contexts", "0")),
        kinds={"profile": "existing_profile"},
    ),
    "bench": Command(
        ("bench", "--model", MODEL, "--domains", "translation", "--prompts-per-domain", "1", "--max-new-tokens", "2",
         "--repeats", "1", "--skip-ratios", "0.5", "--peers", "", "--drafters", "", "--profile", "{profile}",
         "--masks", "{mask}", "--out", "{out}"),
        NUMBERS + (("--repeats", "0"), ("--prompts-per-domain", "0"), ("--skip-ratios", "x"), ("--domains", "nope")),
    ),
    "demo": Command(("demo", "--model", MODEL), NUMBERS + (("--budget", "0"), ("--budget", "nan"))),
    "tune": Command(
        ("tune", "--model", MODEL, "--prompts", "{user_prompts}", "--budget", "1", "--out", "{out}", "--storage", "{storage}"),
        NUMBERS + (("--budget", "0"), ("--budget", "nan"), ("--train-prompts", "0"), ("--repeats", "0"),
                   ("--report", "report.md/x.md"), ("--name", "no/such name"), ("--budget", "inf"),
                   ("--budget", "-1"), ("--budget", "1e308"), ("--budget=-inf",),
                   # the vLLM export's folder: a file, a folder holding anything, one that takes no file
                   ("--export-vllm", "mask.json"), ("--export-vllm", "draft"), ("--export-vllm", "/proc"),
                   ("--export-vllm", "mask.json/x"), ("--export-vllm", "vllm_out", "--model", "no_such_folder/model")),
        kinds={"storage": "new_storage"},
    ),
    "study create": Command(
        ("study", "create", "--name", "{name}", "--model", MODEL, "--domain", "translation", "--strategy", "random", "--objective", "matchness",
         "--samples", "1", "--max-new-tokens", "2", "--profile", "{profile}", "--storage", "{storage}"),
        (("--seed", str(2**40)), ("--samples", "0"), ("--strategy", "nope"), ("--skip-ratio", "2")),
        kinds={"storage": "new_storage", "name": "new_name"},
    ),
    "study create --preset": Command(
        ("study", "create", "--name", "{name}", "--model", MODEL, "--domain", "translation", "--strategy", "selfsd-bo",
         "--preset", "paper", "--samples", "1", "--max-new-tokens", "2", "--profile", "{profile}", "--storage", "{storage}"),
        (("--kappa", "-1"), ("--n-startup-trials", "-1"), ("--kernel", "cubic"), ("--preset", "nope"), ("--bo-interval", "3"),
         ("--strategy", "random")),
        kinds={"storage": "new_storage", "name": "new_name"},
    ),
    "study run": Command(("study", "run", "--name", "{name}", "--storage", "{storage}", "--trials", "1", "--quiet"),
                         (("--trials", "0"), ("--timeout", "-1"), ("--heartbeat", "0"), ("--threads", "0"))),
    "study list": Command(("study", "list", "--storage", "{storage}")),
    "study show": Command(("study", "show", "--name", "{name}", "--storage", "{storage}")),
    "study export": Command(("study", "export", "--name", "{name}", "--storage", "{storage}", "--out", "{out}"),
                            (("--trial", "x"), ("--trial", "99"))),
    "study compare": Command(("study", "compare", "{name}", "--storage", "{storage}", "--no-measure", "--out-prefix", "{prefix}"),
                             (("--repeats", "0"),)),
    "study head-to-head": Command(
        ("study", "head-to-head", "--model", MODEL, "--domain", "translation", "--budget", "1", "--samples", "1",
         "--max-new-tokens", "2", "--prefix", "h2h", "--profile", "{profile}", "--storage", "{storage}",
         "--out-prefix", "{prefix}"),
        (("--budget", "0"), ("--strategies", "swift,swift"), ("--random-objective", "nope")),
        kinds={"storage": "new_storage"},
    ),
    "plot mask": Command(("plot", "mask", "{mask}", "--out", "{png}")),
    "plot history": Command(("plot", "history", "--name", "{name}", "--storage", "{storage}", "--out", "{png}")),
    "plot compare": Command(("plot", "compare", "--names", "{name}", "--storage", "{storage}", "--out", "{png}")),
    "plot bench": Command(("plot", "bench", "{bench_report}", "--out", "{png}")),
    # SD² steering.
    "steer train": Command(
        ("steer", "train", "--model", MODEL, "--mask", "{mask}", "--domain", "translation", "--prompts", "1",
         "--new-tokens", "2", "--steps", "1", "--out", "{out}"),
        (("--prompts", "0"), ("--domain", "nope"), ("--steps", "0"), ("--lr", "0"), ("--max-offset", "0"), ("--val-prompts", "-1"),
         ("--threads", "0"), ("--finetune-drafter", "tuned"), ("--drafter-lr", "1e-4"), ("--lr", "inf"), ("--lr", "nan"),
         ("--lr", "-1"), ("--lr", "1e30"), ("--seed", str(2**80)), ("--seed", "-1"), ("--new-tokens", str(10**9)),
         ("--max-offset", str(10**12)), ("--out", "a/b/c.safetensors"), ("--out", "missing/steer.safetensors")),
    ),
    "steer train --drafter": Command(
        ("steer", "train", "--model", MODEL, "--drafter", "{draft_model}", "--domain", "translation", "--prompts", "1",
         "--new-tokens", "2", "--steps", "1", "--out", "steer_out.safetensors"),
        (("--finetune-drafter", "missing/tuned"), ("--finetune-drafter", "tuned", "--drafter-lr", "inf")),
        kinds={"draft_model": "draft_model"},
    ),
    "steer shrink": Command(
        ("steer", "shrink", "--model", MODEL, "--keep-layers", "2", "--out", "{model_out}"),
        (("--keep-layers", "1"), ("--keep-layers", "4"), ("--threads", "0")),
    ),
    "steer eval": Command(
        ("steer", "eval", "--model", MODEL, "--steering", "{steering}", "--domain", "translation", "--prompts", "1",
         "--max-new-tokens", "2", "--seeds", "1"),
        (("--prompts", "0"), ("--seeds", "0"), ("--domain", "nope"), ("--max-draft", "0"), ("--drafter", "nope"),
         ("--seed", "-1"), ("--seeds", str(10**9)), ("--max-new-tokens", str(10**9)), ("--out", "missing/eval.json")),
    ),
    "generate --steering": Command(
        ("generate", "--model", MODEL, "--steering", "{steering}", "--prompt", "w1 w2", "--max-new-tokens", "2"),
        (("--baseline",), ("--drafter", "prompt-lookup"), ("--mask", "knapsack"), ("--mask", "swift")),
    ),
    "generate --draft-model": Command(
        ("generate", "--model", MODEL, "--draft-model", MODEL, "--prompt", "w1 w2", "--max-new-tokens", "2"),
        (("--mask", "mask.json"), ("--mask", "uniform:0.5"), ("--baseline",), ("--drafter", "prompt-lookup"), ("--mask", "knapsack"),
         ("--mask", "swift"), ("--mask", "router:router.json"), ("--steering", "steer.safetensors"),
         ("--draft-model", ""), ("--draft-model", "mask.json"), ("--draft-model", "adir_missing/model"),
         ("--profile", "profile.json")),
    ),
    "generate --draft-model folder": Command(
        ("generate", "--model", MODEL, "--draft-model", "{draft_model}", "--prompt", "w1 w2", "--max-new-tokens", "2"),
    ),
    "knapspec bench": Command(
        ("knapspec", "bench", "--model", MODEL, "--contexts", "16", "--max-new-tokens", "2", "--profile", "{profile}",
         "--out", "{out}"),
        (("--contexts", "100000"), ("--contexts", "4"), ("--interval", "0"), ("--threads", "0"), ("--check-candidates", "-1")),
        kinds={"profile": "existing_profile"},  # a missing --profile is measured and saved there
    ),
    # Issue 26, round two: this turn's new inputs. A GGUF file as --model or --draft-model (refused
    # from its header, before any conversion, and with no cache folder made), a decoder spec, and
    # prompt files with chat rows wherever a command takes --prompts FILE.
    "generate --model gguf": Command(("generate", "--model", "{gguf}", "--prompt", "w1 w2", "--max-new-tokens", "2")),
    "generate --draft-model gguf": Command(
        ("generate", "--model", MODEL, "--draft-model", "{gguf}", "--prompt", "w1 w2", "--max-new-tokens", "2")),
    "generate --spec": Command(
        ("generate", "--spec", "{spec}", "--prompt", "w1 w2", "--max-new-tokens", "2"),
        (("--mask", "mask.json"), ("--draft-vocab", "4"), ("--kernels", "gpu"), ("--max-new-tokens", "0"),
         ("--save-spec", "missing/spec.json"), ("--threads", "0")),
    ),
    "bench --prompts": Command(
        ("bench", "--model", MODEL, "--prompts", "{user_prompts}", "--prompts-per-domain", "1", "--max-new-tokens", "2",
         "--repeats", "1", "--skip-ratios", "0.5", "--peers", "", "--drafters", "", "--profile", "profile.json",
         "--out", "bench_out.json"),
        (("--draft-vocab", "-1"), ("--draft-vocab", str(10**12)), ("--draft-vocab", "x"), ("--kernels", "gpu"),
         ("--kernels", "")),
    ),
    "bench --specs": Command(
        ("bench", "--model", MODEL, "--specs", "{spec}", "--domains", "code", "--prompts-per-domain", "1",
         "--max-new-tokens", "2", "--repeats", "1", "--skip-ratios", "", "--peers", "", "--drafters", "",
         "--profile", "profile.json", "--out", "bench_out.json"),
        (("--specs", ","),),
        kinds={"spec": "bench_spec"},
    ),
    "study create --prompts": Command(
        ("study", "create", "--name", "chat", "--model", MODEL, "--prompts", "{user_prompts}", "--strategy", "random",
         "--objective", "matchness", "--samples", "1", "--max-new-tokens", "2", "--profile", "profile.json",
         "--storage", "studies.db"),
    ),
    "study head-to-head --prompts": Command(
        ("study", "head-to-head", "--model", MODEL, "--prompts", "{user_prompts}", "--budget", "1", "--samples", "1",
         "--max-new-tokens", "2", "--prefix", "h2h", "--profile", "profile.json", "--storage", "h2h.db",
         "--out-prefix", "h2h_table"),
    ),
    # Issue 32: a study's search space (--space); plans need a profile with int8 timings (this one has none).
    "study create --space": Command(
        ("study", "create", "--name", "plans", "--model", MODEL, "--domain", "translation", "--strategy", "random",
         "--objective", "expected-speedup", "--samples", "1", "--max-new-tokens", "2", "--profile", "profile.json",
         "--storage", "studies.db"),
        (("--space", "nope"), ("--space", "plans")),
    ),
}

#: Good values of each placeholder, relative to the working folder built by ``base``.
GOOD = {"paper": "paper.json", "mask": "mask.json", "prompts": "prompts.jsonl", "profile": "profile.json", "out": "out.json",
        "png": "out.png", "prefix": "table", "storage": "studies.db", "name": "ok",
        "steering": "steer.safetensors", "model_out": "small", "disco": "disco:disco.json", "rows": "rows.npz",
        "router": "router.json", "draft_model": "draft", "spec": "spec.json", "user_prompts": "user.jsonl",
        "bench_report": "bench_report.json"}

Maker = Callable[[Path], str]


def _file(name: str, data: bytes | str) -> Maker:
    def make(work: Path) -> str:
        path = work / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        return name
    return make


def _dir(name: str) -> Maker:
    def make(work: Path) -> str:
        (work / name).mkdir()
        return name
    return make


def _value(value: str) -> Maker:
    return lambda work: value


def _sqlite_of_another_app(name: str) -> Maker:
    def make(work: Path) -> str:
        with sqlite3.connect(work / name) as connection:
            connection.execute("CREATE TABLE notes (text TEXT)")
            connection.execute("INSERT INTO notes VALUES ('not yours')")
        connection.close()
        return name
    return make


BAD_JSON_FILES: dict[str, Maker] = {
    "missing": _value("nope.json"),
    "directory": _dir("adir.json"),
    "binary": _file("bin.json", bytes(range(256)) * 4),
    "latin-1": _file("latin.json", '{"prompt": "café"}\n'.encode("latin-1")),
    "empty": _file("empty.json", b""),
    "malformed": _file("bad.json", '{"num_layers": '),
    "deeply nested": _file("deep.json", "[" * 100_000 + "]" * 100_000),
    "5000-digit integer": _file("int.json", '{"schema_version": 1, "num_layers": ' + "9" * 5000 + "}"),
    "too large": _file("large.json", "{}" + " " * 5000),  # the limit is lowered to 4 KB below
    "a billion layers": _file("huge.json", '{"schema_version":1,"num_layers":1000000000,"attention":[],"mlp":[]}'),
    "40 KB of duplicates": _file("dups.json", json.dumps({"schema_version": 1, "num_layers": 30, "attention": [0] * 1000, "mlp": []})),
    "empty prompt": _file("blank.json", '{"prompt": ""}\n'),
}
BAD_OUTPUTS: dict[str, Maker] = {
    "a directory": _dir("adir"),
    "empty": _value(""),
    "under a file": lambda work: (work / "afile").write_text("mine") and "afile/out.json",
    "name too long": _value("x" * 300 + ".json"),
    "in a missing folder": _value("missing/out.json"),  # never created, in any command
    "two missing folders deep": _value("a/b/out.json"),
    "under /proc": _value("/proc/out.json"),  # writable by its permission bits (as root), found unwritable before the work
}
BAD_READ_STORAGES: dict[str, Maker] = {
    "missing": _value("missing.db"),
    "empty file": _file("empty.db", b""),
    "another app's database": _sqlite_of_another_app("app.db"),
    "not a database": _file("text.db", "hello\n" * 100),
    "a directory": _dir("folder.db"),
    "journal that is a directory": _dir("folder.log"),
    "unsupported": _value("notes.txt"),
    "in memory": _value("sqlite:///:memory:"),
    "empty url": _value(" "),
}

def _steering_of_another_model(name: str) -> Maker:
    def make(work: Path) -> str:
        from layersearch.masks.mask import ModelInfo, SkipMask
        from layersearch.steer import SteeringFile, SteeringParams

        other = ModelInfo("other", 4, 64, "0123456789abcdef")
        SteeringFile(SteeringParams((0, 2, 3), 64, 64, 128), other, None, SkipMask(4, (1,), (2,))).save(work / name)
        return name
    return make


def _steering_variant(name: str, *, dtype=None, fill: float | None = None, meta: dict | None = None,
                      metadata: str | None = None) -> Maker:
    """The good steering file with its tensors cast to ``dtype`` or filled with ``fill``, its
    metadata fields changed by ``meta`` or the whole metadata string replaced by ``metadata``."""
    def make(work: Path) -> str:
        import torch
        from safetensors import safe_open
        from safetensors.torch import save

        with safe_open(str(work / "steer.safetensors"), "pt") as handle:
            info = json.loads(handle.metadata()["layersearch"])
            tensors = {k: handle.get_tensor(k) for k in handle.keys()}
        info.update(meta or {})
        for key, tensor in tensors.items():
            tensor = tensor if fill is None else torch.full_like(tensor, fill)
            tensors[key] = tensor if dtype is None else tensor.to(dtype)
        (work / name).write_bytes(save(tensors, metadata={"layersearch": metadata if metadata is not None else json.dumps(info)}))
        return name
    return make


def _torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def _steering_as(name: str, dtype: str) -> Maker:
    return lambda work: _steering_variant(name, dtype=_torch_dtype(dtype))(work)


_HUGE_MODEL = {"name": "x", "num_layers": 4, "hidden_size": 10**15, "fingerprint": "0"}
BAD_STEERING: dict[str, Maker] = {
    "missing": _value("nope.safetensors"),
    "directory": _dir("adir.safetensors"),
    "empty": _file("empty.safetensors", b""),
    "binary": _file("bin.safetensors", bytes(range(256)) * 4),
    "a mask": _value("mask.json"),
    "another model's": _steering_of_another_model("other.safetensors"),
    # every dtype but float32, non-finite values, layers, sizes, hostile metadata
    "float16 tensors": _steering_as("f16.safetensors", "float16"),
    "bfloat16 tensors": _steering_as("bf16.safetensors", "bfloat16"),
    "float8 tensors": _steering_as("f8.safetensors", "float8_e4m3fn"),
    "int32 tensors": _steering_as("i32.safetensors", "int32"),
    "int64 tensors": _steering_as("i64.safetensors", "int64"),
    "bool tensors": _steering_as("bool.safetensors", "bool"),
    "NaN values": _steering_variant("nan.safetensors", fill=float("nan")),
    "infinite values": _steering_variant("inf.safetensors", fill=float("inf")),
    "repeated layer": _steering_variant("rep.safetensors", meta={"layers": [2, 2, 3]}),
    "negative layer": _steering_variant("neg.safetensors", meta={"layers": [-1, 2, 3]}),
    "layer out of range": _steering_variant("far.safetensors", meta={"layers": [0, 2, 99]}),
    "layer as a float": _steering_variant("float.safetensors", meta={"layers": [0.0, 2, 3]}),
    "enormous verifier hidden size": _steering_variant("huge.safetensors", meta={"verifier": _HUGE_MODEL}),
    "enormous drafter hidden size": _steering_variant("hugedraft.safetensors", meta={"drafter": _HUGE_MODEL, "mask": None}),
    "enormous layer count": _steering_variant("deep.safetensors", meta={"verifier": {**_HUGE_MODEL, "hidden_size": 64,
                                                                                      "num_layers": 10**15}}),
    "metadata nested 5000 deep": _steering_variant("nest.safetensors", metadata="[" * 5000 + "]" * 5000),
    "training nested 5000 deep": _steering_variant(
        "nest2.safetensors", metadata='{"kind": "sd2-steering", "training": ' + "[" * 5000 + "]" * 5000 + "}"),
    "metadata with a 5000-digit integer": _steering_variant(
        "digits.safetensors", metadata='{"kind": "sd2-steering", "schema_version": ' + "9" * 5000 + "}"),
    "training a list": _steering_variant("tl.safetensors", meta={"training": [1]}),
    "drafter weights a string": _steering_variant("dw.safetensors", meta={"training": {"drafter_weights": "x"}}),
    "truncated": lambda work: (work / "cut.safetensors").write_bytes((work / "steer.safetensors").read_bytes()[:300]) and "cut.safetensors",
    "header length lies": _file("lies.safetensors", (2**60).to_bytes(8, "little") + b"{}"),
}


def _json_variant(source: str, name: str, change, prefix: str = "") -> Maker:
    """``source`` (a good JSON file of the working folder) with ``change`` applied to its object,
    saved as ``name``; the maker returns ``prefix + name``. ``change`` may return replacement text."""
    def make(work: Path) -> str:
        data = json.loads((work / source).read_text())
        text = change(data)
        (work / name).write_text(text if isinstance(text, str) else json.dumps(data))
        return prefix + name
    return make


def _set(*path_and_value):
    *path, value = path_and_value

    def change(data):
        for key in path[:-1]:
            data = data[key]
        data[path[-1]] = value
    return change


def _disco(name: str, change) -> Maker:
    return _json_variant("disco.json", name, change, prefix="disco:")


BAD_DISCO: dict[str, Maker] = {
    "missing": _value("disco:nope.json"),
    "a mask": _value("disco:mask.json"),
    "NaN weight": _disco("nan.json", _set("classifier", "b2", float("nan"))),
    "NaN in w1": _disco("nanw1.json", lambda d: d["classifier"]["w1"][0].__setitem__(0, float("nan"))),
    "infinite mean": _disco("inf.json", lambda d: d["classifier"]["mean"].__setitem__(0, float("inf"))),
    "literal 1e999": _disco("big.json", lambda d: json.dumps(d).replace('"b2": 0.0', '"b2": 1e999')),
    "string weight": _disco("str.json", lambda d: d["classifier"]["w2"].__setitem__(0, "0.5")),
    "string b2": _disco("strb2.json", _set("classifier", "b2", "0.5")),
    "bool weight": _disco("bool.json", lambda d: d["classifier"]["b1"].__setitem__(0, True)),
    "tau NaN": _disco("taunan.json", _set("tau", float("nan"))),
    "tau a string": _disco("taustr.json", _set("tau", "0.5")),
    "tau -Infinity": _disco("tauinf.json", _set("tau", float("-inf"))),
    "sl_max enormous": _disco("slmax.json", _set("sl_max", 10**20)),
    "sl_max a float": _disco("slfloat.json", _set("sl_max", 4.0)),
    "training a string": _disco("train.json", _set("training", "x")),
    "weights nested deep": _disco("deep.json", lambda d: json.dumps(d).replace('"b2": 0.0', '"b2": ' + "[" * 3000 + "]" * 3000)),
}


def _router(name: str, change) -> Maker:
    return _json_variant("router.json", name, change)


BAD_ROUTERS: dict[str, Maker] = {
    **{k: v for k, v in BAD_JSON_FILES.items() if k not in ("empty prompt",)},
    "a mask": _value("mask.json"),
    "label too large for an integer": _router("big.json", _set("anchor_domains", [10**25, 0, 0])),
    "negative label": _router("neg.json", _set("anchor_domains", [-1, 0, 0])),
    "label as a float": _router("flt.json", _set("anchor_domains", [0.0, 0, 0])),
    "NaN anchor": _router("nan.json", lambda d: d["anchors"][0].__setitem__(0, float("nan"))),
    "string anchor value": _router("str.json", lambda d: d["anchors"][0].__setitem__(0, "1")),
    "anchor of another width": _router("width.json", lambda d: d["anchors"].__setitem__(0, [1.0] * 63)),
    "threshold a string": _router("thr.json", _set("threshold", "0.5")),
    "threshold infinite": _router("thrinf.json", _set("threshold", float("inf"))),
    "enormous hidden size": _router("hidden.json", _set("model", "hidden_size", 10**15)),
    "build nested deep": _router("build.json", lambda d: json.dumps(d).replace('"build": {}', '"build": ' + "[" * 3000 + "]" * 3000)),
}


def _rows(name: str, change=None, data: bytes | None = None, npy: bool = False) -> Maker:
    """The good rows with ``change`` applied to its arrays, or raw ``data``, or x as a plain ``.npy``."""
    def make(work: Path) -> str:
        import numpy as np

        if data is not None:
            (work / name).write_bytes(data)
            return name
        with np.load(work / "rows.npz") as loaded:
            arrays = {k: loaded[k] for k in loaded.files}
        with open(work / name, "wb") as handle:
            if npy:
                np.save(handle, arrays["x"])
            else:
                np.savez(handle, **change(arrays))
        return name
    return make


BAD_ROWS: dict[str, Maker] = {
    "missing": _value("nope.npz"),
    "directory": _dir("adir.npz"),
    "empty": _file("empty.npz", b""),
    "text": _file("text.npz", "hello\n" * 50),
    "truncated zip": _file("cut.npz", b"PK\x03\x04 not really a zip"),
    "a plain .npy": _rows("x.npy", npy=True),
    "a pickle": _file("pickle.npz", b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00K\x01."),
    "x of the wrong width": _rows("narrow.npz", lambda a: {**a, "x": a["x"][:, :3]}),
    "x one-dimensional": _rows("flat.npz", lambda a: {**a, "x": a["x"][:, 0]}),
    "labels shorter": _rows("short.npz", lambda a: {**a, "label": a["label"][:5]}),
    "no rows": _rows("none.npz", lambda a: {k: v[:0] for k, v in a.items()}),
    "missing tv": _rows("notv.npz", lambda a: {k: v for k, v in a.items() if k != "tv"}),
    "NaN features": _rows("nan.npz", lambda a: {**a, "x": a["x"] * float("nan")}),
    "string labels": _rows("strlabel.npz", lambda a: {**a, "label": a["label"].astype(str)}),
    "object arrays": _rows("object.npz", lambda a: {**a, "tv": a["tv"].astype(object)}),
    "float prompt ids": _rows("fprompt.npz", lambda a: {**a, "prompt": a["prompt"] + 0.5}),
    "tv above 1": _rows("tv.npz", lambda a: {**a, "tv": a["tv"] + 2}),
}


def _draft_folder(name: str, **config) -> Maker:
    """The good draft folder copied to ``name`` with ``config`` written into its config.json."""
    def make(work: Path) -> str:
        shutil.copytree(work / "draft", work / name)
        path = work / name / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
        return name
    return make


BAD_DRAFT_MODELS: dict[str, Maker] = {
    "zero-layer config": _draft_folder("zero", num_hidden_layers=0),
    "negative layers": _draft_folder("negative", num_hidden_layers=-1),
    "layers as a string": _draft_folder("string", num_hidden_layers="2"),
    "enormous hidden size": _draft_folder("wide", hidden_size=10**12),
    "enormous vocabulary": _draft_folder("vocab", vocab_size=10**13),
    "config not JSON": lambda work: _draft_folder("broken")(work) and (work / "broken" / "config.json").write_text("{nope") and "broken",
    "a mask file": _value("mask.json"),
}
BAD_MODEL_DIRS: dict[str, Maker] = {
    "non-empty directory": lambda work: (work / "full").mkdir() or (work / "full" / "x").write_text("mine") and "full",
    "a file": _value("mask.json"),
    "empty": _value(""),
    "under a file": lambda work: (work / "afile").write_text("mine") and "afile/small",
    "missing folder": _value("nope/small"),
    "name too long": _value("x" * 300),
}

# ----- GGUF files, decoder specs, prompt files with chat rows -------------------
def _gguf_bytes(arch: str = "llama", tensors: int = 1, layers: int = 1, complete: bool = True) -> bytes:
    """A small GGUF file written by the gguf package's own writer: ``arch``, ``layers`` claimed,
    ``tensors`` layer tensors and (``complete``) the width, vocabulary and embedding a model needs.
    Its numbers are no real model: every case using it must be refused before a conversion."""
    import tempfile

    import numpy as np
    from gguf import GGUFWriter

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.gguf"
        writer = GGUFWriter(path, arch)
        writer.add_block_count(layers)
        if complete:
            writer.add_embedding_length(8)
            writer.add_token_list(["a", "b", "c", "d"])
            writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
        for index in range(tensors):
            writer.add_tensor(f"blk.{index}.attn_norm.weight", np.ones(8, dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path.read_bytes()


def _gguf(name: str, make_bytes: Callable[[], bytes]) -> Maker:
    def make(work: Path) -> str:
        (work / name).write_bytes(make_bytes())
        return name
    return make


def _gguf_header(version: int = 3, tensors: int = 1, kv: int = 1, rest: bytes = b"") -> bytes:
    """A GGUF header by hand: magic, version, tensor and key/value counts, then ``rest``."""
    return b"GGUF" + struct.pack("<IQQ", version, tensors, kv) + rest


def _gguf_key(key: str, value_type: int, value: bytes) -> bytes:
    raw = key.encode()
    return struct.pack("<Q", len(raw)) + raw + struct.pack("<I", value_type) + value


def _gguf_string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def _link(name: str, target: str) -> Maker:
    def make(work: Path) -> str:
        os.symlink(target, work / name)
        return name
    return make


def _unreadable(name: str, data: bytes) -> Maker:
    """A file without read permission (root reads it anyway: then its content, not GGUF, is refused)."""
    def make(work: Path) -> str:
        (work / name).write_bytes(data)
        (work / name).chmod(0)
        return name
    return make


BAD_GGUF: dict[str, Maker] = {
    "missing": _value("nope.gguf"),
    "missing in a folder": _value("folder/nope.gguf"),
    "empty": _file("empty.gguf", b""),
    "not GGUF": _file("text.gguf", "hello\n" * 50),
    "truncated header": _gguf("cut.gguf", lambda: _gguf_bytes()[:30]),
    "truncated tensor table": _gguf("cut2.gguf", lambda: _gguf_bytes()[:260]),
    "huge string length": _gguf("str.gguf", lambda: _gguf_header(rest=struct.pack("<Q", 2**62) + b"general")),
    "huge key count": _gguf("keys.gguf", lambda: _gguf_header(kv=2**63)),
    "huge array": _gguf("arr.gguf", lambda: _gguf_header(rest=_gguf_key("general.x", 9, struct.pack("<IQ", 8, 2**60)))),
    "huge tensor count": _gguf("tensors.gguf", lambda: _gguf_bytes()[:8] + struct.pack("<Q", 2**62) + _gguf_bytes()[16:]),
    "wrong version": _gguf("v99.gguf", lambda: _gguf_bytes().replace(struct.pack("<I", 3), struct.pack("<I", 99), 1)),
    "version 1": _gguf("v1.gguf", lambda: _gguf_header(version=1)),
    "zero tensors": _gguf("zero.gguf", lambda: _gguf_bytes(tensors=0)),
    "architecture mamba": _gguf("mamba.gguf", lambda: _gguf_bytes("mamba")),
    "architecture empty": _gguf("noarch.gguf", lambda: _gguf_header(rest=_gguf_key("general.architecture", 8, _gguf_string(b"")))),
    "architecture a number": _gguf("num.gguf", lambda: _gguf_header(rest=_gguf_key("general.architecture", 4, b"\0\0\0\0"))),
    "architecture not UTF-8": _gguf("utf.gguf", lambda: _gguf_header(rest=_gguf_key("general.architecture", 8, _gguf_string(b"\xff\xfe")))),
    "no architecture": _gguf("none.gguf", lambda: _gguf_header(rest=_gguf_key("general.name", 8, _gguf_string(b"x")))),
    "unknown value type": _gguf("type.gguf", lambda: _gguf_header(rest=_gguf_key("general.x", 99, b""))),
    "llama header, no weights": _gguf("llama.gguf", lambda: _gguf_bytes("llama", complete=False)),
    "layers claimed, not held": _gguf("layers.gguf", lambda: _gguf_bytes("llama", layers=4)),
    "tensor data cut short": _gguf("short.gguf", lambda: _gguf_bytes()[:-8]),
    "a directory named x.gguf": _dir("x.gguf"),
    "dangling link": _link("dangling.gguf", "nowhere.gguf"),
    "link loop": _link("loop.gguf", "loop.gguf"),
    "unreadable": _unreadable("locked.gguf", b"not a GGUF file, and not readable"),
}


def _spec(name: str, change) -> Maker:
    return _json_variant("spec.json", name, change)


BAD_SPECS: dict[str, Maker] = {
    **{k: v for k, v in BAD_JSON_FILES.items() if k != "empty prompt"},
    "truncated": lambda work: (work / "cut.json").write_text((work / "spec.json").read_text()[:200]) and "cut.json",
    "a mask": _value("mask.json"),
    "a profile": _value("profile.json"),
    "a list": _file("list.json", "[]"),
    "wrong kind": _spec("kind.json", _set("kind", "layersearch-mask")),
    "no kind": _spec("nokind.json", lambda d: d.pop("kind") and None),
    "format 2": _spec("fmt.json", _set("format", 2)),
    "format a string": _spec("fmtstr.json", _set("format", "1")),
    "unknown field": _spec("extra.json", _set("extra", 1)),
    "unknown lookahead field": _spec("lafield.json", _set("lookahead", "window", 3)),
    "missing field": _spec("nomax.json", lambda d: d.pop("max_new_tokens") and None),
    "unknown drafter": _spec("drafter.json", _set("drafter", "name", "magic")),
    "unknown lookahead": _spec("look.json", _set("lookahead", "name", "magic")),
    "unknown verifier": _spec("verifier.json", _set("verifier", "magic")),
    "unknown mask source": _spec("source.json", _set("mask_source", {"kind": "magic"})),
    "negative vocab": _spec("vocab.json", _set("drafter", "vocab", -1)),
    "vocab a float": _spec("vocabf.json", _set("drafter", "vocab", 4.5)),
    "vocab a string": _spec("vocabs.json", _set("drafter", "vocab", "4")),
    "vocab enormous": _spec("vocabbig.json", _set("drafter", "vocab", 10**12)),
    "another model's": _spec("other.json", _set("model", "info", "fingerprint", "0123456789abcdef")),
    "another model's mask": _spec("othermask.json", _set("mask_source", "mask", "num_layers", 5)),
    "model folder missing": _spec("nomodel.json", _set("model", "ref", "no_such_model")),
    "model ref empty": _spec("emptyref.json", _set("model", "ref", "")),
    "missing router file": _spec("router_missing.json", _set("mask_source", {"kind": "router", "file": "nope.json"})),
    "missing steering file": _spec("steer_missing.json", _set("steering", "nope.safetensors")),
    "missing profile file": _spec("profile_missing.json", _set("profile", "nope.json")),
    "missing DISCO file": _spec("disco_missing.json", lambda d: d["lookahead"].update(name="disco", file="nope.json")),
    "missing draft model": _spec("draft_missing.json", lambda d: d.update(
        mask_source={"kind": "default"}, drafter={"name": "layer-skip", "model": {"ref": "no_such_draft", "path": True}, "vocab": 0})),
    "a symlink to a directory": lambda work: (work / "sdir").mkdir() or _link("link.json", "sdir")(work),
    "max_new_tokens enormous": _spec("long.json", _set("max_new_tokens", 10**12)),
    "max_new_tokens zero": _spec("zero.json", _set("max_new_tokens", 0)),
    "max_draft enormous": _spec("draft.json", _set("lookahead", "max_draft", 10**9)),
    "threshold NaN": _spec("nan.json", lambda d: json.dumps(d).replace('"threshold": 0.8', '"threshold": NaN')),
    "temperature infinite": _spec("temp.json", lambda d: json.dumps(d).replace('"temperature": 0.0', '"temperature": Infinity')),
    "negative seed": _spec("seed.json", _set("sampling", "seed", -1)),
    "seed 2**80": _spec("seed80.json", _set("sampling", "seed", 2**80)),
    "seed 2**40": _spec("seed40.json", _set("sampling", "seed", 2**40)),
    "device tpu": _spec("tpu.json", _set("model", "device", "tpu")),
    "dtype float8": _spec("dtype.json", _set("model", "dtype", "float8")),
    "plain a string": _spec("plain.json", _set("plain", "false")),
    "swift nested deep": _spec("swift.json", lambda d: json.dumps(d).replace('"verifier": "chain"', '"verifier": ' + "[" * 3000 + "]" * 3000)),
}


def _chat(name: str, *rows) -> Maker:
    """A prompt file of ``rows`` (objects, or raw lines when strings)."""
    return _file(name, "".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))


_HI = {"role": "user", "content": "hi"}
BAD_USER_PROMPTS: dict[str, Maker] = {
    **BAD_JSON_FILES,
    "a mask": _value("mask.json"),
    "empty file": _file("none.jsonl", b""),
    "blank lines only": _file("blank.jsonl", "\n \n\t\n"),
    "binary": _file("bin.jsonl", bytes(range(256)) * 4),
    "a row that is a list": _chat("list.jsonl", [1, 2]),
    "neither prompt nor messages": _chat("neither.jsonl", {"text": "hi"}),
    "both prompt and messages": _chat("both.jsonl", {"prompt": "hi", "messages": [_HI]}),
    "messages empty": _chat("nomsg.jsonl", {"messages": []}),
    "messages a string": _chat("msgstr.jsonl", {"messages": "hi"}),
    "message not an object": _chat("msgobj.jsonl", {"messages": ["hi"]}),
    "message without content": _chat("nocontent.jsonl", {"messages": [{"role": "user"}]}),
    "content a number": _chat("num.jsonl", {"messages": [{"role": "user", "content": 3}]}),
    "role unknown": _chat("robot.jsonl", {"messages": [{"role": "robot", "content": "hi"}]}),
    "role a number": _chat("rolenum.jsonl", {"messages": [{"role": 1, "content": "hi"}]}),
    "messages nested deep": _chat("deep.jsonl", '{"messages": ' + "[" * 5000 + "]" * 5000 + "}"),
    "chat rows, model without a chat template": _chat("chat.jsonl", *({"messages": [{"role": "user", "content": f"q{i}"}]}
                                                                      for i in range(40))),
    "one good row, then a broken one": _chat("half.jsonl", {"prompt": "w1 w2"}, '{"prompt": '),
    "too few rows for a split": _chat("few.jsonl", {"prompt": "a b"}),
}

BAD_KINDS: dict[str, dict[str, Maker]] = {
    "steering": BAD_STEERING,
    "disco": BAD_DISCO,
    "router": BAD_ROUTERS,
    "rows": BAD_ROWS,
    "draft_model": BAD_DRAFT_MODELS,
    "gguf": BAD_GGUF,
    "spec": BAD_SPECS,
    # bench runs a spec on its own --model: a spec bound to that model (by fingerprint) may name it otherwise
    "bench_spec": {k: v for k, v in BAD_SPECS.items() if k != "model folder missing"},
    "user_prompts": BAD_USER_PROMPTS,
    "model_out": BAD_MODEL_DIRS,
    "mask": {**BAD_JSON_FILES, "a profile": _value("profile.json")},
    "bench_report": {**BAD_JSON_FILES, "a mask": _value("mask.json"), "a profile": _value("profile.json")},
    "prompts": {**BAD_JSON_FILES, "a mask": _value("mask.json")},
    "profile": {**BAD_JSON_FILES, "a mask": _value("mask.json")},
    "existing_profile": {k: v for k, v in {**BAD_JSON_FILES, "a mask": _value("mask.json")}.items() if k != "missing"},
    "out": BAD_OUTPUTS,
    "png": {**BAD_OUTPUTS, "a JPEG name": _value("out.jpg")},
    "prefix": {k: v for k, v in BAD_OUTPUTS.items() if k != "a directory"},
    "storage": BAD_READ_STORAGES,
    "new_storage": {k: v for k, v in BAD_READ_STORAGES.items() if k not in ("missing", "empty file")},
    "new_name": {"300 characters": _value("n" * 300), "bad characters": _value("no/such name"), "empty": _value("")},
    "name": {"300 characters": _value("n" * 300), "bad characters": _value("no/such name"), "empty": _value(""),
             "absent": _value("absent")},
}



# ----- outputs onto inputs, non-journal .log files, FIFOs, empty values ---------
# Its own block (other helpers append theirs): rows of COMMANDS, and variants added to the kinds above.
def _fifo(name: str) -> Maker:
    """A FIFO that nothing writes to or reads from: opening it the usual way would wait forever."""
    def make(work: Path) -> str:
        os.mkfifo(work / name)
        return name
    return make


# ----- models whose config and weights disagree, generic fallbacks -----------------------
# Each variant is one more row of the table above; the tests after the table check what a
# message must name (the spec file, the option) and the cases that must now work.
def _hm_model(name: str, config: dict | None = None, weights=None, files: dict | None = None) -> Maker:
    """The good model folder (``draft``, a copy of the tiny model) as ``name``: ``config`` merged
    into its config.json, ``weights`` applied to its tensors, ``files`` written into it."""
    def make(work: Path) -> str:
        shutil.copytree(work / "draft", work / name)
        if config:
            path = work / name / "config.json"
            path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
        if weights is not None:
            from safetensors.torch import load_file, save_file

            tensors = load_file(str(work / name / "model.safetensors"))
            weights(tensors)
            save_file(tensors, str(work / name / "model.safetensors"), metadata={"format": "pt"})
        for file, text in (files or {}).items():
            (work / name / file).write_text(text)
        return name
    return make


def _hardlink(name: str, target: str) -> Maker:
    def make(work: Path) -> str:
        os.link(work / target, work / name)
        return name
    return make


def _text_log(name: str, data: bytes | str, url: str = "") -> Maker:
    """A ``.log`` file that is not an Optuna journal, given as ``url + name``."""
    return lambda work: _file(name, data)(work) and url + name


# 5: every input slot also gets a FIFO (and the outputs one nobody reads), 8: an empty value.
for _kind, _name in (("mask", "fifo.json"), ("prompts", "fifo.jsonl"), ("profile", "fifo.json"), ("existing_profile", "fifo.json"),
                     ("bench_report", "fifo.json"), ("steering", "fifo.safetensors"), ("router", "fifo.json"),
                     ("rows", "fifo.npz"), ("gguf", "fifo.gguf"), ("spec", "fifo.json"), ("bench_spec", "fifo.json"),
                     ("user_prompts", "fifo.jsonl"), ("storage", "fifo.db"), ("new_storage", "fifo.log"), ("out", "fifo.json"),
                     ("png", "fifo.png"), ("model_out", "fifo")):
    BAD_KINDS[_kind]["a FIFO"] = _fifo(_name)
    if _kind not in ("out", "png", "model_out"):
        BAD_KINDS[_kind]["an empty name"] = _value("")
BAD_KINDS["disco"]["a FIFO"] = lambda work: _fifo("fifo.json")(work) and "disco:fifo.json"
BAD_KINDS["disco"]["an empty value"] = _value("")
BAD_KINDS["disco"]["disco: and no file"] = _value("disco:")
# 2: a .log that is not an Optuna journal is never opened (nor "repaired") as one, reading or writing.
for _kind in ("storage", "new_storage"):
    BAD_KINDS[_kind].update({
        "a text .log": _text_log("notes.log", "app started\nready\n"),
        "a binary .log": _text_log("bin.log", bytes(range(256)) * 4),
        "a foreign JSON-lines .log": _text_log("events.log", '{"level": "info", "msg": "up"}\n'),
        "journal:/// of a text file": _text_log("app.log", "app started\n", "journal:///"),
        "a .log of a cut-off record only": _text_log("cut.log", '{"op_code":0,"worker_id":"x'),
        "a journal record after a text line": _text_log("mixed.log", 'app started\n{"op_code":0,"worker_id":"x"}\n'),
    })

#: 1: an output onto an input (by name, ./name, symlink, hard link) or onto another output.
_ONTO_PROMPTS_OR_MASK: dict[str, Maker] = {
    "the --prompts file": _value("prompts.jsonl"),
    "the --mask file": _value("mask.json"),
    "the --prompts file as ./": _value("./prompts.jsonl"),
    "the --prompts file through a folder and ..": lambda work: (work / "sub").mkdir() or "sub/../prompts.jsonl",
    "a symlink to the --prompts file": _link("link.jsonl", "prompts.jsonl"),
    "a hard link to the --mask file": _hardlink("hard.json", "mask.json"),
}
_ONTO_BENCH_INPUTS: dict[str, Maker] = {
    "the --prompts file": _value("user.jsonl"),
    "the --profile file": _value("profile.json"),
    "the --masks file": _value("mask.json"),
    "a hard link to the --prompts file": _hardlink("hard.jsonl", "user.jsonl"),
}
_ONTO_TUNE: dict[str, Maker] = {
    "the --prompts file": _value("user.jsonl"),
    "the --storage file": _value("studies.db"),
    "--out itself": _value("spec_out.json"),
    "--out with .png (the report's picture)": _value("spec_out.png"),
}
GOOD.update({"onto": "new_out.json", "other": "new_out.json"})  # the good values the bad_args rows run with
BAD_KINDS.update({"onto_prompts_or_mask": _ONTO_PROMPTS_OR_MASK, "onto_bench_inputs": _ONTO_BENCH_INPUTS,
                  "onto_tune": _ONTO_TUNE,
                  "not_selfsd": {"a prompt file": _value("prompts.jsonl"), "a KnapSpec file": _file("kn.json", "[0, 1]"),
                                 "text": _file("notes.txt", "mine\n"), "a mask file": _value("profile.json")}})

COMMANDS.update({
    "generate --save-spec onto an input": Command(
        ("generate", "--model", MODEL, "--mask", "mask.json", "--prompts", "prompts.jsonl", "--max-new-tokens", "2",
         "--save-spec", "{onto}"), kinds={"onto": "onto_prompts_or_mask"}),
    "bench --out onto an input": Command(
        ("bench", "--model", MODEL, "--prompts", "user.jsonl", "--prompts-per-domain", "1", "--max-new-tokens", "2",
         "--repeats", "1", "--skip-ratios", "0.5", "--no-peers", "--drafters", "", "--profile", "profile.json",
         "--masks", "mask.json", "--out", "{onto}"), kinds={"onto": "onto_bench_inputs"}),
    "tune --report onto an input or output": Command(
        ("tune", "--model", MODEL, "--prompts", "user.jsonl", "--budget", "1", "--out", "spec_out.json",
         "--storage", "studies.db", "--report", "{onto}"),
        (("--report", "spec_out.md", "--out", "spec_out.md"),),  # --out onto its own default report (the last --out wins)
        kinds={"onto": "onto_tune"}),
    "tune --out onto its default report": Command(
        ("tune", "--model", MODEL, "--prompts", "user.jsonl", "--budget", "1", "--out", "spec.md", "--storage", "studies.db")),
    "mask export --out not of the format": Command(
        ("mask", "export", "mask.json", "--format", "selfsd", "--key", "m", "--out", "{other}"),
        (("--out", "mask.json"), ("--format", "knapspec", "--out", "paper.json"), ("--format", "knapspec", "--key", "k", "--out", "paper.json")),
        kinds={"other": "not_selfsd"}),
    "mask import --out onto its input": Command(
        ("mask", "import", "paper.json", "--format", "selfsd", "--key", "m", "--num-layers", "4", "--out", "paper.json")),
    "study export --out onto the storage": Command(("study", "export", "--name", "ok", "--storage", "studies.db", "--out", "studies.db")),
    "knn build --out onto the --domain mask": Command(
        ("knn", "build", "--model", MODEL, "--domain", "translation=mask.json", "--samples", "1", "--out", "mask.json")),
    "transfer --out-prefix onto the --mask file": Command(
        ("transfer", "--model", MODEL, "--mask", "translation=mask.json", "--domains", "translation", "--samples", "1",
         "--max-new-tokens", "2", "--out-prefix", "mask")),
    "knapspec bench --out onto --profile": Command(
        ("knapspec", "bench", "--model", MODEL, "--contexts", "16", "--max-new-tokens", "2", "--profile", "profile.json",
         "--out", "profile.json")),
    "steer shrink --out onto --model": Command(("steer", "shrink", "--model", "draft", "--keep-layers", "2", "--out", "./draft")),
    # 8: an empty value is refused, never taken as the option left out.
    "generate --empty values": Command(
        ("generate", "--model", MODEL, "--prompt", "w1 w2", "--max-new-tokens", "2"),
        tuple(("--" + option, value) for option in ("spec", "save-spec", "mask", "router", "lookahead", "profile", "steering",
                                                     "draft-model", "device", "dtype", "prompt", "skip-ratio")
              for value in ("", " ")) + (("--model", ""), ("--prompts", ""), ("--mask", "\t"))),
    "bench --empty values": Command(
        ("bench", "--model", MODEL, "--domains", "translation", "--prompts-per-domain", "1", "--max-new-tokens", "2",
         "--repeats", "1", "--skip-ratios", "0.5", "--no-peers", "--drafters", "", "--out", "bench_out.json"),
        (("--domains", ""), ("--prompts", ""), ("--profile", ""), ("--spec-bench", ""), ("--out", ""), ("--domains", " "),
         ("--lookaheads", " "), ("--kernels", ""))),
    "transfer --empty values": Command(
        ("transfer", "--model", MODEL, "--mask", "translation=mask.json", "--domains", "translation", "--samples", "1",
         "--max-new-tokens", "2", "--out-prefix", "table"),
        (("--prompts", ""), ("--mask", ""), ("--domains", ""), ("--out-prefix", ""), ("--split", ""))),
    "profile --empty values": Command(("profile", "--model", MODEL, "--contexts", "8", "--repeats", "1", "--out", "p_out.json"),
                                      (("--contexts", ""), ("--validate", ""), ("--masks", ""))),
    "tune --empty values": Command(
        ("tune", "--model", MODEL, "--prompts", "user.jsonl", "--budget", "1", "--out", "spec_out.json", "--storage", "studies.db"),
        (("--name", ""), ("--report", ""), ("--draft-model", ""), ("--name", " "), ("--storage", ""))),
    "study create --empty values": Command(
        ("study", "create", "--name", "fresh", "--model", MODEL, "--domain", "translation", "--strategy", "random",
         "--objective", "matchness", "--samples", "1", "--max-new-tokens", "2", "--profile", "profile.json", "--storage", "studies.db"),
        (("--domain", ""), ("--domain", "file:"), ("--domain", "file: "), ("--profile", ""), ("--preset", ""))),
    "knn build --empty values": Command(
        ("knn", "build", "--model", MODEL, "--domain", "translation=mask.json", "--samples", "1", "--out", "k_out.json"),
        (("--fallback", ""), ("--pca", ""), ("--domain", ""))),
})


def _hm_add_weight(tensors) -> None:
    import torch

    tensors["model.extra_head.weight"] = torch.zeros(4, 64)


HM_BAD_MODEL_FOLDERS: dict[str, Maker] = {
    "config one layer short of its weights": _hm_model("short", {"num_hidden_layers": 3}),
    "config one layer past its weights": _hm_model("long", {"num_hidden_layers": 5}),
    "config two layers short": _hm_model("shorter", {"num_hidden_layers": 2}),
    "MLP width other than the weights'": _hm_model("ffn", {"intermediate_size": 100}),
    "vocabulary other than the weights'": _hm_model("vocab100", {"vocab_size": 100}),
    "a weight deleted": _hm_model("nonorm", weights=lambda t: t.pop("model.norm.weight")),
    "a layer's weight deleted": _hm_model("noq", weights=lambda t: t.pop("model.layers.2.self_attn.q_proj.weight")),
    "a stray weight added": _hm_model("stray", weights=_hm_add_weight),
    "heads that do not divide the width": _hm_model("heads", {"num_attention_heads": 5}),
    "tokenizer.json malformed": _hm_model("tokbad", files={"tokenizer.json": "{nope"}),
    "tokenizer.json of another shape": _hm_model("tokshape", files={"tokenizer.json": '{"version": "1.0", "model": 5}'}),
}
COMMANDS.update({
    "generate --model folder": Command(("generate", "--model", "{model_folder}", "--prompt", "w1 w2", "--max-new-tokens", "2")),
    "generate --draft-model weights": Command(
        ("generate", "--model", MODEL, "--draft-model", "{model_folder}", "--prompt", "w1 w2", "--max-new-tokens", "2")),
    "steer train --drafter weights": Command(
        ("steer", "train", "--model", MODEL, "--drafter", "{model_folder}", "--domain", "translation", "--prompts", "1",
         "--new-tokens", "2", "--steps", "1", "--out", "steer_out.safetensors")),
    "generate --device": Command(
        ("generate", "--model", MODEL, "--prompt", "w1 w2", "--max-new-tokens", "2"),
        (("--device", ""), ("--device", "tpu"), ("--dtype", ""), ("--dtype", "float8"), ("--steering", ""), ("--profile", ""),
         ("--steering", " "), ("--max-new-tokens", "100000"), ("--draft-vocab", str(10**6)))),
    "bench --spec-bench": Command(
        ("bench", "--model", MODEL, "--spec-bench", "{prompts}", "--skip-ratios", "0.5", "--max-new-tokens", "2", "--repeats", "1",
         "--out", "bench_out.json"),
        (("--answers", "missing/answers"), ("--answers", "mask.json"), ("--answers", "afile/x")),
        kinds={"prompts": "hm_none"}),
})


def _hm_gguf_nested(depth: int) -> bytes:
    """A GGUF header whose first value is an array of arrays ... ``depth`` deep, then a llama architecture."""
    nested = struct.pack("<IQ", 9, 1) * (depth - 1) + struct.pack("<IQ", 4, 0)
    return _gguf_header(kv=2, rest=_gguf_key("general.x", 9, nested) + _gguf_key("general.architecture", 8, _gguf_string(b"llama")))


def _hm_block_count(claimed: int, held: int) -> Callable[[], bytes]:
    """A complete small GGUF holding ``held`` layers whose llama.block_count says ``claimed``."""
    def make() -> bytes:
        data = _gguf_bytes("llama", tensors=held, layers=held)
        return data.replace(b"llama.block_count\x04\x00\x00\x00" + bytes([held]), b"llama.block_count\x04\x00\x00\x00" + bytes([claimed]))
    return make


BAD_GGUF.update({
    "arrays nested 5000 deep": _gguf("nest.gguf", lambda: _hm_gguf_nested(5000)),
    "arrays nested 20 deep": _gguf("nest20.gguf", lambda: _hm_gguf_nested(20)),
    "block_count one short of its layers": _gguf("bc.gguf", _hm_block_count(1, 2)),
    "block_count two short of its layers": _gguf("bc2.gguf", _hm_block_count(1, 3)),
})
HM_BAD_SPECS: dict[str, Maker] = {
    "SWIFT setting unknown": _spec("swbogus.json", _set("mask_source", {"kind": "swift", "swift": {"bogus": 1}})),
    "SWIFT window zero": _spec("swwin.json", _set("mask_source", {"kind": "swift", "swift": {"window": 0}})),
    "SWIFT kappa a string": _spec("swkappa.json", _set("mask_source", {"kind": "swift", "swift": {"kappa": "2"}})),
    "SWIFT settings a list": _spec("swlist.json", _set("mask_source", {"kind": "swift", "swift": [1]})),
    "knapsack reselect_every zero": _spec("knap.json", _set("mask_source", {"kind": "knapsack", "reselect_every": 0})),
    "device empty": _spec("devempty.json", _set("model", "device", "")),
    "device cuda:x": _spec("devx.json", _set("model", "device", "cuda:x")),
    "dtype a number": _spec("dtypenum.json", _set("model", "dtype", 16)),
    "inline mask with a negative layer": _spec("negmask.json", _set("mask_source", "mask", "attention", [-1])),
}
BAD_SPECS.update(HM_BAD_SPECS)
BAD_KINDS["bench_spec"].update(HM_BAD_SPECS)
BAD_KINDS["model_folder"] = HM_BAD_MODEL_FOLDERS
BAD_KINDS["hm_none"] = {}  # a slot whose value is good in every row (the rows are the bad arguments)
GOOD["model_folder"] = "draft"
BAD_USER_PROMPTS.update({
    "content parts of an image": _chat("image.jsonl", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "x.png"}}]}]}),
    "content parts not objects": _chat("parts.jsonl", {"messages": [{"role": "user", "content": ["hi"]}]}),
    "a text part without text": _chat("notext.jsonl", {"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
})
BAD_KINDS["hm_paper"] = {
    "negative layer index": _file("negpaper.json", '{"m": {"attention": [-1], "mlp": [2]}}'),
    "layer index past the model": _file("farpaper.json", '{"m": {"attention": [4], "mlp": [2]}}'),
}
COMMANDS["mask import paper"] = Command(COMMANDS["mask import"].argv, kinds={"paper": "hm_paper"})
# ----- context, plot bench, Unicode, threads, infinities, the API, Ctrl-C -----
# Kept in one block (other helpers add theirs): new commands and bad values for the classes of
# values a user types or a file holds. The tiny model's context is 2048 positions.
_LONG = "w" * 2100  # one character is one token: a prompt longer than the context by itself
_VALUES_COMMANDS: dict[str, Command] = {
    # 6: prompt + new tokens against the context, right after the load, in every command
    "bench --max-new-tokens": Command(
        ("bench", "--model", MODEL, "--prompts", "{user_prompts}", "--prompts-per-domain", "1", "--max-new-tokens", "2",
         "--repeats", "1", "--skip-ratios", "0.5", "--no-peers", "--drafters", "", "--profile", "profile.json",
         "--out", "bench_out.json"),
        (("--max-new-tokens", "1000000"), ("--max-new-tokens", "2047"), ("--threads", "100000"),
         ("--threads", str(2**63)), ("--drafters", "model:smollm2-135m@int4"), ("--drafters", "hybrid:smollm2-135m@fp4"),
         ("--prompt", "x")),
        kinds={"user_prompts": "values_prompts"},
    ),
    "tune --max-new-tokens": Command(
        ("tune", "--model", MODEL, "--prompts", "user.jsonl", "--budget", "1", "--out", "{out}", "--storage", "tune.db"),
        (("--max-new-tokens", "100000"), ("--max-new-tokens", "2047"), ("--name", ""), ("--name", " "),
         ("--train-prompts", "0"), ("--test-prompts", "-1"), ("--budget", "inf"), ("--budget", "-inf"),
         ("--threads", "100000")),
    ),
    "study create --max-new-tokens": Command(
        ("study", "create", "--name", "{name}", "--model", MODEL, "--prompts", "user.jsonl", "--strategy", "random",
         "--objective", "matchness", "--samples", "1", "--max-new-tokens", "2", "--profile", "profile.json",
         "--storage", "studies.db"),
        (("--max-new-tokens", "1000000"), ("--max-new-tokens", "2048"), ("--kappa", "inf"), ("--skip-ratio", "inf"),
         ("--threads", "100000")),
        kinds={"name": "new_name"},
    ),
    # 9: text that is not valid Unicode, typed (a non-UTF-8 byte reaches Python as a lone surrogate) or in a file
    "generate --prompt text": Command(
        ("generate", "--model", MODEL, "--prompts", "{prompts}", "--max-new-tokens", "2"),
        (("--prompts", "p\udcff.jsonl"), ("--threads", "100000"), ("--threads", str(2**63)), ("--threads", "-5"),
         ("--swift-kappa", "inf", "--on-the-fly", "swift"), ("--swift-tolerance", "nan", "--on-the-fly", "swift"),
         ("--swift-target", "-inf", "--on-the-fly", "swift"), ("--max-new-tokens", "2047"),
         ("--max-new-tokens", str(10**18)), ("--save-spec", "s\udcff.json")),
        kinds={"prompts": "values_prompts_jsonl"},
    ),
    "generate --prompt bytes": Command(
        ("generate", "--model", MODEL, "--prompt", "{text}", "--max-new-tokens", "2"),
        kinds={"text": "values_text"},
    ),
    "bench --spec-bench": Command(
        ("bench", "--model", MODEL, "--spec-bench", "{questions}", "--answers", "answers", "--limit", "1",
         "--skip-ratios", "0.5", "--max-new-tokens", "2", "--no-peers", "--drafters", "", "--profile", "profile.json",
         "--out", "bench_out.json"),
        (("--max-new-tokens", "100000"),),
        kinds={"questions": "values_questions"},
    ),
    # 13: infinities in every float option and every file
    "study run --timeout": Command(("study", "run", "--name", "ok", "--storage", "studies.db", "--trials", "1", "--quiet"),
                                   (("--timeout", "inf"), ("--timeout", "nan"), ("--threads", "100000"))),
    "knn build --threshold-margin": Command(
        ("knn", "build", "--model", MODEL, "--domain", "translation=mask.json", "--samples", "1", "--out", "{out}"),
        (("--threshold-margin", "-inf"), ("--threads", str(2**63))),
    ),
    "plot bench --values": Command(("plot", "bench", "{bench_report}", "--out", "out.png"),
                                   kinds={"bench_report": "values_bench_report"}),
}
COMMANDS.update(_VALUES_COMMANDS)
GOOD.update({"text": "w1 w2", "questions": "questions.jsonl"})


def _rows_file(name: str, rows) -> Maker:
    return _file(name, "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def _every_row(name: str, row: str, n: int = 40) -> Maker:
    """A prompt file of ``n`` rows like ``row`` (numbered, so each is distinct): whichever split
    a command draws from holds such a row."""
    return _file(name, "".join(row.replace("{i}", str(i)) + "\n" for i in range(n)))


_VALUES_PROMPTS: dict[str, Maker] = {
    "every row longer than the context": _every_row("long.jsonl", '{"prompt": "{i} ' + _LONG + '"}'),
    "every chat longer than the context": _every_row(
        "longchat.jsonl", '{"messages": [' + ", ".join(['{"role": "user", "content": "{i} ' + "w" * 60 + '"}'] * 40) + "]}"),
    "a lone surrogate in every prompt": _every_row("sur.jsonl", '{"prompt": "bad {i} \\ud800"}'),
    "a lone low surrogate": _every_row("low.jsonl", '{"prompt": "bad {i} \\udcff"}'),
    "a lone surrogate in a chat message": _every_row("surchat.jsonl", '{"messages": [{"role": "user", "content": "{i} \\udfff"}]}'),
    "a lone surrogate in a key": _every_row("surkey.jsonl", '{"prompt": "{i}", "\\ud800": 1}'),
    "Infinity in a row": _every_row("inf.jsonl", '{"prompt": "{i}", "weight": Infinity}'),
    "1e999 in a row": _every_row("big.jsonl", '{"prompt": "{i}", "weight": 1e999}'),
}
BAD_USER_PROMPTS.update(_VALUES_PROMPTS)  # every command reading a prompt file (bench, tune, study create, head-to-head)
BAD_KINDS["user_prompts"].update(_VALUES_PROMPTS)
BAD_KINDS["values_prompts"] = {k: v for k, v in _VALUES_PROMPTS.items() if "chat" not in k}  # chats: no template here
BAD_KINDS["values_prompts_jsonl"] = {
    "a prompt longer than the context": _rows_file("long.jsonl", [{"prompt": "w1"}, {"prompt": _LONG}]),
    "a lone surrogate": _rows_file("sur.jsonl", ['{"prompt": "bad \\ud800"}']),
    "a lone surrogate after good rows": _rows_file("sur2.jsonl", [{"prompt": "w1"}, '{"prompt": "w2 \\udbff w3"}']),
    "Infinity beside the prompt": _rows_file("inf.jsonl", ['{"prompt": "w1", "n": -Infinity}']),
}
BAD_KINDS["values_text"] = {
    "a non-UTF-8 byte": _value("x \udcff y"),
    "a lone surrogate": _value("x \ud800 y"),
    "longer than the context": _value(_LONG),
}
_Q = {"question_id": 1, "category": "qa", "turns": ["What is 2+2?"]}
BAD_KINDS["values_questions"] = {
    "a lone surrogate in a turn": _rows_file("q1.jsonl", ['{"question_id": 1, "category": "qa", "turns": ["bad \\ud800"]}']),
    "a lone surrogate in the category": _rows_file("q2.jsonl", ['{"question_id": 1, "category": "\\udc80", "turns": ["x"]}']),
    "Infinity as the id": _rows_file("q3.jsonl", ['{"question_id": Infinity, "category": "qa", "turns": ["x"]}']),
    "a turn longer than the context": _rows_file("q4.jsonl", [{**_Q, "turns": [_LONG]}]),
    "malformed": _rows_file("q5.jsonl", ['{"question_id": ']),
}
_REPORT = {"domains": {"code": {"rows": [{"config": "plain generate", "speedup": 1.0, "decode_speedup": 1.0}]}}}
BAD_KINDS["values_bench_report"] = {
    "schema_version 99": _file("v99.json", json.dumps({**_REPORT, "schema_version": 99})),
    "schema_version true": _file("vtrue.json", json.dumps({**_REPORT, "schema_version": True})),
    "schema_version a string": _file("vstr.json", json.dumps({**_REPORT, "schema_version": "1"})),
    "a JSON array": _file("arr.json", "[]"),
    "a JSON string": _file("str.json", '"bench"'),
    "Infinity speedup": _file("inf.json", json.dumps(_REPORT).replace("1.0,", "Infinity,", 1)),
    "-Infinity decode speedup": _file("ninf.json", json.dumps(_REPORT).replace('"decode_speedup": 1.0', '"decode_speedup": -Infinity')),
    "1e999 speedup": _file("e999.json", json.dumps(_REPORT).replace("1.0,", "1e999,", 1)),
    "a lone surrogate in a label": _file("sur.json", json.dumps(_REPORT).replace("plain generate", "plain \\ud800")),
}
_VALUES_SPECS: dict[str, Maker] = {
    "format true": _spec("fmttrue.json", _set("format", True)),
    "info.num_layers wrong": _spec("layers.json", _set("model", "info", "num_layers", 5)),
    "info.hidden_size wrong": _spec("width.json", _set("model", "info", "hidden_size", 65)),
    "max_new_tokens beyond the context": _spec("long.json", _set("max_new_tokens", 5000)),
    "top_p Infinity": _spec("topinf.json", lambda d: json.dumps(d).replace('"top_p": 1.0', '"top_p": Infinity')),
    "top_k 50.0": _spec("topk.json", lambda d: json.dumps(d).replace('"top_k": 0', '"top_k": 50.0')),
    "a lone surrogate in the device": _spec("dev.json", lambda d: json.dumps(d).replace('"device": "cpu"', '"device": "cpu\\ud800"')),
}
BAD_KINDS["spec"].update(_VALUES_SPECS)
BAD_KINDS["bench_spec"].update(_VALUES_SPECS)
for _kind in ("profile", "existing_profile"):
    BAD_KINDS[_kind].update({
        "an infinite slope": _json_variant("profile.json", "pinf.json", lambda d: json.dumps(d).replace(
            '"attention_slope": 1e-07', '"attention_slope": Infinity')),
        "an overflowing base": _json_variant("profile.json", "pbig.json", lambda d: json.dumps(d).replace(
            '"base_seconds": 0.0003', '"base_seconds": 1e999')),
    })
BAD_KINDS["mask"].update({"Infinity layers": _file("minf.json", '{"schema_version": 1, "num_layers": Infinity, "attention": [], "mlp": []}'),
                          "a lone surrogate in the label": _json_variant("mask.json", "msur.json", lambda d: json.dumps(
                              {**d, "provenance": {"label": "x"}}).replace('"label": "x"', '"label": "\\ud800"'))})



# ----- profiles measured elsewhere: bound to the architecture, --random-weights, tune --profile -----
# Its own block: a profile for another architecture is refused wherever a profile is read, naming
# both; the new profile options and tune's --profile get their rows.
def _other_architecture(data):
    data["model"].update(num_layers=2, hidden_size=96, fingerprint="0123456789abcdef")
    data["architecture"] = {"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 96}


for _kind in ("profile", "existing_profile"):
    BAD_KINDS[_kind].update({
        "another architecture": _json_variant("profile.json", "parch.json", _other_architecture),
        "an unknown compile mode": _json_variant("profile.json", "pmode.json", _set("compile_mode", "jit")),
        "schema version 3": _json_variant("profile.json", "pv3.json", _set("schema_version", 3)),
    })
COMMANDS["profile --random-weights"] = Command(
    ("profile", "--model", MODEL, "--random-weights", "--contexts", "8", "--repeats", "1", "--max-verify", "2", "--out", "{out}"),
    (("--max-verify", "0"), ("--repeats", "0"), ("--model", "missing.gguf"), ("--model", "no_such_folder/model"),
     ("--dtype", "float8"), ("--device", "tpu")))
COMMANDS["tune --profile"] = Command(
    ("tune", "--model", MODEL, "--prompts", "{user_prompts}", "--budget", "1", "--out", "{out}", "--storage", "{storage}",
     "--profile", "{profile}"),
    kinds={"user_prompts": "hm_none", "out": "hm_none", "storage": "hm_none", "profile": "existing_profile"})

# ----- cases carried over from the former command-line bad-input script -------------------------
# Rows it tried that the table above did not hold yet: larger numbers on options already bounded,
# two more malformed DISCO row files and a mask whose layer count is NaN.
for _name, _rows_added in {"steer train": (("--lr", "1e308"), ("--seed", str(2**64))),
                           "knn bench --router": (("--instances", str(10**9)),)}.items():
    COMMANDS[_name] = replace(COMMANDS[_name], bad_args=COMMANDS[_name].bad_args + _rows_added)
BAD_ROWS.update({
    "prompt ids shorter": _rows("shortprompt.npz", lambda a: {**a, "prompt": a["prompt"][:5]}),
    "complex features": _rows("complex.npz", lambda a: {**a, "x": a["x"].astype(complex)}),
})
BAD_KINDS["mask"]["NaN layers"] = _file("mnan.json", '{"schema_version": 1, "num_layers": NaN, "attention": [], "mlp": []}')


# ----- files named inside files, plans that say more than we read, folders as files -----
# Its own block (other helpers add theirs). The base folder holds spec_profile.json: a spec naming
# profile.json and mask.json (written by generate --profile --mask --save-spec).
def _r4_plan(name: str, change) -> Maker:
    """The good mask with int8 parts (a plan), ``change`` applied to its object."""
    def make(work: Path) -> str:
        from layersearch.masks.mask import SkipMask

        data = SkipMask.load(work / "mask.json").with_int8([0], [0], False).to_dict()
        text = change(data)
        (work / name).write_text(text if isinstance(text, str) else json.dumps(data))
        return name
    return make


def _r4_studies(name: str) -> Maker:
    """A ``studies/`` folder (the default storages' home), the path ``name`` inside it returned."""
    def make(work: Path) -> str:
        (work / "studies").mkdir(exist_ok=True)
        return name
    return make


def _r4_default_storage(link: str | None = None) -> Maker:
    """studies/ok.db, a copy of the storage holding study ``ok`` (the default storage of ``--name ok``);
    returned as itself, or through a symlink ``link``."""
    def make(work: Path) -> str:
        (work / "studies").mkdir(exist_ok=True)
        shutil.copy(work / "studies.db", work / "studies" / "ok.db")
        if link is None:
            return "studies/ok.db"
        os.symlink("studies/ok.db", work / link)
        return link
    return make


_R4_PLANS: dict[str, Maker] = {
    "int8 section misspelt INT8": _r4_plan("INT8.json", lambda d: d.__setitem__("INT8", d.pop("int8"))),
    "an int4 section": _r4_plan("int4.json", lambda d: d.__setitem__("int4", {"attention": [1], "mlp": [], "head": False})),
    "a precision map": _r4_plan("precision.json", lambda d: d.__setitem__("precision", {"attention.0": "fp4"})),
    "a repeated key": _r4_plan("dupkey.json", lambda d: json.dumps(d).replace('"attention": [1]', '"attention": [1], "attention": [3]', 1)),
    "a repeated key inside int8": _r4_plan("dupint8.json", lambda d: json.dumps(d).replace('"head": false', '"head": false, "head": true')),
    "model.num_layers other than num_layers": _r4_plan("layers.json", lambda d: d["model"].__setitem__("num_layers", 6)),
}
BAD_KINDS["mask"].update(_R4_PLANS)  # every command reading a mask file (generate, mask show, bench, plot mask...)
BAD_KINDS["r4_plan"] = {"a plan with int8 parts": _r4_plan("plan_out.json", lambda d: None)}
_R4_SPECS: dict[str, Maker] = {
    "inline mask with an unknown key": _spec("inlinekey.json", _set("mask_source", "mask", "INT8", {"attention": [0]})),
    "inline mask with a repeated key": _spec("inlinedup.json", lambda d: json.dumps(d).replace(
        '"num_layers": 4, "attention"', '"num_layers": 4, "num_layers": 5, "attention"', 1)),
    "inline mask for another model": _spec("inlineother.json", _set("mask_source", "mask", "model", "fingerprint", "0123456789abcdef")),
    "a repeated top-level key": _spec("dupspec.json", lambda d: json.dumps(d).replace('"plain": false', '"plain": false, "plain": true')),
}
BAD_SPECS.update(_R4_SPECS)
BAD_KINDS["bench_spec"].update(_R4_SPECS)
BAD_KINDS["r4_onto_spec_files"] = {"the spec's profile": _value("profile.json"), "the spec's mask file": _value("mask.json"),
                                   "a symlink to the spec's profile": _link("plink.json", "profile.json")}
BAD_KINDS["r4_onto_storage"] = {"the storage --name derives": _r4_default_storage(),
                                "a symlink to it": _r4_default_storage("slink.db")}
BAD_KINDS["r4_onto_tune_storage"] = {"tune's own study": _r4_studies("studies/tune-user.db")}
BAD_KINDS["r4_folder"] = {".": _value("."), "/": _value("/"), "..": _value(".."), "a name ending in /": _value("newdir/"),
                          "an existing folder with /": _dir("there")}
COMMANDS.update({
    # 1: every input a command reads, wherever it was named, and every storage it opens
    "generate --spec --save-spec onto a file the spec names": Command(
        ("generate", "--spec", "spec_profile.json", "--prompt", "w1 w2", "--max-new-tokens", "2", "--save-spec", "{onto}"),
        kinds={"onto": "r4_onto_spec_files"}),
    "bench --specs --out onto a file the spec names": Command(
        ("bench", "--model", MODEL, "--specs", "spec_profile.json", "--domains", "code", "--prompts-per-domain", "1",
         "--max-new-tokens", "2", "--repeats", "1", "--skip-ratios", "", "--peers", "", "--drafters", "", "--out", "{onto}"),
        kinds={"onto": "r4_onto_spec_files"}),
    "study export --out onto the storage --name derives": Command(
        ("study", "export", "--name", "ok", "--out", "{onto}"), kinds={"onto": "r4_onto_storage"}),
    "tune --out onto its own study": Command(
        ("tune", "--model", MODEL, "--prompts", "user.jsonl", "--budget", "1", "--out", "{onto}"),
        kinds={"onto": "r4_onto_tune_storage"}),
    "tune --report onto its own study": Command(
        ("tune", "--model", MODEL, "--prompts", "user.jsonl", "--budget", "1", "--out", "spec_out.json", "--report", "{onto}"),
        kinds={"onto": "r4_onto_tune_storage"}),
    # 2, 3: a plan's parts are read whole or refused; a paper's format that cannot hold them is refused
    "mask export a plan": Command(("mask", "export", "{plan}", "--format", "selfsd", "--key", "m", "--out", "new_out.json"),
                                  (("--format", "knapspec"), ("--format", "swift", "--key", "m_chat"),
                                   ("--format", "knnssd", "--key", "qa_m")),
                                  kinds={"plan": "r4_plan"}),
    # 4: a folder given as a file, for every --out, --report, --save-spec, --out-prefix
    "tune --out a folder": Command(
        ("tune", "--model", MODEL, "--prompts", "user.jsonl", "--budget", "1", "--out", "{out}", "--storage", "tune.db"),
        (("--out", "-"), ("--out", "spec_out.json", "--report", "-")), kinds={"out": "r4_folder"}),
    "tune --report a folder": Command(
        ("tune", "--model", MODEL, "--prompts", "user.jsonl", "--budget", "1", "--out", "spec_out.json", "--storage", "tune.db",
         "--report", "{out}"), kinds={"out": "r4_folder"}),
    "generate --save-spec a folder": Command(
        ("generate", "--model", MODEL, "--prompt", "w1 w2", "--max-new-tokens", "2", "--save-spec", "{out}"), kinds={"out": "r4_folder"}),
    "mask export --out a folder": Command(
        ("mask", "export", "mask.json", "--format", "selfsd", "--key", "m", "--out", "{out}"), kinds={"out": "r4_folder"}),
    "study export --out a folder": Command(
        ("study", "export", "--name", "ok", "--storage", "studies.db", "--out", "{out}"), kinds={"out": "r4_folder"}),
    "study compare --out-prefix a folder": Command(
        ("study", "compare", "ok", "--storage", "studies.db", "--no-measure", "--out-prefix", "{out}"),
        kinds={"out": "r4_folder_prefix"}),
    "bench --out a folder": Command(
        ("bench", "--model", MODEL, "--domains", "code", "--prompts-per-domain", "1", "--max-new-tokens", "2", "--repeats", "1",
         "--skip-ratios", "0.5", "--peers", "", "--drafters", "", "--profile", "profile.json", "--out", "{out}"),
        kinds={"out": "r4_folder"}),
    # 8: one prompt-file reader: generate --prompts refuses exactly what every command refuses
    "generate --prompts a prompt file": Command(
        ("generate", "--model", MODEL, "--prompts", "{user_prompts}", "--max-new-tokens", "2"),
        kinds={"user_prompts": "r4_generate_prompts"}),
    # weak answers: a precision we lack, refused before any model loads; a dtype plans cannot use;
    # a report's picture that would replace the user's own file
    "generate --draft-model precision": Command(
        ("generate", "--model", MODEL, "--prompt", "w1 w2", "--max-new-tokens", "2"),
        (("--draft-model", "smollm2-135m@int4"), ("--draft-model", "no_such_model@fp4"), ("--draft-model", "draft@bf16"))),
    "study create --space plans --dtype": Command(
        ("study", "create", "--name", "plans", "--model", MODEL, "--domain", "translation", "--strategy", "random",
         "--objective", "expected-speedup", "--samples", "1", "--max-new-tokens", "2", "--profile", "profile.json",
         "--storage", "studies.db", "--space", "plans"),
        (("--dtype", "bfloat16"), ("--dtype", "float16"))),
    "tune --report beside an unrelated picture": Command(
        ("tune", "--model", MODEL, "--prompts", "user.jsonl", "--budget", "1", "--out", "spec_out.json", "--storage", "tune.db",
         "--report", "{report}"), kinds={"report": "r4_report"}),
})
# generate runs every row: one row is no split too small (every other row is bad for it as for all)
BAD_KINDS["r4_generate_prompts"] = {k: v for k, v in BAD_USER_PROMPTS.items() if k != "too few rows for a split"}
BAD_KINDS["r4_folder_prefix"] = {k: v for k, v in BAD_KINDS["r4_folder"].items() if k != "an existing folder with /" and k != "/"}
BAD_KINDS["r4_report"] = {"x.md beside a user's x.png": lambda work: (work / "mine.png").write_bytes(b"\x89PNG mine") and "mine.md"}
GOOD.update({"plan": "plan_out.json", "report": "spec_out.md"})


# ----- round five: each root's rows (the benchmark scripts' and the resumed study's are below) ------
# A spec's whole content is checked when it is read, before any model loads: sampling included.
_R5_SPECS: dict[str, Maker] = {
    "temperature -1": _spec("tempneg.json", _set("sampling", "temperature", -1)),
    "temperature -1 sampling": _spec("tempnegs.json", lambda d: d["sampling"].update(do_sample=True, temperature=-1.0)),
    "lookahead disco with an empty file": _spec("discoempty.json", lambda d: d["lookahead"].update(name="disco", file="")),
}
BAD_SPECS.update(_R5_SPECS)
BAD_KINDS["bench_spec"].update(_R5_SPECS)
# A prompt file is an input file like any other: the one cap (MAX_INPUT_BYTES, 4096 bytes here).
_R5_PROMPTS = {"over the input cap": _file("bigprompts.jsonl", "".join(json.dumps({"prompt": f"w{i} " * 20}) + "\n"
                                                                       for i in range(60)))}
BAD_USER_PROMPTS.update(_R5_PROMPTS)
BAD_KINDS["r4_generate_prompts"].update(_R5_PROMPTS)
# An option that would be ignored is refused: an old spelling named, a drafter of plain decoding,
# Spec-Bench mode's options without --spec-bench.
for _name, _rows_added in {"steer eval": (("--draft-length", "4"),),
                           "generate": (("--baseline", "--drafter", "hybrid"), ("--baseline", "--drafter", "prompt-lookup")),
                           "bench": (("--answers", "answers"), ("--categories", "qa"), ("--limit", "3"))}.items():
    COMMANDS[_name] = replace(COMMANDS[_name], bad_args=COMMANDS[_name].bad_args + _rows_added)
# export-hf: a bad spec (and one naming a file the folder cannot carry), a folder that is a file or
# already holds the files (never overwritten).
def _holding(name: str) -> Maker:
    def make(work: Path) -> str:
        (work / "hf_repo" / "custom_generate").mkdir(parents=True)
        (work / "hf_repo" / "custom_generate" / name).write_text("mine\n")
        return "hf_repo"
    return make


def _custom_generate_file(work: Path) -> str:
    (work / "hf_file").mkdir()
    (work / "hf_file" / "custom_generate").write_text("mine\n")
    return "hf_file"


GOOD["hf_folder"] = "hf_out"
#: Spec files bad only against a model: export-hf loads none (the folder runs on the caller's model,
#: which generate checks the spec against on its first call: tests/integrations/test_hf_generate.py).
AGAINST_A_MODEL = ("vocab enormous", "another model's", "model folder missing", "max_new_tokens enormous",
                   "info.num_layers wrong", "info.hidden_size wrong", "max_new_tokens beyond the context",
                   "inline mask for another model")
BAD_KINDS["hf_spec"] = {**{name: make for name, make in BAD_KINDS["spec"].items() if name not in AGAINST_A_MODEL},
                        "naming a latency profile": _value("spec_profile.json")}
BAD_KINDS["hf_folder"] = {"a file": _file("notes.txt", "mine\n"), "holding generate.py": _holding("generate.py"),
                          "holding requirements.txt": _holding("requirements.txt"),
                          "holding layersearch_spec.json": _holding("layersearch_spec.json"),
                          "custom_generate a file": _custom_generate_file, "empty": _value("")}
COMMANDS["export-hf"] = Command(("export-hf", "{spec}", "{hf_folder}"), kinds={"spec": "hf_spec", "hf_folder": "hf_folder"})
# A folder output is probed as a file's folder is, before any work; demo checks every argument
# (its model loaded) before it writes anything in its folder; profile --validate takes no option
# of the measurement it does not make.
BAD_KINDS["hf_folder"].update({"under a file": _value("mask.json/x"), "/proc": _value("/proc")})
COMMANDS["demo"] = replace(COMMANDS["demo"], bad_args=COMMANDS["demo"].bad_args + (
    ("--out-dir", "mask.json"), ("--out-dir", "mask.json/x"), ("--out-dir", "/proc"), ("--model", "missing.gguf"),
    ("--model", "no_such_folder/model"), ("--device", "tpu"), ("--dtype", "float8")))
COMMANDS["profile --validate"] = replace(COMMANDS["profile --validate"], bad_args=COMMANDS["profile --validate"].bad_args + (
    ("--random-weights",), ("--max-verify", "4")))
# export-vllm: the specs export-hf refuses, a spec vLLM cannot serve (its rule reads confidence),
# and a folder that is a file, holds anything already, or takes no file. vllm-env: a folder that
# is a file or holds what it did not make (nothing is installed there).
GOOD["vllm_folder"] = "vllm_out"
BAD_KINDS["vllm_spec"] = {**{name: make for name, make in BAD_KINDS["hf_spec"].items() if name != "naming a latency profile"},
                          "a rule vLLM cannot draft by": _value("spec.json")}  # layer-skip with the confidence rule
GOOD["vllm_spec"] = "spec_vllm.json"  # the good spec with static drafts of 3
BAD_KINDS["vllm_folder"] = {"a file": _file("notes.txt", "mine\n"), "not empty": _holding("generate.py"),
                            "empty": _value(""), "under a file": _value("mask.json/x"), "/proc": _value("/proc")}
COMMANDS["export-vllm"] = Command(("export-vllm", "{vllm_spec}", "{vllm_folder}"))
GOOD["vllm_env"] = "vllm_env_out"
BAD_KINDS["vllm_env"] = {"a file": _file("notes.txt", "mine\n"), "not ours": _holding("generate.py"),
                         "empty": _value(""), "under a file": _value("mask.json/x"), "/proc": _value("/proc")}
COMMANDS["vllm-env"] = Command(("vllm-env", "{vllm_env}"), kinds={"vllm_env": "vllm_env"})
# ----- int4 plans: group sizes the widths refuse, files newer than this reader, dtypes without int4 -----
def _int4_plan(name: str, **int4) -> Maker:
    """The good mask with int4 parts (a version 3 plan), its int4 section's keys set to ``int4``."""
    def make(work: Path) -> str:
        from layersearch.masks.mask import SkipMask

        data = SkipMask.load(work / "mask.json").with_int4([0], [0], False).to_dict()
        data["int4"].update(int4)
        (work / name).write_text(json.dumps(data))
        return name
    return make


BAD_KINDS["mask"]["a version 4 plan (from a newer layersearch)"] = _r4_plan("v4.json", lambda d: d.__setitem__("schema_version", 4))
BAD_KINDS["mask"]["an int4 group size no kernel takes"] = _int4_plan("g100.json", group_size=100)
BAD_KINDS["int4_plan"] = {"int4 groups wider than the model's Linears": _int4_plan("g256.json", group_size=256)}
GOOD["int4_plan"] = "mask.json"
BAD_KINDS["int4_costed"] = {"an int4 plan its profile cannot cost": _int4_plan("g32.json", group_size=32)}
GOOD["int4_costed"] = "mask.json"
COMMANDS["generate --profile an int4 plan"] = Command(
    ("generate", "--model", MODEL, "--mask", "{int4_costed}", "--profile", "profile.json", "--prompt", "w1 w2",
     "--max-new-tokens", "2"), kinds={"int4_costed": "int4_costed"})
COMMANDS["generate an int4 plan"] = Command(
    ("generate", "--model", MODEL, "--mask", "{int4_plan}", "--prompt", "w1 w2", "--max-new-tokens", "2"),
    (("--draft-quant", "int4", "--dtype", "float16"),), kinds={"int4_plan": "int4_plan"})


def cases():
    for command_name, command in COMMANDS.items():
        for slot in command.slots():
            kind = command.kinds.get(slot, slot)
            for bad_name in BAD_KINDS[kind]:
                yield pytest.param(command_name, slot, bad_name, (), id=f"{command_name}-{slot}-{bad_name}")
        for extra in command.bad_args:
            yield pytest.param(command_name, None, None, extra, id=f"{command_name}-{' '.join(extra)}")


# ----- the working folder every case starts from ---------------------------------------------------
def char_tokenizer():
    """One id per printable ASCII character (0-2: unk, bos, eos)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = ["\n", "\t"] + [chr(code) for code in range(32, 127)]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, Path]:
    """(working folder, model folder): a mask, prompts, profile, and a storage holding a
    layersearch study with one complete trial beside another tool's study."""
    import optuna

    from layersearch.models.loading import load_model
    from layersearch.profiling.profile import LatencyProfile

    model_dir = tmp_path_factory.mktemp("model")
    model = build_tiny_model("llama", num_layers=4, seed=0)
    model.config.max_position_embeddings = 2048
    model.save_pretrained(model_dir)
    char_tokenizer().save_pretrained(model_dir)
    info = load_model(str(model_dir)).info
    work = tmp_path_factory.mktemp("base")
    from layersearch.masks.mask import SkipMask

    SkipMask(4, (1,), (2,), info).save(work / "mask.json")
    from layersearch.steer import SteeringFile, SteeringParams
    from layersearch.steer.hooks import intermediate_size

    params = SteeringParams((0, 2, 3), 64, 64, intermediate_size(model))
    SteeringFile(params, info, None, SkipMask(4, (1,), (2,), info)).save(work / "steer.safetensors")
    _method_files(work, info, model_dir)
    (work / "paper.json").write_text('{"m": {"attention": [1], "mlp": [2]}}')  # Self-SD's file format
    (work / "prompts.jsonl").write_text('{"prompt": "w1 w2"}\n')
    LatencyProfile(model=info, device="cpu", dtype="float32", torch_version="test", attention_slope=1e-7,
                   attention_intercept=2e-4, mlp_seconds=2e-4, base_seconds=3e-4,
                   verify_ratios=(1.0, 1.1, 1.2, 1.3)).save(work / "profile.json")
    cwd = os.getcwd()
    os.chdir(work)
    try:
        assert main(["study", "create", "--name", "ok", "--model", str(model_dir), "--domain", "translation",
                     "--strategy", "random", "--objective", "matchness", "--samples", "1", "--max-new-tokens", "2", "--profile", "profile.json",
                     "--storage", "studies.db"]) == 0
        assert main(["study", "run", "--name", "ok", "--storage", "studies.db", "--trials", "1", "--quiet"]) == 0
        _spec_and_user_prompts(work, model_dir)
    finally:
        os.chdir(cwd)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    theirs = optuna.create_study(study_name="theirs", storage=f"sqlite:///{work / 'studies.db'}")
    theirs.set_user_attr("owner", "another tool")
    return work, model_dir


def _spec_and_user_prompts(work: Path, model_dir: Path) -> None:
    """A decoder spec saved by ``generate --save-spec`` (its model an absolute path, so the copies
    of the working folder find it) and a prompt file of 40 distinct rows (enough for every split)."""
    assert main(["generate", "--model", str(model_dir), "--mask", "mask.json", "--prompt", "w1 w2", "--max-new-tokens", "2",
                 "--save-spec", "spec.json"]) == 0
    spec = json.loads((work / "spec.json").read_text())
    spec["model"]["ref"] = str(model_dir)
    (work / "spec.json").write_text(json.dumps(spec))
    spec["lookahead"].update(name="static", max_draft=3)  # what vLLM can serve (export-vllm)
    (work / "spec_vllm.json").write_text(json.dumps(spec))
    (work / "bench_report.json").write_text(json.dumps(
        {"domains": {"code": {"rows": [{"config": "plain generate", "speedup": 1.0, "decode_speedup": 1.0}]}}}))
    (work / "user.jsonl").write_text("".join(json.dumps({"prompt": f"w{i} w{i + 1}"}) + "\n" for i in range(40)))
    assert main(["generate", "--model", str(model_dir), "--mask", "mask.json", "--profile", "profile.json", "--prompt", "w1 w2",
                 "--max-new-tokens", "2", "--save-spec", "spec_profile.json"]) == 0  # a spec naming two files of this folder
    (work / "questions.jsonl").write_text(json.dumps({"question_id": 1, "category": "qa", "turns": ["w1 w2"]}) + "\n")  # Spec-Bench


def _method_files(work: Path, info, model_dir: Path) -> None:
    """Good files of the methods: a DISCO classifier and its training rows, a KNN
    router, and a draft-model folder (a copy of the tiny model)."""
    import numpy as np

    from layersearch.disco.classifier import Classifier
    from layersearch.disco.collect import Rows
    from layersearch.disco.features import NUM_FEATURES
    from layersearch.disco.file import DiscoFile
    from layersearch.knn.router import DomainMask, Router
    from layersearch.masks.mask import SkipMask

    mask = SkipMask(4, (1,), (2,), info)
    hidden = 4
    classifier = Classifier((0.0,) * NUM_FEATURES, (1.0,) * NUM_FEATURES, ((0.1,) * NUM_FEATURES,) * hidden,
                            (0.0,) * hidden, (0.5,) * hidden, 0.0)
    DiscoFile(info, mask, classifier, 0.5, 4).save(work / "disco.json")
    rng = np.random.default_rng(0)
    n = 40
    Rows(rng.normal(size=(n, NUM_FEATURES)).astype(np.float32), rng.random(n) < 0.5, rng.random(n).astype(np.float32),
         np.repeat(np.arange(4), n // 4), np.tile(np.arange(1, n // 4 + 1), 4)).save(work / "rows.npz")
    anchors = rng.integers(-2, 3, size=(3, 64)).astype(np.float32)  # short numbers: the table reads at most 4 KB
    anchors[:, 0] = 3.0  # no zero vector
    Router(info, (DomainMask("translation", mask),), anchors, np.zeros(3, dtype=np.int64),
           0.5).save(work / "router.json")
    shutil.copytree(model_dir, work / "draft")


def test_the_method_files_are_good(base, work, capsys):
    """The files the bad ones are made from are accepted: each refusal above is the bad part's."""
    model = str(base[1])
    for argv in (["generate", "--model", model, "--mask", "uniform:0.5", "--lookahead", "disco:disco.json", "--prompt", "w1 w2",
                  "--max-new-tokens", "2"],
                 ["generate", "--model", model, "--mask", "router:router.json", "--prompt", "w1 w2", "--max-new-tokens", "2"],
                 ["generate", "--model", model, "--draft-model", "draft", "--prompt", "w1 w2", "--max-new-tokens", "2"],
                 ["generate", "--model", model, "--steering", "steer.safetensors", "--prompt", "w1 w2", "--max-new-tokens", "2"],
                 ["generate", "--spec", "spec.json", "--prompt", "w1 w2", "--max-new-tokens", "2"]):
        assert main(argv) == 0, capsys.readouterr().err
    from layersearch.disco.collect import Rows

    assert len(Rows.load(work / "rows.npz")) == 40


def snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` with its content's digest (folders and links marked as such)."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            rel = os.path.relpath(path, folder)
            if path.is_symlink():
                found[rel] = "link:" + os.readlink(path)
            elif path.is_dir():
                found[rel] = "dir"
            elif not path.is_file():  # a FIFO: reading it would wait forever
                found[rel] = "special:" + oct(path.lstat().st_mode)
            else:
                found[rel] = hashlib.sha256(path.read_bytes()).hexdigest() + oct(path.stat().st_mode)
    return found


@pytest.fixture
def work(base, tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "work"
    shutil.copytree(base[0], folder)
    monkeypatch.chdir(folder)
    monkeypatch.setattr("layersearch.common.inputs.MAX_INPUT_BYTES", 4096)
    # The model cache inside the working folder: a refused GGUF file must not leave a cache folder.
    monkeypatch.setenv("LAYERSEARCH_CACHE", str(folder / "cache"))
    return folder


def build_argv(command: Command, model_dir: Path, values: dict[str, str]) -> list[str]:
    argv = []
    for part in command.argv:
        match = SLOT.fullmatch(part)
        if part == MODEL:
            argv.append(str(model_dir))
        elif match:
            argv.append((match[1] or "") + values[match[2]])
        else:
            argv.append(part)
    return argv


def assert_one_line(status: int, err: str) -> None:
    lines = err.strip().splitlines()
    assert status == 2, err
    assert len(lines) == 1 and lines[0].startswith("layersearch: error: "), err
    assert "Traceback" not in err and "shows the traceback" not in err, err  # a named error, not the CLI's last resort


@pytest.mark.parametrize("command_name, slot, bad_name, extra", list(cases()))
def test_bad_input_is_one_line_and_changes_nothing(command_name, slot, bad_name, extra, base, work, capsys):
    command = COMMANDS[command_name]
    values = dict(GOOD)
    if slot is not None:
        values[slot] = BAD_KINDS[command.kinds.get(slot, slot)][bad_name](work)
    argv = build_argv(command, base[1], values) + list(extra)
    before = snapshot(work)
    capsys.readouterr()
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        status = exc.code
    out, err = capsys.readouterr()
    assert_one_line(status, err)
    assert snapshot(work) == before


def test_every_command_is_in_the_table():
    """A new command must join the table (its leaf name as ``layersearch --help`` lists it)."""
    leaves = set()

    def walk(parser, prefix):
        subs = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
        if not subs:
            leaves.add(" ".join(prefix))
        for action in subs:
            for name, child in action.choices.items():
                walk(child, prefix + [name])

    walk(build_parser(), [])
    covered = {name.split(" --")[0] for name in COMMANDS}
    assert leaves - covered == set()


# ----- the real entry point ------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["mask", "show", "bin.json"],
    ["study", "list", "--storage", "app.db"],
    ["plot", "mask", "mask.json", "--out", "out.jpg"],
])
def test_real_entry_point_prints_one_line(argv, work):
    BAD_JSON_FILES["binary"](work)
    _sqlite_of_another_app("app.db")(work)
    before = snapshot(work)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "layersearch", *argv], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert_one_line(proc.returncode, proc.stderr)
    assert proc.stdout == "" and snapshot(work) == before


# ----- what the messages name, and what must now work ---------------------
@pytest.mark.parametrize("bad_name", ["SWIFT setting unknown", "SWIFT window zero", "device tpu", "dtype float8", "device empty",
                                      "another model's", "vocab enormous", "knapsack reselect_every zero",
                                      "inline mask with a negative layer", "model folder missing"])
def test_hm_spec_errors_name_the_spec_file(bad_name, base, work, capsys):
    """A spec file's error names that file and the spec's field, never a CLI option for it."""
    path = BAD_SPECS[bad_name](work)
    capsys.readouterr()
    status = main(["generate", "--spec", path, "--prompt", "w1 w2"])
    err = capsys.readouterr().err
    assert_one_line(status, err)
    assert err.startswith(f"layersearch: error: {path}: ") and " --" not in err, err


@pytest.mark.parametrize("option, value, field", [("--device", "", "model.device"), ("--dtype", "", "model.dtype"),
                                                  ("--steering", "", "steering"), ("--profile", "", "profile"),
                                                  ("--max-new-tokens", "100000", "max_new_tokens"),
                                                  ("--draft-vocab", str(10**6), "drafter.vocab")])
def test_hm_options_are_named_as_options(option, value, field, base, work, capsys):
    """A bad option value is named as the option, never as the spec field it becomes."""
    capsys.readouterr()
    try:
        status = main(["generate", "--model", str(base[1]), "--prompt", "w1 w2", "--max-new-tokens", "2", option, value])
    except SystemExit as exit_:  # an empty value: refused by the shared parser itself
        status = exit_.code
    err = capsys.readouterr().err
    assert_one_line(status, err)
    assert option in err and field not in err.replace(option, "") and "spec" not in err, err


@pytest.mark.parametrize("bad_name, fragment", [
    ("config one layer short of its weights", "num_hidden_layers=3 but its weights hold layers 0-3"),
    ("config one layer past its weights", "num_hidden_layers=5 but its weights hold layers 0-3"),
    ("a layer's weight deleted", "model.layers.2.self_attn.q_proj.weight"),
    ("a stray weight added", "model.extra_head.weight"),
    ("MLP width other than the weights'", "[64, 128] in the files, [64, 100] by the config"),
    ("heads that do not divide the width", "not a multiple of the number of attention heads"),
    ("tokenizer.json malformed", "tokenizer.json"),
])
@pytest.mark.parametrize("option", ["--model", "--draft-model"])
def test_hm_weights_that_disagree_with_the_config_are_named(bad_name, fragment, option, base, work, capsys):
    """transformers' own loading report decides: the model is named with what disagrees."""
    folder = HM_BAD_MODEL_FOLDERS[bad_name](work)
    model = folder if option == "--model" else str(base[1])
    draft = ["--draft-model", folder] if option == "--draft-model" else []
    capsys.readouterr()
    status = main(["generate", "--model", model, *draft, "--prompt", "w1 w2", "--max-new-tokens", "2"])
    err = capsys.readouterr().err
    assert_one_line(status, err)
    assert f"cannot load model {folder!r}" in err and fragment in err, err


def test_hm_plot_labels_are_text(work, capsys):
    """Domain and row names from a report are drawn as text: a ``$`` is no TeX (matplotlib's mathtext)."""
    from layersearch.masks.mask import SkipMask
    from layersearch.evaluation.plots import plot_mask

    (work / "tex.json").write_text(json.dumps({"domains": {"$x^{$": {"rows": [
        {"config": "mask $\\frac{$", "speedup": 1.2, "decode_speedup": 1.3}]}}}))
    assert main(["plot", "bench", "tex.json", "--out", "tex.png"]) == 0, capsys.readouterr().err
    assert (work / "tex.png").read_bytes().startswith(b"\x89PNG")
    plot_mask(SkipMask(4, (1,), (2,)), work / "mask.png", title="$x^{$ 50% $")
    assert (work / "mask.png").stat().st_size > 0


def test_hm_answers_are_checked_before_the_model_load(work, capsys):
    """``bench --spec-bench --answers`` in a missing folder is refused before the model (here a
    file, which would fail to load) is touched."""
    capsys.readouterr()
    status = main(["bench", "--model", "mask.json", "--spec-bench", "prompts.jsonl", "--answers", "missing/answers",
                   "--skip-ratios", "0.5", "--out", "bench_out.json"])
    err = capsys.readouterr().err
    assert_one_line(status, err)
    assert "--answers" in err and "cannot load model" not in err, err


def test_hm_text_content_parts_are_read(work):
    """OpenAI-style content parts of text are one message's text."""
    from layersearch.data.user import read_rows

    (work / "parts.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "w1 "}, {"type": "text", "text": "w2"}]}]}) + "\n")
    assert read_rows("parts.jsonl")[0].messages == (("user", "w1 w2"),)


def _hm_large_gguf(path: Path) -> Path:
    """A complete small llama GGUF file of ~4 MiB (a tensor big enough that its middle lies outside
    the first and last MiB, which a sampled digest would read)."""
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(path, "llama")
    writer.add_block_count(1)
    writer.add_embedding_length(8)
    writer.add_token_list(["a", "b", "c", "d"])
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.add_tensor("blk.0.ffn_up.weight", np.ones((1024, 1024), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _hm_plant_conversion(gguf: Path, model_dir: Path) -> Path:
    """Put ``model_dir`` in the cache as the current conversion of ``gguf`` (as a real one would be)."""
    from layersearch.models import loading

    target = loading.gguf_cache_dir(gguf)
    shutil.copytree(model_dir, target)
    identity = {**loading._conversion_marker(gguf.resolve()), "source_path": str(gguf.resolve())}
    marker = {**identity, "source_stat": loading._stat_key(gguf), "source_sha256": loading._content_digest(gguf)}
    (target / loading._MARKER).write_text(json.dumps(marker, sort_keys=True) + "\n")
    return target


def test_hm_conversion_cache_follows_the_content(base, work, capsys, monkeypatch):
    """A GGUF's cached conversion is reused while its content is the same (touched: reused), and
    converted again when it is rewritten in place with its modification time put back."""
    from layersearch.models import loading
    from layersearch.models.loading import load_model

    gguf = _hm_large_gguf(work / "big.gguf")
    _hm_plant_conversion(gguf, base[1])
    calls = []
    monkeypatch.setattr(loading, "_load_gguf", lambda *a: calls.append(1) or pytest.fail("converted an unchanged file"))
    assert load_model(str(gguf)).info.num_layers == 4
    os.utime(gguf, ns=(gguf.stat().st_atime_ns, gguf.stat().st_mtime_ns + 10**9))  # touched: same content
    assert load_model(str(gguf)).info.num_layers == 4 and calls == []

    def convert(gguf_dir, name):
        calls.append(name)
        return build_tiny_model("llama", num_layers=3, seed=0), char_tokenizer()

    monkeypatch.setattr(loading, "_load_gguf", convert)
    before = gguf.stat()
    with gguf.open("r+b") as handle:  # one float in the middle of the big tensor: 1.0 -> 2.0
        handle.seek(before.st_size // 2 // 4 * 4)
        handle.write(struct.pack("<f", 2.0))
    os.utime(gguf, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert gguf.stat().st_size == before.st_size and gguf.stat().st_mtime_ns == before.st_mtime_ns
    assert load_model(str(gguf)).info.num_layers == 3 and calls == ["big.gguf"]


def test_hm_a_damaged_conversion_is_named(base, work, capsys):
    """Garbage in the cached conversion: the message names the cache folder and how to mend it."""
    gguf = _hm_large_gguf(work / "big.gguf")
    target = _hm_plant_conversion(gguf, base[1])
    (target / "model.safetensors").write_bytes(b"\xff" * 64)
    before = snapshot(work)
    capsys.readouterr()
    status = main(["generate", "--model", "big.gguf", "--prompt", "w1 w2", "--max-new-tokens", "2"])
    err = capsys.readouterr().err
    assert_one_line(status, err)
    assert str(target) in err and "delete" in err and "damaged" in err, err
    assert snapshot(work) == before
# ----- the Python API refuses as the CLI does (LayersearchError, one line) ----
_API_CALLS = {
    "load_decoder(123)": (lambda ls, d, torch: ls.load_decoder(123), "load_decoder takes a DecoderSpec"),
    "load_decoder(None)": (lambda ls, d, torch: ls.load_decoder(None), "load_decoder takes a DecoderSpec"),
    "load_decoder(dict)": (lambda ls, d, torch: ls.load_decoder(dict), "load_decoder takes a DecoderSpec"),
    "load_decoder('')": (lambda ls, d, torch: ls.load_decoder(""), "the spec path is empty"),
    "load_decoder(kernels='gpu')": (lambda ls, d, torch: ls.load_decoder(d.spec, kernels="gpu"), "kernels must be one of"),
    "model=(None, None)": (lambda ls, d, torch: ls.load_decoder(d.spec, model=(None, None)), "must be a transformers model"),
    "model=(model, None)": (lambda ls, d, torch: ls.load_decoder(d.spec, model=(d.model, None)), "must be a transformers tokenizer"),
    "model='x'": (lambda ls, d, torch: ls.load_decoder(d.spec, model="x"), "model= takes a LoadedModel"),
    "generate([10**12])": (lambda ls, d, torch: d.generate([10**12], 2), "outside the model's vocabulary"),
    "generate([-1])": (lambda ls, d, torch: d.generate([-1], 2), "outside the model's vocabulary"),
    "a float id tensor": (lambda ls, d, torch: d.generate(torch.tensor([[1.0, 2.0]]), 2), "integer tensor"),
    "a bool id tensor": (lambda ls, d, torch: d.generate(torch.tensor([True]), 2), "integer tensor"),
    "a 3-D id tensor": (lambda ls, d, torch: d.generate(torch.ones(1, 2, 3, dtype=torch.long), 2), "[n] or [1, n]"),
    "a batch of two": (lambda ls, d, torch: d.generate(torch.ones(2, 3, dtype=torch.long), 2), "[n] or [1, n]"),
    "an id tensor past the vocabulary": (lambda ls, d, torch: d.generate(torch.tensor([[5, 10**6]]), 2), "position 1"),
    "bytes": (lambda ls, d, torch: d.generate(b"w1 w2", 2), "the prompt is bytes"),
    "bytearray": (lambda ls, d, torch: d.generate(bytearray(b"w1"), 2), "the prompt is bytes"),
    "an empty prompt": (lambda ls, d, torch: d.generate([], 2), "the prompt is empty"),
    "do_sample='yes'": (lambda ls, d, torch: d.generate("w1", 2, do_sample="yes"), "do_sample must be True, False or None"),
    "do_sample=1": (lambda ls, d, torch: d.generate("w1", 2, do_sample=1), "do_sample must be"),
    "a streamer without put": (lambda ls, d, torch: d.generate("w1", 2, streamer=object()), "streamer must have put()"),
    "max_new_tokens=True": (lambda ls, d, torch: d.generate("w1", True), "max_new_tokens must be an integer"),
    "max_new_tokens=2.0": (lambda ls, d, torch: d.generate("w1", 2.0), "max_new_tokens must be an integer"),
    "max_new_tokens=0": (lambda ls, d, torch: d.generate("w1", 0), "max_new_tokens must be an integer"),
    "max_new_tokens=10**9": (lambda ls, d, torch: d.generate("w1", 10**9), "context length of 2048"),
    "a prompt longer than the context": (lambda ls, d, torch: d.generate("w" * 2100, 2), "context length of 2048"),
    "a lone surrogate": (lambda ls, d, torch: d.generate("bad \ud800", 2), "not valid Unicode text"),
    "temperature=inf": (lambda ls, d, torch: d.generate("w1", 2, do_sample=True, temperature=float("inf")), "temperature must be"),
    "temperature=nan": (lambda ls, d, torch: d.generate("w1", 2, do_sample=True, temperature=float("nan")), "temperature must be"),
    "top_p=0": (lambda ls, d, torch: d.generate("w1", 2, top_p=0), "top_p must be"),
    "top_k=50.0": (lambda ls, d, torch: d.generate("w1", 2, do_sample=True, top_k=50.0), "top_k must be an integer >= 0"),
    "top_k=True": (lambda ls, d, torch: d.generate("w1", 2, do_sample=True, top_k=True), "top_k must be an integer >= 0"),
    "seed=-1": (lambda ls, d, torch: d.generate("w1", 2, seed=-1), "seed must be"),
    "seed=2**80": (lambda ls, d, torch: d.generate("w1", 2, seed=2**80), "seed must be"),
    # hardening round four: the API's own types, one sampling rule, one set of chat rules
    "a streamer class": (lambda ls, d, torch: d.generate("w1", 2, streamer=__import__("transformers").TextStreamer),
                         "streamer is the class TextStreamer: pass an instance"),
    "do_sample=True, temperature=0": (lambda ls, d, torch: d.generate("w1", 2, do_sample=True, temperature=0),
                                      "do_sample true needs temperature > 0"),
    "do_sample=False, temperature=0.7": (lambda ls, d, torch: d.generate("w1", 2, do_sample=False, temperature=0.7),
                                         "temperature 0.7 samples, but do_sample is false"),
    "a chat role prompt files refuse": (lambda ls, d, torch: d.generate([{"role": "moderator", "content": "w1"}], 2),
                                        "has role 'moderator' (choose from"),
    "a chat image part": (lambda ls, d, torch: d.generate([{"role": "user", "content": [{"type": "image_url"}]}], 2),
                          "content part 0 is one of type 'image_url'"),
    "load_decoder(NUL)": (lambda ls, d, torch: ls.load_decoder("spec\x00.json"), "contains a NUL character"),
    "DecoderSpec(model=None)": (lambda ls, d, torch: ls.DecoderSpec(model=None), "model must be a ModelSpec"),
    "DecoderSpec(lookahead=3)": (lambda ls, d, torch: ls.DecoderSpec("m", lookahead=3), "lookahead must be a LookaheadSpec"),
}

def _specs():
    """layersearch.decoder.spec, where the spec's parts are."""
    import layersearch.decoder.spec

    return layersearch.decoder.spec


_API_CALLS.update({
    # one sampling check wherever a spec is built, and the rest of a spec refused before a model loads
    "SamplingSpec(temperature=-1.0)": (lambda ls, d, torch: _specs().SamplingSpec(temperature=-1.0),
                                       "sampling.temperature must be a finite number >= 0"),
    "SamplingSpec(do_sample=True, temperature=-1.0)": (lambda ls, d, torch: _specs().SamplingSpec(True, -1.0),
                                                       "sampling.temperature must be a finite number >= 0"),
    "generate(temperature=-1)": (lambda ls, d, torch: d.generate("w1", 2, temperature=-1), "temperature must be"),
    "DrafterSpec(quant='int3')": (lambda ls, d, torch: _specs().DrafterSpec(quant="int3"), "unknown draft quantization 'int3'"),
    "DrafterSpec(model=..., quant='int4')": (lambda ls, d, torch: _specs().DrafterSpec(model=_specs().ModelRef.given("x"), quant="int4"),
                                             "a draft model takes int8 only"),
    "LookaheadSpec('disco', file='')": (lambda ls, d, torch: _specs().LookaheadSpec("disco", file=""), "lookahead.file must be"),
})


@pytest.fixture(scope="module")
def api_decoder(base):
    import layersearch
    from layersearch.decoder.spec import DecoderSpec, ModelRef, ModelSpec

    return layersearch.load_decoder(DecoderSpec(ModelSpec(ModelRef(str(base[1]), True))))


@pytest.mark.parametrize("label", list(_API_CALLS))
def test_the_api_refuses_bad_arguments_in_one_line(label, api_decoder, tmp_path, monkeypatch):
    import torch

    import layersearch
    from layersearch.common.errors import LayersearchError

    call, says = _API_CALLS[label]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LayersearchError, match=re.escape(says)) as raised:
        call(layersearch, api_decoder, torch)
    assert "\n" not in str(raised.value) and list(tmp_path.iterdir()) == []


def test_the_api_streamer_sees_nothing_of_a_refused_call(api_decoder):
    """The arguments are checked before the streamer is fed: a refused call leaves it untouched."""
    from layersearch.common.errors import LayersearchError

    seen = []
    streamer = type("S", (), {"put": lambda self, x: seen.append(x), "end": lambda self: seen.append("end")})()
    with pytest.raises(LayersearchError):
        api_decoder.generate("w" * 2100, 2, streamer=streamer)
    assert seen == []


# ----- the benchmark scripts answer as the commands do -----------------------------------------------
# benchmarks/*.py are documented tools: a bad argument is one ``SCRIPT: error:`` line, exit 2, before
# any model is built (each runs in-process, imported as tests/benchmarks/test_tools.py imports it).
_NO_CUDA = "no CUDA here"
BENCHMARK_ARGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gpu_report --shapes bogus": ("gpu_report", ("--shapes", "bogus", "--device", "cpu")),
    "gpu_report --table missing.json": ("gpu_report", ("--table", "missing.json")),
    "gpu_report --table of a mask": ("gpu_report", ("--table", "mask.json")),
    "gpu_report --device cuda": ("gpu_report", ("--shapes", "tiny", "--device", "cuda", _NO_CUDA)),
    "gpu_report --device tpu": ("gpu_report", ("--shapes", "tiny", "--device", "tpu")),
    "gpu_report --repeats 0": ("gpu_report", ("--shapes", "tiny", "--device", "cpu", "--repeats", "0")),
    "gpu_report --sections bogus": ("gpu_report", ("--shapes", "tiny", "--device", "cpu", "--sections", "bogus")),
    "gpu_report --greedy-dtypes float8": ("gpu_report", ("--shapes", "tiny", "--device", "cpu", "--sections", "greedy",
                                                         "--greedy-dtypes", "float8")),
    "gpu_report --new-tokens 0": ("gpu_report", ("--shapes", "tiny", "--device", "cpu", "--new-tokens", "0")),
    "gpu_report --out in a missing folder": ("gpu_report", ("--shapes", "tiny", "--device", "cpu", "--out", "no/such.json")),
    "gpu_report --repeats x": ("gpu_report", ("--repeats", "x")),
    "gpu_report --table of a latency profile": ("gpu_report", ("--table", "profile.json")),
    "gpu_report --table of a device alone": ("gpu_report", ("--table", "device5.json")),
    "gpu_report --backend nonsense": ("gpu_report", ("--shapes", "tiny", "--device", "cpu", "--backend", "nonsense")),
    "gpu_plans --draft -1": ("gpu_plans", ("--device", "cpu", "--shapes", "tiny", "--model-shape", "tiny", "--draft", "-1")),
    "gpu_plans --alpha 2": ("gpu_plans", ("--device", "cpu", "--shapes", "tiny", "--model-shape", "tiny", "--alpha", "2")),
    "gpu_plans --alpha 1": ("gpu_plans", ("--device", "cpu", "--shapes", "tiny", "--model-shape", "tiny", "--alpha", "1")),
    "gpu_plans --alpha nan": ("gpu_plans", ("--device", "cpu", "--shapes", "tiny", "--model-shape", "tiny", "--alpha", "nan")),
    "gpu_plans --shapes bogus": ("gpu_plans", ("--device", "cpu", "--shapes", "bogus", "--model-shape", "tiny")),
    "gpu_plans --model-shape two": ("gpu_plans", ("--device", "cpu", "--shapes", "tiny", "--model-shape", "tiny,tiny")),
    "gpu_plans --repeats 0": ("gpu_plans", ("--device", "cpu", "--shapes", "tiny", "--model-shape", "tiny", "--repeats", "0")),
    "gpu_plans --context 0": ("gpu_plans", ("--device", "cpu", "--shapes", "tiny", "--model-shape", "tiny", "--context", "0")),
    "gpu_plans --device cuda": ("gpu_plans", ("--device", "cuda", "--shapes", "tiny", "--model-shape", "tiny", _NO_CUDA)),
    "mask_patterns a missing mask": ("mask_patterns", ("missing.json", "--published", "none")),
    "mask_patterns an invalid mask": ("mask_patterns", ("mask.json", "bin.json", "--published", "none")),
    "mask_patterns no mask": ("mask_patterns", ()),
    "pg_scale sqlite storage": ("pg_scale", ("--storage", "sqlite:///pg.db")),
    "pg_scale --workers 0": ("pg_scale", ("--storage", "postgresql://u@localhost/db", "--workers", "0")),
    "pg_scale --seconds 0": ("pg_scale", ("--storage", "postgresql://u@localhost/db", "--seconds", "0")),
    "pg_scale --trials 0": ("pg_scale", ("--storage", "postgresql://u@localhost/db", "--trials", "0")),
    "hf_overhead --rounds 0": ("hf_overhead", ("--rounds", "0")),
    "hf_overhead --prompts 9": ("hf_overhead", ("--prompts", "9")),
    "hf_overhead --out onto a file": ("hf_overhead", ("--out", "mask.json")),
    "hf_overhead --out in a missing folder": ("hf_overhead", ("--out", "no/such.json")),
    "step_time --rounds 0": ("step_time", ("--rounds", "0")),
    "step_time --tree not a checkout": ("step_time", ("--tree", "nowhere")),
    "step_time three trees": ("step_time", ("--tree", ".", "--tree", ".", "--tree", ".")),
    "step_time --out onto a file": ("step_time", ("--out", "mask.json")),
    "vllm_serve no --model": ("vllm_serve", ()),
    "vllm_serve --model not a model": ("vllm_serve", ("--model", ".")),
    "vllm_serve --concurrency 0": ("vllm_serve", ("--model", ".", "--concurrency", "1,0")),
    "vllm_serve --rows bogus": ("vllm_serve", ("--model", ".", "--rows", "bogus")),
    "vllm_serve --out onto a file": ("vllm_serve", ("--model", ".", "--out", "mask.json")),
}


@pytest.mark.parametrize("label", list(BENCHMARK_ARGS))
def test_benchmark_scripts_refuse_bad_arguments_in_one_line(label, work, capsys):
    from tests.benchmarks.test_tools import load

    script, argv = BENCHMARK_ARGS[label]
    if _NO_CUDA in argv:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a machine with CUDA accepts --device cuda")
        argv = tuple(a for a in argv if a != _NO_CUDA)
    BAD_JSON_FILES["binary"](work)
    _file("device5.json", '{"device": 5}')(work)  # a JSON object with a device, and nothing of a report
    before = snapshot(work)
    capsys.readouterr()
    try:
        status = load(script).main(list(argv))
    except SystemExit as exc:  # argparse's usage errors
        status = exc.code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith(f"{script}.py: error: "), err
    assert "Traceback" not in err and out == "" and snapshot(work) == before


# ----- an interrupted study loses no enqueued candidate ------------------------------------------
def test_a_resumed_knapsack_study_measures_the_candidates_interrupted_trials_lost(base, tmp_path, monkeypatch, capsys):
    """Ctrl-C fails the trial measuring a candidate, kill -9 leaves one RUNNING under a dead worker:
    the next ``study run`` enqueues both candidates again and measures them (real sqlite storage)."""
    import socket

    import optuna
    from optuna.trial import TrialState

    from layersearch.study import WORKER_ATTR

    monkeypatch.chdir(tmp_path)
    shutil.copy(base[0] / "profile.json", tmp_path / "profile.json")
    url = f"sqlite:///{tmp_path / 'k.db'}"
    assert main(["study", "create", "--name", "k", "--model", str(base[1]), "--domain", "translation", "--strategy", "knapsack",
                 "--objective", "tpt", "--samples", "1", "--max-new-tokens", "2", "--profile", "profile.json",
                 "--storage", url]) == 0
    study = optuna.load_study(study_name="k", storage=url)
    candidates = [t.system_attrs["fixed_params"] for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))]
    assert len(candidates) >= 2, "the knapsack proposed too few candidates to interrupt two"
    interrupted = study.ask()  # Ctrl-C inside the objective: Optuna fails the trial
    study.tell(interrupted, state=TrialState.FAIL)
    killed = study.ask()  # kill -9: the trial stays RUNNING, its worker gone
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    study._storage.set_trial_system_attr(killed._trial_id, WORKER_ATTR, {"host": socket.gethostname(), "pid": dead.pid, "start": None})
    capsys.readouterr()

    assert main(["study", "run", "--name", "k", "--storage", url, "--trials", "50", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "2 candidate(s) of interrupted trials enqueued again" in out and "every enqueued candidate mask was measured" in out
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    assert sorted(map(str, candidates)) == sorted(str(t.system_attrs["fixed_params"]) for t in complete)  # each once
    assert all(t.params == t.system_attrs["fixed_params"] for t in complete)

    assert main(["study", "run", "--name", "k", "--storage", url, "--trials", "50", "--quiet"]) == 0
    assert "ran 0 trial(s)" in capsys.readouterr().out  # nothing left: no candidate measured twice


# ----- an output onto the positional input names that input as the command line spells it ---------
@pytest.mark.parametrize("argv", [
    ("mask", "export", "mask.json", "--format", "selfsd", "--key", "m", "--out", "mask.json"),
    ("mask", "import", "paper.json", "--format", "selfsd", "--key", "m", "--num-layers", "4", "--out", "paper.json"),
    ("plot", "mask", "mask.json", "--out", "mask.json"),
])
def test_an_output_onto_the_positional_input_names_file(argv, work, capsys):
    before = snapshot(work)
    capsys.readouterr()
    status = main(list(argv))
    err = capsys.readouterr().err
    assert_one_line(status, err)
    assert f"is the FILE input {argv[2]}" in err and "--file" not in err, err
    assert snapshot(work) == before


# ----- a tokenizer with more tokens than the model's embedding is refused by name -----------------
def _small_embedding_model(folder: Path):
    """The tiny Llama with a 64-row embedding beside the 100-token character tokenizer."""
    model = build_tiny_model("llama", num_layers=2, vocab_size=64, seed=0)
    model.save_pretrained(folder)
    char_tokenizer().save_pretrained(folder)
    return model


def test_a_tokenizer_larger_than_the_embedding_is_one_line(work, capsys):
    _small_embedding_model(work / "small")
    before = snapshot(work)
    capsys.readouterr()
    status = main(["generate", "--model", "small", "--prompt", "~~ zz", "--max-new-tokens", "2"])
    err = capsys.readouterr().err
    assert_one_line(status, err)
    assert "has a vocabulary of 100 tokens, but the model's input embedding only 64 rows" in err and "index out of range" not in err, err
    assert snapshot(work) == before


def test_the_api_refuses_a_tokenizer_larger_than_the_embedding(tmp_path):
    import layersearch
    from layersearch.common.errors import LayersearchError
    from layersearch.decoder.spec import DecoderSpec, ModelRef, ModelSpec

    model = _small_embedding_model(tmp_path)
    spec = DecoderSpec(ModelSpec(ModelRef(str(tmp_path), True)))
    for given in (None, (model, char_tokenizer())):  # loaded from its folder, or handed over as a pair
        with pytest.raises(LayersearchError, match="has a vocabulary of 100 tokens, but the model's input embedding only 64 rows"):
            layersearch.load_decoder(spec, model=given)
