"""vLLM plain, vLLM ngram and vLLM serving our exported drafts, in one run, at several concurrencies.

Run it with vLLM's python (vLLM needs an environment of its own: ``python -m
layersearch.integrations.vllm.install DIR``; add ``--cuda`` on a GPU machine). It imports
nothing of layersearch, so any vLLM environment runs it, and it checks every argument before
it imports vLLM::

    $VLLM_PYTHON benchmarks/vllm_serve.py --model EXPORT_OR_HF_FOLDER --exports DIR1,DIR2 \\
        --prompts examples/code40.jsonl --rows held-out --max-new-tokens 128 \\
        --concurrency 1,4,16 --repeats 3 --out vllm_serve.json

Configurations: ``plain`` (no speculative_config), ``ngram`` (``num_speculative_tokens``
``--ngram``, ``prompt_lookup_min``/``max`` 2/3 as our prompt lookup; ``--ngram 0`` leaves it
out) and each ``layersearch export-vllm`` folder of ``--exports`` (its ``vllm.json``'s
speculative_config). Every engine loads ``--model``'s folder; an export made from another
model, or for another dtype, is refused. vLLM takes one speculative config per engine, so each
configuration has its own engine, in a process of its own that the script sends rounds to.

Rows (``--rows``): row numbers and slices of the prompt file's non-blank lines, from 0
(``5,6,9:12,32:``), or ``held-out`` (default), ``validation``, ``test``: the rows of that
split as layersearch splits a prompt file (a hash of each row's content; ``tune`` searches the
train split and measures its finalists on test). The rows ``tune`` or ``demo`` searched are
not held out: do not measure on them. In examples/code40.jsonl the held-out rows are 5, 6, 9,
10, 11, 13, 14, 17, 18, 19, 23, 24, 25, 28, 32 and 33; the run names any train row it is given.

A round at concurrency c sends the rows in waves of c, each wave one ``llm.generate`` call (c
requests in flight at once, in one continuous batch), greedy, up to ``--max-new-tokens``
each, stopping at EOS. Per wave: its wall time, every request's token ids, the spec-decode
counters' change (``llm.get_metrics()``, cumulative, read before and after). Per
configuration and concurrency: tokens/s (generated tokens / wall time, median and range over
repeats), TPOT (a wave's wall time / its longest output, and the mean per request from vLLM's
token timestamps), speedup over plain at the same concurrency (ratio of medians, and the
median of the per-repeat ratios), acceptance (accepted / drafted tokens), mean accepted
length (1 + accepted / drafts), and identity: each row's tokens beside plain's at the same
concurrency and repeat, and beside the same configuration's at the lowest concurrency
(single vs batched). In float32 a row that differs from plain is a correctness failure (exit
status 1); in bfloat16 near-ties may break differently (the column says so).

Schedule (``--schedule``): ``alive`` starts every engine once and alternates their rounds, each
repeat in a rotated order (best for comparing under a machine's drifting load); ``restart``
keeps one engine alive at a time, started again for each round, the rounds alternating as in
``alive`` (memory for one engine; each start costs 30-70 s on a CPU, and is not timed);
``sequential`` keeps one engine alive and runs all its repeats before the next (fewest starts,
the weakest comparison). ``auto`` (default) takes ``alive`` when every engine's estimate
(weights in the dtype, the draft's, the KV cache and 3 GiB of processes) fits in 80% of the
memory available now (on a GPU: its share of ``--gpu-memory-utilization``), else ``restart``.
Each start is followed by an untimed warm-up; prefix caching is off, so every round prefills.

On a GPU: ``--device cuda`` (dtype bfloat16 unless given; captured CUDA graphs; no CPU KV space).
"""

from __future__ import annotations

import argparse
import filecmp
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, TextIO

PROG = os.path.basename(__file__)
REPO = Path(__file__).resolve().parents[1]
EXAMPLE_PROMPTS = REPO / "examples" / "code40.jsonl"
DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_DTYPE = {"cpu": "float32", "cuda": "bfloat16"}
SCHEDULES = ("auto", "alive", "restart", "sequential")
#: rows of a prompt file by split, as layersearch splits a file (layersearch.data.user, .splits)
SPLIT_ROWS = {"held-out": ("validation", "test"), "validation": ("validation",), "test": ("test",)}
#: our prompt lookup's n-gram sizes (PromptLookupDrafter), as vLLM's prompt_lookup_min / max
NGRAM_SIZES = (2, 3)
GIB = 2**30
ENGINE_PROCESSES_BYTES = 3 * GIB  # an engine's processes beside weights and KV: the frontend's and the engine
# core's torch (measured: 2.6 GiB resident beside SmolLM2-135M's weights and 1 GiB of KV, vLLM 0.32 CPU)
FIT_SHARE = 0.8  # of the memory available: what ``auto`` lets the engines' estimates take together
SPEC_COUNTERS = {"drafts": "vllm:spec_decode_num_drafts", "draft_tokens": "vllm:spec_decode_num_draft_tokens",
                 "accepted": "vllm:spec_decode_num_accepted_tokens"}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
FLOAT_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
STORED_BYTES = {"I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
WORKER = "--engine-process"


class Refused(Exception):
    """A bad argument: one ``vllm_serve.py: error:`` line, exit status 2."""


class Failed(Exception):
    """An engine failed while running: one line naming its log, exit status 1."""


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line and exit status 2 (no usage block)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


@dataclass(frozen=True)
class Config:
    """One engine's configuration: its name, its speculative_config (None: plain), its export folder."""

    name: str
    speculative: dict[str, Any] | None
    export: str | None = None
    estimate_bytes: int = 0


@dataclass(frozen=True)
class Job:
    """What the run measures, every argument checked."""

    model: Path
    prompts_file: str
    dtype: str
    device: str
    rows: tuple[int, ...]
    prompts: tuple[str, ...]
    splits: tuple[str, ...]
    configs: tuple[Config, ...]
    concurrency: tuple[int, ...]
    repeats: int
    max_new_tokens: int
    max_model_len: int
    kv_cache_gib: int
    gpu_memory_utilization: float
    schedule: str
    out: Path | None
    notes: tuple[str, ...] = field(default=())


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog=PROG, description=__doc__.split("\n\n")[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--model", required=True, help="the target: an HF folder, or an export folder (its model)")
    parser.add_argument("--exports", default="", help="comma-separated layersearch export-vllm folders of this model")
    parser.add_argument("--ngram", type=int, default=4, help="vLLM ngram's num_speculative_tokens (default 4; 0: no ngram row)")
    parser.add_argument("--prompts", default=str(EXAMPLE_PROMPTS), help="a JSONL prompt file (default examples/code40.jsonl)")
    parser.add_argument("--rows", default="held-out", help="row numbers and slices (5,9:12,32:) or held-out, validation, "
                                                           "test (default held-out: never searched by tune)")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="new tokens per request (default 128)")
    parser.add_argument("--concurrency", default="1,4,16", help="requests in flight, comma-separated (default 1,4,16)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per configuration (default 3)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--dtype", help="float32 (the CPU's default), bfloat16 (the GPU's) or float16")
    parser.add_argument("--schedule", default="auto", help=f"{', '.join(SCHEDULES)} (default auto: see below)")
    parser.add_argument("--kv-cache-gib", type=int, default=4, help="each engine's KV cache on a CPU, GiB (default 4)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.85,
                        help="the GPU memory the engines take together (default 0.85; split between engines alive at once)")
    parser.add_argument("--max-model-len", type=int, default=2048, help="each engine's context length (default 2048)")
    parser.add_argument("--out", help="write settings, provenance, every wave's timing and token ids as JSON (never overwritten)")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [WORKER]:  # an engine's process (Engine starts it): replies on the fd named
        return worker(int(argv[1]))
    args = parser.parse_args(argv)
    try:
        job = check(args)
        return run(job, [PROG, *argv])
    except Refused as exc:
        print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return 2
    except Failed as exc:
        print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return 1


# --- the arguments, all checked before vLLM is imported ------------------------------------


def check(args: argparse.Namespace) -> Job:
    """Every argument, in the order a user fixes them: values, the output, the files."""
    if args.device not in DEVICES:
        raise Refused(f"--device {args.device!r}: choose cpu or cuda (vLLM picks the GPU: CUDA_VISIBLE_DEVICES)")
    dtype = args.dtype or DEFAULT_DTYPE[args.device]
    if dtype not in DTYPES:
        raise Refused(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    if args.schedule not in SCHEDULES:
        raise Refused(f"--schedule {args.schedule!r}: choose one of {', '.join(SCHEDULES)}")
    concurrency = positive_ints(args.concurrency, "--concurrency")
    for value, option in ((args.repeats, "--repeats"), (args.max_new_tokens, "--max-new-tokens"),
                          (args.max_model_len, "--max-model-len"), (args.kv_cache_gib, "--kv-cache-gib")):
        if value < 1:
            raise Refused(f"{option} {value}: give a positive whole number")
    if args.ngram < 0:
        raise Refused(f"--ngram {args.ngram}: give the draft tokens per step (0: no ngram configuration)")
    if not 0.05 <= args.gpu_memory_utilization <= 0.95:
        raise Refused(f"--gpu-memory-utilization {args.gpu_memory_utilization}: give a share between 0.05 and 0.95")
    rows_choice = parse_rows(args.rows)
    out = check_out(args.out)
    model = model_folder(args.model, "--model")
    exports = [e.strip() for e in args.exports.split(",")] if args.exports.strip() else []
    configs = [Config("plain", None)]
    if args.ngram:
        configs.append(Config(f"ngram k={args.ngram}", {"method": "ngram", "num_speculative_tokens": args.ngram,
                                                         "prompt_lookup_min": NGRAM_SIZES[0],
                                                         "prompt_lookup_max": NGRAM_SIZES[1]}))
    configs += export_configs(exports, model, dtype)
    texts = read_prompts(args.prompts)
    splits = tuple(row_split(text) for text in texts)
    rows = resolve_rows(rows_choice, args.rows, splits)
    notes = []
    searched = [str(i) for i in rows if splits[i] == "train"]
    if searched:
        notes.append(f"{'rows' if len(searched) > 1 else 'row'} {', '.join(searched)} {'are' if len(searched) > 1 else 'is'} "
                     f"in the file's train split (what tune searches): not held out")
    largest = max(concurrency)
    if largest > len(rows):
        notes.append(f"concurrency {largest} > {len(rows)} rows: one wave of {len(rows)} requests")
    check_vllm()
    return Job(model, str(Path(args.prompts).expanduser().absolute()), dtype, args.device, tuple(rows), tuple(texts[i] for i in rows), tuple(splits[i] for i in rows),
               tuple(configs), tuple(concurrency), args.repeats, args.max_new_tokens, args.max_model_len, args.kv_cache_gib,
               args.gpu_memory_utilization, args.schedule, out, tuple(notes))


def positive_ints(text: str, option: str) -> list[int]:
    """The distinct positive whole numbers of a comma-separated list, in the order given."""
    values = []
    for part in text.split(","):
        try:
            value = int(part.strip())
        except ValueError:
            raise Refused(f"{option} {text!r}: give positive whole numbers, comma-separated (1,4,16)") from None
        if value < 1:
            raise Refused(f"{option} {text!r}: {value} is not a positive whole number")
        if value in values:
            raise Refused(f"{option} {text!r}: {value} twice")
        values.append(value)
    return values


def parse_rows(text: str) -> str | list[tuple[int, int | None] | int]:
    """A split's name, or the row numbers and (start, stop) slices of ``--rows``."""
    if text.strip() in SPLIT_ROWS:
        return text.strip()
    items: list[tuple[int, int | None] | int] = []
    try:
        for part in text.split(","):
            if ":" in part:
                start, _, stop = part.partition(":")
                if ":" in stop:
                    raise ValueError(part)
                items.append((int(start) if start.strip() else 0, int(stop) if stop.strip() else None))
            else:
                items.append(int(part))
    except ValueError:
        raise Refused(f"--rows {text!r}: give row numbers and slices from 0 (5,9:12,32:), "
                      f"or one of {', '.join(SPLIT_ROWS)}") from None
    return items


def resolve_rows(choice: str | list[tuple[int, int | None] | int], text: str, splits: tuple[str, ...]) -> list[int]:
    """The row numbers ``choice`` names in a file of ``len(splits)`` rows (each once, at least one)."""
    count = len(splits)
    if isinstance(choice, str):
        rows = [i for i, split in enumerate(splits) if split in SPLIT_ROWS[choice]]
        if not rows:
            raise Refused(f"--rows {choice}: the prompt file has no {choice} rows ({count} rows)")
        return rows
    rows = []
    for item in choice:
        if isinstance(item, int):
            if not -count <= item < count:
                raise Refused(f"--rows {text!r}: row {item} is not in the prompt file ({count} rows, numbered from 0)")
            rows.append(item % count)
        else:
            rows += list(range(count))[item[0]:item[1]]
    if not rows:
        raise Refused(f"--rows {text!r}: names no row of the prompt file ({count} rows, numbered from 0)")
    twice = sorted({r for r in rows if rows.count(r) > 1})
    if twice:
        raise Refused(f"--rows {text!r}: row {twice[0]} is named twice")
    return rows


def row_split(text: str) -> str:
    """The split of a ``{"prompt": text}`` row, as layersearch computes it (data/user.py's content
    digest, data/splits.py's hash and bounds; a test checks the two agree)."""
    blob = json.dumps({"prompt": text}, sort_keys=True, ensure_ascii=False)
    digest = hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]
    position = int.from_bytes(hashlib.sha256(f"layersearch.split/user/{digest}".encode("utf-8")).digest()[:8], "big") / 2**64
    return "train" if position < 0.6 else "validation" if position < 0.8 else "test"


def check_out(path: str | None) -> Path | None:
    """``--out``'s path, when it can be written and holds nothing yet."""
    if path is None:
        return None
    out = Path(path).expanduser()
    if out.exists() or out.is_symlink():
        raise Refused(f"--out {path}: exists; it is never overwritten")
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise Refused(f"--out {path}: no folder {folder}")
    if not os.access(folder, os.W_OK):
        raise Refused(f"--out {path}: cannot write into {folder}")
    return out.absolute()


def model_folder(path: str, option: str) -> Path:
    """The HF folder ``path`` names: itself (config.json), or an export folder's model."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise Refused(f"{option} {path}: no such folder (give an HF model folder or a layersearch export-vllm folder)")
    if (folder / "vllm.json").is_file():
        return model_folder(str(export_settings(folder, option)["model"]), f"{option} {path}'s model")
    if not (folder / "config.json").is_file():
        raise Refused(f"{option} {path}: neither an HF model folder (config.json) nor an export folder (vllm.json)")
    if not any(folder.glob("*.safetensors")):
        raise Refused(f"{option} {path}: no .safetensors weights there")
    return folder.resolve()


def export_settings(folder: Path, option: str) -> dict[str, Any]:
    """An export folder's vllm.json, its keys checked."""
    where = f"{option} {folder}"
    if not (folder / "vllm.json").is_file():
        raise Refused(f"{where}: not a layersearch export-vllm folder (no vllm.json)")
    try:
        settings = json.loads((folder / "vllm.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise Refused(f"{where}: vllm.json is not readable JSON ({exc})") from None
    if not (isinstance(settings, dict) and isinstance(settings.get("model"), str) and isinstance(settings.get("dtype"), str)
            and isinstance(settings.get("speculative_config"), dict)):
        raise Refused(f"{where}: vllm.json needs model, dtype and speculative_config (written by layersearch export-vllm)")
    return settings


def export_configs(folders: list[str], model: Path, dtype: str) -> list[Config]:
    """One configuration per export folder; refused unless it serves ``model`` in ``dtype``."""
    configs: list[Config] = []
    for given in folders:
        folder = Path(given).expanduser()
        if not folder.is_dir():
            raise Refused(f"--exports {given}: no such folder")
        settings = export_settings(folder, "--exports")
        if settings["dtype"] != dtype:
            raise Refused(f"--exports {given}: exported for {settings['dtype']}, the run is {dtype} (--dtype)")
        served = Path(settings["model"]).expanduser()
        if not served.is_dir() or not same_model(served, model):
            raise Refused(f"--exports {given}: its model {served} is not --model's {model}")
        speculative = dict(settings["speculative_config"])
        draft = speculative.get("model")
        if draft is not None and not (Path(str(draft)).expanduser() / "config.json").is_file():
            raise Refused(f"--exports {given}: its draft model {draft} is missing")
        name = folder.resolve().name
        names = [c.name for c in configs]
        configs.append(Config(name if name not in names else f"{name}#{len(configs) + 1}", speculative, str(folder.resolve())))
    return configs


def same_model(a: Path, b: Path) -> bool:
    """Whether two HF folders hold the same config and weights (hard links, or the same bytes)."""
    if a.resolve() == b.resolve():
        return True
    names = sorted(p.name for p in a.glob("*.safetensors")) + ["config.json"]
    if names != sorted(p.name for p in b.glob("*.safetensors")) + ["config.json"]:
        return False
    for name in names:
        x, y = a / name, b / name
        if not (y.is_file() and (os.path.samefile(x, y) or filecmp.cmp(x, y, shallow=False))):
            return False
    return True


def read_prompts(path: str) -> list[str]:
    """The text of every non-blank line of a ``{"prompt": ...}`` JSONL file, in order."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise Refused(f"--prompts {path}: no such file")
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise Refused(f"--prompts {path}: not readable as UTF-8 text ({exc})") from None
    texts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            raise Refused(f"--prompts {path}:{number}: not a JSON object") from None
        text = item.get("prompt") if isinstance(item, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise Refused(f"--prompts {path}:{number}: expected {{\"prompt\": \"...\"}} (this benchmark sends text prompts; "
                          f"chat rows need the model's template)")
        texts.append(text)
    if not texts:
        raise Refused(f"--prompts {path}: no prompts")
    return texts


def check_vllm() -> None:
    """vLLM importable from this python (looked up, not imported: the engines import it)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise Refused(f"this python ({sys.executable}) has no vLLM: run the script with vLLM's python "
                      f"(layersearch vllm-env DIR makes one)")


# --- memory: which schedule ---------------------------------------------------------------


def weights_bytes(folder: Path, dtype: str) -> int:
    """The bytes a folder's safetensors weights take in ``dtype`` (integer tensors as stored)."""
    total = 0
    for file in sorted(folder.glob("*.safetensors")):
        with open(file, "rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(size))
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            count = 1
            for n in entry["shape"]:
                count *= n
            kind = entry["dtype"]
            total += count * (DTYPE_BYTES[dtype] if kind in FLOAT_BYTES else STORED_BYTES.get(kind, 4))
    return total


def estimate(config: Config, job: Job) -> int:
    """An engine's memory: the target's and the draft's weights, its KV cache (CPU), its processes."""
    draft = (config.speculative or {}).get("model")
    total = weights_bytes(job.model, job.dtype) + ENGINE_PROCESSES_BYTES
    if draft is not None:
        total += weights_bytes(Path(str(draft)).expanduser(), job.dtype)
    return total + (job.kv_cache_gib * GIB if job.device == "cpu" else 0)


def choose_schedule(job: Job) -> tuple[str, str, tuple[Config, ...]]:
    """(schedule, why, configurations with their estimates)."""
    configs = tuple(Config(c.name, c.speculative, c.export, estimate(c, job)) for c in job.configs)
    need = sum(c.estimate_bytes for c in configs)
    if job.device == "cpu":
        have = mem_available()
        fits = have is not None and need <= FIT_SHARE * have
        where = f"{gib(have)} available" if have is not None else "available memory unknown"
    else:
        total = gpu_memory()
        share = job.gpu_memory_utilization / len(configs)
        fits = total is not None and all(c.estimate_bytes <= share * total for c in configs)
        where = f"{gib(total)} GPU memory, {share:.2f} of it per engine" if total is not None else "GPU memory unknown"
    why = f"engines need about {gib(need)} together; {where}"
    if job.schedule != "auto":
        return job.schedule, f"{job.schedule} as asked ({why})", configs
    return ("alive" if fits else "restart"), why, configs


def mem_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def gpu_memory() -> int | None:
    """The first GPU's memory (nvidia-smi), None where it cannot be read."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30)
        return int(done.stdout.split()[0]) * 2**20 if done.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def gib(value: int | None) -> str:
    return "?" if value is None else f"{value / GIB:.1f} GiB"


# --- the run ------------------------------------------------------------------------------


def steps(schedule: str, names: list[str], repeats: int) -> list[tuple[str, str, int]]:
    """The schedule as (start | round | stop, configuration, repeat); each repeat's rounds in a
    rotated order, so no configuration always runs first."""
    def order(r: int) -> list[str]:
        return names[r % len(names):] + names[:r % len(names)]

    if schedule == "alive":
        return ([("start", n, 0) for n in names] + [("round", n, r) for r in range(repeats) for n in order(r)]
                + [("stop", n, 0) for n in names])
    if schedule == "restart":
        return [(action, n, r) for r in range(repeats) for n in order(r) for action in ("start", "round", "stop")]
    return [step for n in names for step in ([("start", n, 0)] + [("round", n, r) for r in range(repeats)] + [("stop", n, 0)])]


def run(job: Job, argv: list[str]) -> int:
    """Measure every configuration on its schedule, print the table, write ``--out``."""
    schedule, why, configs = choose_schedule(job)
    by_name = {c.name: c for c in configs}
    for note in job.notes:
        print(f"note: {note}", flush=True)
    print(f"{len(job.rows)} rows x {job.max_new_tokens} new tokens, concurrency {','.join(map(str, job.concurrency))}, "
          f"{job.repeats} repeats, {job.dtype} on {job.device}; schedule {schedule}: {why}", flush=True)
    logs = Path(tempfile.mkdtemp(prefix="vllm_serve."))
    engines: dict[str, Engine] = {}
    rounds: list[dict[str, Any]] = []
    started: list[dict[str, Any]] = []
    alive = 1 if schedule != "alive" else len(configs)
    try:
        for action, name, repeat in steps(schedule, [c.name for c in configs], job.repeats):
            if action == "start":
                engines[name] = Engine(by_name[name], job, logs, alive)
                started.append({"config": name, "repeat": repeat, **engines[name].ready()})
                print(f"{name}: engine started in {started[-1]['startup_s']:.0f} s, "
                      f"{gib(started[-1]['rss_bytes'])} resident", flush=True)
            elif action == "round":
                waves = engines[name].round(repeat)
                rounds.append({"config": name, "repeat": repeat, "waves": waves})
                print(f"repeat {repeat + 1}/{job.repeats} {name}: " + ", ".join(
                    f"c={c} {tokens_per_s(w):.1f} tok/s" for c, w in by_concurrency(waves, job.concurrency)), flush=True)
            else:
                engines.pop(name).stop()
    finally:
        for engine in engines.values():
            engine.stop()
    summary = summarize(job, configs, rounds)
    print(table(job, summary))
    failures = [s for s in summary if job.dtype == "float32" and s["identical_to_plain"][0] != s["identical_to_plain"][1]]
    if job.out is not None:
        record = {"argv": argv, "python": sys.executable, **provenance(), "machine": machine(started),
                  "settings": settings_record(job, schedule, why), "configs": [config_record(c) for c in configs],
                  "engines": started, "rounds": rounds, "summary": summary}
        write_new(job.out, json.dumps(record, indent=1) + "\n")
        print(f"wrote {job.out}", flush=True)
    remove_logs(logs)
    for s in failures:
        print(f"float32: {s['config']} at concurrency {s['concurrency']} gives other tokens than plain in "
              f"{s['identical_to_plain'][1] - s['identical_to_plain'][0]} of {s['identical_to_plain'][1]} rows: "
              f"a correctness failure", file=sys.stderr, flush=True)
    return 1 if failures else 0


class Engine:
    """One configuration's engine, in a process of its own: rounds on request, replies as JSON lines."""

    def __init__(self, config: Config, job: Job, logs: Path, alive: int) -> None:
        self.config = config
        self.log_path = logs / f"{len(list(logs.iterdir()))}-{config.name.replace(' ', '_').replace('/', '_')}.log"
        read, write = os.pipe()
        env = dict(os.environ)
        if job.device == "cpu":
            env["VLLM_CPU_KVCACHE_SPACE"] = str(job.kv_cache_gib)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), WORKER, str(write)],
                                            stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, pass_fds=(write,),
                                            env=env, start_new_session=True, text=True)
        os.close(write)
        self.replies: TextIO = os.fdopen(read, "r")
        self.send(worker_job(config, job, alive))

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
        except (OSError, ValueError):
            self.failed()

    def reply(self) -> dict[str, Any]:
        line = self.replies.readline()
        if not line:
            self.failed()
        message = json.loads(line)
        if "error" in message:
            self.failed(message["error"])
        return message

    def failed(self, error: str | None = None) -> None:
        code = self.process.wait() if error is None else None
        self.stop()
        what = error or f"its process ended (exit status {code})"
        raise Failed(f"the {self.config.name} engine failed: {what}; its log: {self.log_path}")

    def ready(self) -> dict[str, Any]:
        return self.reply()["ready"]

    def round(self, repeat: int) -> list[dict[str, Any]]:
        self.send({"cmd": "round", "repeat": repeat})
        return self.reply()["waves"]

    def stop(self) -> None:
        """Ask the engine to end; its process group is ended if it has not within a minute."""
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(json.dumps({"cmd": "stop"}) + "\n")
                self.process.stdin.close()
            except (OSError, ValueError):  # the process ended, or its stdin is closed already
                pass
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.replies.close()


def worker_job(config: Config, job: Job, alive: int) -> dict[str, Any]:
    """What an engine's process needs: vLLM's engine arguments and the measured rows."""
    engine: dict[str, Any] = {"model": str(job.model), "dtype": job.dtype, "max_model_len": job.max_model_len,
                              "disable_log_stats": False, "enable_prefix_caching": False, "seed": 0,
                              "max_num_seqs": min(max(job.concurrency), len(job.rows)),
                              "enforce_eager": job.device == "cpu"}
    if config.speculative is not None:
        engine["speculative_config"] = config.speculative
    if job.device == "cuda":
        engine["gpu_memory_utilization"] = job.gpu_memory_utilization / alive
    return {"engine": engine, "device": job.device, "kv_cache_gib": job.kv_cache_gib, "prompts": list(job.prompts),
            "concurrency": list(job.concurrency), "max_new_tokens": job.max_new_tokens}


def remove_logs(folder: Path) -> None:
    for entry in folder.iterdir():
        entry.unlink()
    folder.rmdir()


def write_new(path: Path, text: str) -> None:
    """Write ``path`` whole, never over a file that appeared meanwhile (a link, not a rename)."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        try:
            os.link(temporary, path)
        except FileExistsError:
            raise Failed(f"--out {path}: appeared during the run; it is never overwritten (the run is lost)") from None
    finally:
        os.unlink(temporary)


# --- an engine's process --------------------------------------------------------------------


def worker(fd: int) -> int:
    """Start one engine (the job on stdin's first line), warm it, then serve rounds until ``stop``."""
    os.set_inheritable(fd, False)  # vLLM's own processes must not hold it: the parent sees this process end
    replies = os.fdopen(fd, "w", buffering=1)
    try:
        job = json.loads(sys.stdin.readline())
        if job["device"] == "cpu":
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(job["kv_cache_gib"])  # read when vLLM is imported
        from vllm import LLM, SamplingParams

        before = mem_available()
        began = time.perf_counter()
        llm = LLM(**job["engine"])
        width = min(max(job["concurrency"]), len(job["prompts"]))
        llm.generate(job["prompts"][:width], SamplingParams(temperature=0.0, max_tokens=8), use_tqdm=False)  # warm, untimed
        after = mem_available()
        ready = {"startup_s": time.perf_counter() - began, "rss_bytes": tree_rss(os.getpid()),
                 "mem_available_drop": None if before is None or after is None else before - after, "gpu": gpu_name()}
        replies.write(json.dumps({"ready": ready}) + "\n")
        sampling = SamplingParams(temperature=0.0, max_tokens=job["max_new_tokens"])
        for line in sys.stdin:
            command = json.loads(line)
            if command["cmd"] == "stop":
                break
            replies.write(json.dumps({"waves": measure_round(llm, sampling, job)}) + "\n")
    except Exception as exc:  # the engine's own message, to the parent's one line; the traceback to the log
        import traceback

        traceback.print_exc()
        replies.write(json.dumps({"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"}) + "\n")
        return 1
    return 0


def measure_round(llm: Any, sampling: Any, job: dict[str, Any]) -> list[dict[str, Any]]:
    """Every concurrency's waves: c prompts per ``llm.generate`` call, timed, with the spec counters' change."""
    prompts = job["prompts"]
    waves = []
    for c in job["concurrency"]:
        for start in range(0, len(prompts), c):
            rows = list(range(start, min(start + c, len(prompts))))
            before = spec_counts(llm)
            began = time.perf_counter()
            outputs = llm.generate([prompts[i] for i in rows], sampling, use_tqdm=False)
            seconds = time.perf_counter() - began
            after = spec_counts(llm)
            waves.append({"concurrency": c, "rows": rows, "seconds": seconds,
                          "tokens": [[int(t) for t in o.outputs[0].token_ids] for o in outputs],
                          "request_tpot_s": [request_tpot(o) for o in outputs],
                          "spec": {k: _minus(after[k], before[k]) for k in after}})
    return waves


def spec_counts(llm: Any) -> dict[str, Any]:
    """The cumulative spec-decode counters (summed over engines' labels): drafts, draft_tokens,
    accepted, and accepted tokens per draft position."""
    counts: dict[str, Any] = {key: 0 for key in SPEC_COUNTERS}
    counts["per_position"] = []
    names = {name: key for key, name in SPEC_COUNTERS.items()}
    for metric in llm.get_metrics():
        if metric.name in names:
            counts[names[metric.name]] += int(metric.value)
        elif metric.name == PER_POSITION:
            counts["per_position"] = _plus(counts["per_position"], [int(v) for v in metric.values])
    return counts


def _plus(a: list[int], b: list[int]) -> list[int]:
    return [x + y for x, y in zip(a + [0] * (len(b) - len(a)), b + [0] * (len(a) - len(b)))]


def _minus(after: Any, before: Any) -> Any:
    if isinstance(after, list):
        return _plus(after, [-v for v in before])
    return after - before


def request_tpot(output: Any) -> float | None:
    """A request's seconds per output token after its first (vLLM's token timestamps), None without them."""
    stats = getattr(output, "metrics", None)
    n = len(output.outputs[0].token_ids)
    first, last = getattr(stats, "first_token_ts", 0.0), getattr(stats, "last_token_ts", 0.0)
    if stats is None or n < 2 or not first or not last:
        return None
    return (last - first) / (n - 1)


def tree_rss(pid: int) -> int:
    """The resident bytes of ``pid`` and its descendants (shared pages counted in each)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            status = (entry / "status").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
        rss[int(entry.name)] = next((int(line.split()[1]) * 1024 for line in status.splitlines()
                                     if line.startswith("VmRSS:")), 0)
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += rss.get(current, 0)
        todo += children.get(current, [])
    return total


def gpu_name() -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # the name is provenance only
        return None


# --- the summary ------------------------------------------------------------------------------


def by_concurrency(waves: list[dict[str, Any]], levels: Iterable[int]) -> list[tuple[int, list[dict[str, Any]]]]:
    return [(c, [w for w in waves if w["concurrency"] == c]) for c in levels]


def tokens_per_s(waves: list[dict[str, Any]]) -> float:
    seconds = sum(w["seconds"] for w in waves)
    return sum(len(t) for w in waves for t in w["tokens"]) / seconds if seconds else 0.0


def wave_tpot(waves: list[dict[str, Any]]) -> float:
    """Seconds per token of the batch: each wave's wall time over its longest output, pooled."""
    longest = sum(max((len(t) for t in w["tokens"]), default=0) for w in waves)
    return sum(w["seconds"] for w in waves) / longest if longest else 0.0


def tokens_by_row(waves: list[dict[str, Any]]) -> dict[int, list[int]]:
    return {row: tokens for w in waves for row, tokens in zip(w["rows"], w["tokens"])}


def summarize(job: Job, configs: tuple[Config, ...], rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration and concurrency: speed, speedup, acceptance, identity (see the module docstring)."""
    waves = {(r["config"], r["repeat"], c): w for r in rounds for c, w in by_concurrency(r["waves"], job.concurrency)}
    lowest = min(job.concurrency)
    summary = []
    for config in configs:
        for c in job.concurrency:
            mine = [waves[config.name, r, c] for r in range(job.repeats)]
            plain = [waves["plain", r, c] for r in range(job.repeats)]
            speeds, plain_speeds = [tokens_per_s(w) for w in mine], [tokens_per_s(w) for w in plain]
            spec = {key: sum(w["spec"][key] for ws in mine for w in ws) for key in SPEC_COUNTERS}
            per_position: list[int] = []
            for w in (w for ws in mine for w in ws):
                per_position = _plus(per_position, w["spec"]["per_position"])
            spec["per_position"] = per_position
            same_plain = identical(mine, plain)
            same_lowest = identical(mine, [waves[config.name, r, lowest] for r in range(job.repeats)])
            tpots = [t for ws in mine for w in ws for t in w["request_tpot_s"] if t is not None]
            summary.append({
                "config": config.name, "concurrency": c, "tokens_per_s": speeds,
                "tpot_s": [wave_tpot(w) for w in mine], "request_tpot_s": statistics.mean(tpots) if tpots else None,
                "speedup_of_medians": statistics.median(speeds) / statistics.median(plain_speeds),
                "speedup_paired": statistics.median(a / b for a, b in zip(speeds, plain_speeds)),
                "spec": spec, "acceptance": spec["accepted"] / spec["draft_tokens"] if spec["draft_tokens"] else None,
                "mean_accepted_length": 1 + spec["accepted"] / spec["drafts"] if spec["drafts"] else None,
                "identical_to_plain": same_plain, "identical_to_lowest_concurrency": same_lowest})
    return summary


def identical(mine: list[list[dict[str, Any]]], theirs: list[list[dict[str, Any]]]) -> list[int]:
    """[rows whose tokens are the same, rows], over the repeats."""
    pairs = [(a.get(row), b.get(row)) for x, y in zip(mine, theirs)
             for a, b in [(tokens_by_row(x), tokens_by_row(y))] for row in a]
    return [sum(p == q for p, q in pairs), len(pairs)]


def table(job: Job, summary: list[dict[str, Any]]) -> str:
    """The printed table: one line per configuration and concurrency."""
    lowest = min(job.concurrency)
    tie = " (bf16: ties may break differently)" if job.dtype == "bfloat16" else \
        " (fp16: ties may break differently)" if job.dtype == "float16" else ""
    lines = [f"vLLM on {job.device}, {job.dtype}, {len(job.rows)} rows x {job.max_new_tokens} tokens, {job.repeats} repeats",
             f"| config | concurrency | tokens/s median [min-max] | TPOT ms (batch / request) | speedup (medians / paired) "
             f"| acceptance | mean accepted length | = plain | = c{lowest} |",
             "|" + "---|" * 9]
    for s in summary:
        speeds = s["tokens_per_s"]
        request = f"{s['request_tpot_s'] * 1000:.1f}" if s["request_tpot_s"] is not None else "-"
        speedup = "1.00x" if s["config"] == "plain" else f"{s['speedup_of_medians']:.2f}x / {s['speedup_paired']:.2f}x"
        acceptance = f"{s['acceptance']:.2f}" if s["acceptance"] is not None else "-"
        length = f"{s['mean_accepted_length']:.2f}" if s["mean_accepted_length"] is not None else "-"
        same, lower = s["identical_to_plain"], s["identical_to_lowest_concurrency"]
        lines.append(f"| {s['config']} | {s['concurrency']} | {statistics.median(speeds):.1f} [{min(speeds):.1f}-{max(speeds):.1f}] "
                     f"| {statistics.median(s['tpot_s']) * 1000:.1f} / {request} | {speedup} | {acceptance} | {length} "
                     f"| {same[0]}/{same[1]}{tie} | {lower[0]}/{lower[1]}{tie} |")
    return "\n".join(lines)


# --- provenance ------------------------------------------------------------------------------


def provenance() -> dict[str, Any]:
    """This checkout's commit (and whether it has changes), and the packages that did the work."""
    from importlib import metadata

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    def version(*names: str) -> str | None:
        for name in names:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "uncommitted_changes": None if status is None else bool(status),
            "versions": {"vllm": version("vllm", "vllm-cpu"), "torch": version("torch"),
                         "transformers": version("transformers"), "python": sys.version.split()[0]}}


def machine(started: list[dict[str, Any]]) -> dict[str, Any]:
    cpu = None
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), None)
    except OSError:
        pass
    gpus = {s["gpu"] for s in started if s.get("gpu")}
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_available_bytes": mem_available(),
            "gpu": sorted(gpus)[0] if gpus else None}


def settings_record(job: Job, schedule: str, why: str) -> dict[str, Any]:
    return {"model": str(job.model), "dtype": job.dtype, "device": job.device, "prompts": job.prompts_file, "rows": list(job.rows),
            "row_splits": list(job.splits), "max_new_tokens": job.max_new_tokens, "concurrency": list(job.concurrency),
            "repeats": job.repeats, "schedule": schedule, "schedule_reason": why, "max_model_len": job.max_model_len,
            "kv_cache_gib": job.kv_cache_gib if job.device == "cpu" else None,
            "gpu_memory_utilization": job.gpu_memory_utilization if job.device == "cuda" else None,
            "prefix_caching": False, "notes": list(job.notes)}


def config_record(config: Config) -> dict[str, Any]:
    return {"name": config.name, "speculative_config": config.speculative, "export": config.export,
            "estimate_bytes": config.estimate_bytes}


if __name__ == "__main__":  # vLLM starts processes that import this module again
    sys.exit(main())
