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
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from layersearch.cli import build_parser, main
from layersearch.models.tiny import build_tiny_model

MODEL = "{model}"


@dataclass(frozen=True)
class Command:
    """One leaf command: argv with placeholders, and bad argument lists to try as well."""

    argv: tuple[str, ...]
    bad_args: tuple[tuple[str, ...], ...] = ()
    #: placeholder -> kind of bad values tried there (default: the placeholder's own name)
    kinds: dict[str, str] = field(default_factory=dict)

    def slots(self) -> list[str]:
        return [part[1:-1] for part in self.argv if part.startswith("{") and part.endswith("}") and part != MODEL]


NUMBERS = (("--threads", "0"), ("--max-new-tokens", "0"))
COMMANDS: dict[str, Command] = {
    "generate": Command(
        ("generate", "--model", MODEL, "--mask", "{mask}", "--prompts", "{prompts}", "--max-new-tokens", "2"),
        NUMBERS + (("--temperature", "inf"), ("--temperature", "1", "--seed", str(2**80)), ("--top-p", "0"),
                   ("--max-draft", "0"), ("--draft-threshold", "2"), ("--max-new-tokens", "100000")),
    ),
    "generate --profile": Command(
        ("generate", "--model", MODEL, "--skip-ratio", "0.5", "--prompt", "w1 w2", "--profile", "{profile}",
         "--max-new-tokens", "2"), (("--skip-ratio", "1.5"),),
    ),
    # SWIFT on the fly (issue 12).
    "generate --on-the-fly": Command(
        ("generate", "--model", MODEL, "--on-the-fly", "swift", "--prompts", "{prompts}", "--max-new-tokens", "2"),
        (("--swift-window", "0"), ("--swift-target", "2"), ("--swift-kappa", "-1"), ("--swift-patience", "0"),
         ("--swift-bo-interval", "0"), ("--skip-ratio", "1.5"), ("--swift-min-skip-ratio", "0.9"),
         ("--mask", "mask.json"), ("--dynamic", "knapsack"), ("--baseline",), ("--on-the-fly", "knn")),
    ),
    "swift-stream": Command(
        ("swift-stream", "--model", MODEL, "--domains", "translation", "--per-domain", "1", "--max-new-tokens", "2",
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
    # DISCO's commands: bad arguments only (their --out is a fixed name here: nothing may be written).
    "disco collect": Command(
        ("disco", "collect", "--model", MODEL, "--domain", "translation", "--prompts", "1", "--max-new-tokens", "2",
         "--out", "rows.npz"),
        (("--prompts", "0"), ("--domain", "nope"), ("--max-draft", "0"), ("--threads", "0")),
    ),
    "disco train": Command(
        ("disco", "train", "--model", MODEL, "--domain", "translation", "--train-prompts", "1", "--val-prompts", "1",
         "--max-new-tokens", "2", "--out", "disco.json"),
        (("--train-prompts", "0"), ("--domain", "nope"), ("--max-draft", "0"), ("--rows", "missing.npz")),
    ),
    "disco bench": Command(
        ("disco", "bench", "--model", MODEL, "--domains", "translation", "--train-prompts", "1", "--val-prompts", "1",
         "--test-prompts", "1", "--max-new-tokens", "2", "--out", "disco_bench.json"),
        (("--test-prompts", "0"), ("--domains", ","), ("--max-draft", "0"), ("--repeats", "0")),
    ),
    "transfer": Command(
        ("transfer", "--model", MODEL, "--mask", "translation={mask}", "--domains", "translation", "--samples", "1",
         "--max-new-tokens", "2", "--out-prefix", "{prefix}"),
        NUMBERS + (("--samples", "0"), ("--domains", "nope"), ("--split", "dev"), ("--repeats", "0")),
    ),
    # KNN-SSD: a mask file is no router, so every --router case fails; the mask slots try the bad files.
    "knn build": Command(
        ("knn", "build", "--model", MODEL, "--domain", "translation=mask.json", "--samples", "1", "--fallback", "{mask}",
         "--out", "{out}"),
        (("--samples", "0"), ("--clusters", "2"), ("--anchors", "0"), ("--threshold-margin", "-1"), ("--domain", "nope=mask.json"),
         ("--domain", "translation"), ("--domain", "translation=study:"), ("--domain", "translation=study:absent@studies.db"),
         ("--pca", "out.jpg")),
    ),
    "knn bench": Command(
        ("knn", "bench", "--model", MODEL, "--router", "{mask}", "--instances", "2", "--out", "{out}"),
        (("--instances", "0"), ("--mix-ratios", "0,x"), ("--mix-ratios", "1.5"), ("--mix-ratios", ","), ("--test-prompts", "0"),
         ("--max-draft", "0"), ("--plot", "out.jpg"), ("--routing-prompts", "0", "--pca", "p.png"), ("--ood-domains", "math"),
         ("--pca", "p.png")),
    ),
    "generate --router": Command(
        ("generate", "--model", MODEL, "--router", "{mask}", "--prompt", "w1 w2", "--max-new-tokens", "2"),
        (("--baseline",), ("--mask", "mask.json")),
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
         "--repeats", "1", "--skip-ratios", "0.5", "--no-peers", "--drafters", "", "--profile", "{profile}",
         "--masks", "{mask}", "--out", "{out}"),
        NUMBERS + (("--repeats", "0"), ("--prompts-per-domain", "0"), ("--skip-ratios", "x"), ("--domains", "nope")),
    ),
    "demo": Command(("demo", "--model", MODEL), NUMBERS + (("--budget", "0"), ("--budget", "nan"))),
    "tune": Command(
        ("tune", "--model", MODEL, "--prompts", "{prompts}", "--budget", "1", "--out", "{out}", "--storage", "{storage}"),
        NUMBERS + (("--budget", "0"), ("--budget", "nan"), ("--train-prompts", "0"), ("--repeats", "0"),
                   ("--report", "report.md/x.md"), ("--name", "no/such name")),
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
    # SD² steering (issue 15).
    "steer train": Command(
        ("steer", "train", "--model", MODEL, "--mask", "{mask}", "--domain", "translation", "--prompts", "1",
         "--new-tokens", "2", "--steps", "1", "--out", "{out}"),
        (("--prompts", "0"), ("--domain", "nope"), ("--steps", "0"), ("--lr", "0"), ("--max-offset", "0"), ("--val-prompts", "-1"),
         ("--threads", "0"), ("--finetune-drafter", "tuned"), ("--drafter-lr", "1e-4")),
    ),
    "steer shrink": Command(
        ("steer", "shrink", "--model", MODEL, "--keep-layers", "2", "--out", "{model_out}"),
        (("--keep-layers", "1"), ("--keep-layers", "4"), ("--threads", "0")),
    ),
    "steer eval": Command(
        ("steer", "eval", "--model", MODEL, "--steering", "{steering}", "--domain", "translation", "--prompts", "1",
         "--max-new-tokens", "2", "--seeds", "1"),
        (("--prompts", "0"), ("--seeds", "0"), ("--domain", "nope"), ("--draft-length", "0"), ("--drafter", "nope")),
    ),
    "generate --steering": Command(
        ("generate", "--model", MODEL, "--steering", "{steering}", "--prompt", "w1 w2", "--max-new-tokens", "2"),
        (("--skip-ratio", "0.5"), ("--baseline",), ("--drafter", "prompt-lookup"), ("--dynamic", "knapsack")),
    ),
    "generate --draft-model": Command(
        ("generate", "--model", MODEL, "--draft-model", MODEL, "--prompt", "w1 w2", "--max-new-tokens", "2"),
        (("--mask", "mask.json"), ("--skip-ratio", "0.5"), ("--baseline",), ("--drafter", "hybrid"), ("--dynamic", "knapsack"),
         ("--on-the-fly", "swift"), ("--router", "router.json"), ("--steering", "steer.safetensors"),
         ("--draft-model", ""), ("--draft-model", "mask.json"), ("--draft-model", "adir_missing/model"),
         ("--profile", "profile.json")),
    ),
    "knapspec-bench": Command(
        ("knapspec-bench", "--model", MODEL, "--contexts", "16", "--max-new-tokens", "2", "--profile", "{profile}",
         "--out", "{out}"),
        (("--contexts", "100000"), ("--contexts", "4"), ("--interval", "0"), ("--threads", "0"), ("--check-candidates", "-1")),
        kinds={"profile": "existing_profile"},  # a missing --profile is measured and saved there
    ),
}

#: Good values of each placeholder, relative to the working folder built by ``base``.
GOOD = {"paper": "paper.json", "mask": "mask.json", "prompts": "prompts.jsonl", "profile": "profile.json", "out": "out.json",
        "png": "out.png", "prefix": "table", "storage": "studies.db", "name": "ok",
        "steering": "steer.safetensors", "model_out": "small"}

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
        from layersearch.mask import ModelInfo, SkipMask
        from layersearch.steer import SteeringFile, SteeringParams

        other = ModelInfo("other", 4, 64, "0123456789abcdef")
        SteeringFile(SteeringParams((0, 2, 2), 64, 64, 128), other, None, SkipMask(4, (1,), (2,))).save(work / name)
        return name
    return make


BAD_STEERING: dict[str, Maker] = {
    "missing": _value("nope.safetensors"),
    "directory": _dir("adir.safetensors"),
    "empty": _file("empty.safetensors", b""),
    "binary": _file("bin.safetensors", bytes(range(256)) * 4),
    "a mask": _value("mask.json"),
    "another model's": _steering_of_another_model("other.safetensors"),
}
BAD_MODEL_DIRS: dict[str, Maker] = {
    "non-empty directory": lambda work: (work / "full").mkdir() or (work / "full" / "x").write_text("mine") and "full",
    "a file": _value("mask.json"),
    "empty": _value(""),
    "under a file": lambda work: (work / "afile").write_text("mine") and "afile/small",
    "missing folder": _value("nope/small"),
    "name too long": _value("x" * 300),
}
BAD_KINDS: dict[str, dict[str, Maker]] = {
    "steering": BAD_STEERING,
    "model_out": BAD_MODEL_DIRS,
    "mask": {**BAD_JSON_FILES, "a profile": _value("profile.json")},
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
    from layersearch.profile import LatencyProfile

    model_dir = tmp_path_factory.mktemp("model")
    model = build_tiny_model("llama", num_layers=4, seed=0)
    model.config.max_position_embeddings = 2048
    model.save_pretrained(model_dir)
    char_tokenizer().save_pretrained(model_dir)
    info = load_model(str(model_dir)).info
    work = tmp_path_factory.mktemp("base")
    from layersearch.mask import SkipMask

    SkipMask(4, (1,), (2,), info).save(work / "mask.json")
    from layersearch.steer import SteeringFile, SteeringParams
    from layersearch.steer.hooks import intermediate_size

    params = SteeringParams((0, 2, 2), 64, 64, intermediate_size(model))
    SteeringFile(params, info, None, SkipMask(4, (1,), (2,), info)).save(work / "steer.safetensors")
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
    finally:
        os.chdir(cwd)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    theirs = optuna.create_study(study_name="theirs", storage=f"sqlite:///{work / 'studies.db'}")
    theirs.set_user_attr("owner", "another tool")
    return work, model_dir


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
            else:
                found[rel] = hashlib.sha256(path.read_bytes()).hexdigest() + oct(path.stat().st_mode)
    return found


@pytest.fixture
def work(base, tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "work"
    shutil.copytree(base[0], folder)
    monkeypatch.chdir(folder)
    monkeypatch.setattr("layersearch.inputs.MAX_INPUT_BYTES", 4096)
    return folder


def build_argv(command: Command, model_dir: Path, values: dict[str, str]) -> list[str]:
    argv = []
    for part in command.argv:
        if part == MODEL:
            argv.append(str(model_dir))
        elif part.startswith("{") and part.endswith("}"):
            argv.append(values[part[1:-1]])
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
