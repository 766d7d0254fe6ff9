"""The base install is the runtime: with the search, plot and kernel packages unimportable,
decoding with a skip mask and loading a spec still work, ``--kernels auto`` runs the stock
kernels (said once), KnapSpec's knapsack answers without numba, and a command that needs a
missing extra stops in one error line naming the ``pip install`` to run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from layersearch.commands.requires import COMMAND_EXTRAS, needed_extras
from layersearch.common.extras import EXTRAS, install_command

ROOT = Path(__file__).resolve().parents[2]
#: What the extras install, as import names: none of it may be needed by the runtime.
BLOCKED = ("optuna", "optuna_dashboard", "optuna_integration", "botorch", "gpytorch", "matplotlib", "numba")

# Hides the blocked packages from every finder, so they look uninstalled: ``import`` raises
# ModuleNotFoundError and importlib.util.find_spec answers None, as on a base install.
SITECUSTOMIZE = f"""
import sys

BLOCKED = {BLOCKED!r}


class _Hidden:
    def __init__(self, finder):
        self._finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            return None
        find = getattr(self._finder, "find_spec", None)
        return find(name, path, target) if find else None

    def __getattr__(self, attribute):
        return getattr(self._finder, attribute)


sys.meta_path[:] = [_Hidden(finder) for finder in sys.meta_path]
"""

RUNTIME_SCRIPT = """
import json
import sys

for name in {blocked!r}:  # the blocker works: each extra's package is unimportable
    try:
        __import__(name)
    except ModuleNotFoundError:
        continue
    raise SystemExit(f"{{name}} is importable")

import numpy as np
import torch

import layersearch
from layersearch.knapspec.solver import solve_all_budgets, solve_all_budgets_reference
from layersearch.profiling.profile import LatencyProfile
from layersearch.kernels.select import choose_kernels
from layersearch.profiling.profiler import measure_profile
from layersearch.decoder.spec import DecoderSpec, LookaheadSpec, MaskSourceSpec, ModelRef, ModelSpec

torch.set_num_threads(1)
folder, out = sys.argv[1], sys.argv[2]
spec = DecoderSpec(ModelSpec(ModelRef(folder, True)), mask_source=MaskSourceSpec("uniform", skip_ratio=0.5),
                   lookahead=LookaheadSpec("static", 3), max_new_tokens=16)
decoder = layersearch.load_decoder(spec)
prompt = "w5 w9 w17 w33 w8 w64 w3 w5 w9"
ids = decoder.tokenizer(prompt, return_tensors="pt").input_ids
plain = decoder.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False)
result = decoder.generate(prompt)
path = decoder.spec.save(folder + "-spec.json")
again = layersearch.load_decoder(path, model=(decoder.model, decoder.tokenizer)).generate(prompt)

profile = measure_profile(decoder.model, decoder.spec.model.info, contexts=(8, 16), max_verify=2, repeats=1,
                          kernels="auto")
numba_profile = LatencyProfile.from_dict({{**profile.to_dict(), "kernels": "numba"}})
weights, values = np.array([3, 1, 4, 1, 5]), np.array([0.5, 0.2, -0.1, 0.9, 0.4])
with open(out, "w") as f:
    json.dump({{
        "plain": plain[0, ids.shape[1]:].tolist(), "speculative": list(result.token_ids), "again": list(again.token_ids),
        "drafted": result.stats.drafted, "masked": len(decoder.spec.mask_source.mask.attention) if decoder.spec.mask_source.mask else None,
        "profile_kernels": profile.kernels, "auto_with_numba_profile": choose_kernels("auto", numba_profile),
        "knapsack": [a.tolist() for a in solve_all_budgets(weights, values, 6)],
        "knapsack_reference": [a.tolist() for a in solve_all_budgets_reference(weights, values, 6)],
    }}, f)
"""


@pytest.fixture(scope="module")
def base_env(tmp_path_factory) -> dict[str, str]:
    """The environment of a process where the extras' packages cannot be imported."""
    folder = tmp_path_factory.mktemp("blocker")
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {k: v for k, v in os.environ.items() if k != "LAYERSEARCH_DEBUG"}
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(ROOT), env.get("PYTHONPATH", "")])
    return env


def run_cli(env: dict[str, str], *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "layersearch", *argv], env=env, cwd=cwd, capture_output=True,
                          text=True)


def test_the_runtime_runs_without_the_extras(base_env, tiny_word_models, tmp_path):
    out = tmp_path / "result.json"
    script = RUNTIME_SCRIPT.format(blocked=BLOCKED)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script), str(tiny_word_models[0]), str(out)],
                          env=base_env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["speculative"] == result["plain"] == result["again"] and len(result["plain"]) == 16
    assert result["drafted"] > 0  # a skip mask drafted, and the output is still plain decoding's
    # --kernels auto without numba: the profile times stock only, a profile that chose numba runs stock
    assert result["profile_kernels"] == "stock" and result["auto_with_numba_profile"] == "stock"
    notes = [line for line in done.stderr.splitlines() if "numba is not installed" in line]
    assert len([n for n in notes if "kernels 'auto'" in n]) == 1, done.stderr  # said once
    assert result["knapsack"] == result["knapsack_reference"]  # KnapSpec chooses the same without numba


def test_generate_with_a_skip_mask_on_the_base_install(base_env, tiny_word_models):
    done = run_cli(base_env, "generate", "--model", str(tiny_word_models[0]), "--mask", "uniform:0.5", "--threads", "1",
                   "--prompt", "w5 w9 w17 w33", "--max-new-tokens", "8", "--json")
    assert done.returncode == 0, done.stderr
    assert "layersearch: error" not in done.stderr


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["study", "list", "--storage", "sqlite:///x.db"], "search"),
        (["tune", "--prompts", "p.jsonl", "--budget", "1", "--out", "spec.json"], "search"),
        (["plot", "mask", "mask.json"], "plots"),
        (["generate", "--prompt", "x", "--kernels", "numba"], "kernels"),
    ],
)
def test_a_command_missing_its_extra_is_one_line(base_env, tmp_path, argv, extra):
    done = run_cli(base_env, *argv, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("layersearch: error: ")
    assert install_command(extra) in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_every_table_extra_exists_and_options_add_theirs():
    assert {extra for needed in COMMAND_EXTRAS.values() for extra in needed} <= set(EXTRAS)

    class Args:
        def __init__(self, **fields):
            self.__dict__.update(fields)

    assert needed_extras(Args(command="generate", kernels="auto")) == ()
    assert needed_extras(Args(command="generate", kernels="numba", on_the_fly="swift")) == ("kernels", "search")
    assert needed_extras(Args(command="study", action="head-to-head")) == ("search", "plots")
    assert needed_extras(Args(command="knn", action="build", domain=["code=study:c@sqlite:///c.db"], pca=None)) == ("search",)
    assert needed_extras(Args(command="knn", action="bench", plot="mix.png")) == ("plots",)
