"""The speculative step stays flat: what one default Self-SD step crosses is counted, not guessed.

A default step (layer-skip drafter, static rule, chain verifier, fixed mask, eager path) is
profiled with ``sys.setprofile``: the layersearch functions it calls, the files they live in,
and the layersearch value objects it builds. The budgets are what the flattened step reaches;
a change that adds per-step work or another hop fails here and has to say why.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path
from dataclasses import dataclass, field

import pytest
import torch

import layersearch
import layersearch.runtime.loop as loop
from layersearch.masks.mask import SkipMask
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.backend import compile_with
from layersearch.runtime.backend import dynamo_compiler
from layersearch.runtime.lookahead import StaticLookahead
from layersearch.runtime.loop import SpeculativeDecoder

PACKAGE = layersearch.__file__.rsplit("/", 1)[0] + "/"

#: A step after the first: everything planned once per generation or per mask is in place. The
#: step's own functions (request, verify, feed back), the step's values and plug-in defaults, the
#: drafter's chain, the verifier's rule, the backend's (forward, rollback, plan view) and the
#: recorder's (phase marks, the outcome); the loop holds no path branch. Eagerly the model's forward
#: also crosses the eager forward, the skip-aware cache and the plan's sub-layer stand-ins.
STEADY_FUNCTIONS, STEADY_FILES = 34, 9
#: The same, captured: the loop, the step's values, the drafter, the verifier, the backend (the
#: compile key, the compiled-forward table) and the recorder; the graph runs the model.
CAPTURED_FUNCTIONS, CAPTURED_FILES = 32, 6
#: The first step also builds the mask's plan view and resolves the drafter's plan (once per mask).
FIRST_FUNCTIONS, FIRST_FILES = 49, 12
#: StepRequest, Proposal, Verdict, StepOutcome.
VALUE_OBJECTS = 4


@dataclass
class Crossing:
    """What one step crossed: calls per (file, function) and layersearch objects built, by type."""

    calls: Counter = field(default_factory=Counter)
    built: Counter = field(default_factory=Counter)

    @property
    def files(self) -> set[str]:
        return {path for path, _ in self.calls}

    def profile(self, frame, event, arg) -> None:
        if event != "call":
            return
        path = frame.f_code.co_filename
        if path.startswith(PACKAGE):
            self.calls[(path[len(PACKAGE):], frame.f_code.co_name)] += 1
        if frame.f_code.co_name == "__init__" and frame.f_code.co_argcount:
            made = frame.f_locals.get(frame.f_code.co_varnames[0])
            module = type(made).__module__
            if module.startswith("layersearch.") and not isinstance(made, torch.nn.Module):
                self.built[type(made).__name__] += 1


def crossings(steps: int = 3, compile: bool = False) -> list[Crossing]:
    """The crossings of the first ``steps`` steps of a default Self-SD generation (captured: by
    dynamo's full-graph capture without inductor, compiled by a first generation, so what runs
    inside the captured graph is the graph's, not the step's)."""
    model = build_tiny_model("llama", num_layers=4, seed=0)
    model.generation_config.eos_token_id = None
    if compile:
        compile_with(model, dynamo_compiler("eager"))
    decoder = SpeculativeDecoder(model, SkipMask.uniform(4, 0.5), lookahead=StaticLookahead(3), compile=compile)
    if compile:
        decoder.generate(torch.tensor([1, 2, 3, 4, 5]), 16)  # compiles every shape the counted generation runs
    seen: list[Crossing] = []
    step = loop._Run._step

    def profiled(run) -> None:
        crossing = Crossing()
        if len(seen) < steps:
            seen.append(crossing)
            sys.setprofile(crossing.profile)
        try:
            step(run)
        finally:
            sys.setprofile(None)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loop._Run, "_step", profiled)
        result = decoder.generate(torch.tensor([1, 2, 3, 4, 5]), 16)
    assert result.stats.path == ("captured" if compile else "eager") and all(s.drafted == 3 for s in result.stats.steps[:steps])
    return seen


def test_a_steady_step_crosses_few_functions_in_few_files():
    first, *steady = crossings()
    for crossing in steady:
        assert len(crossing.calls) <= STEADY_FUNCTIONS, sorted(crossing.calls)
        assert len(crossing.files) <= STEADY_FILES, sorted(crossing.files)
    assert len(first.calls) <= FIRST_FUNCTIONS, sorted(first.calls)
    assert len(first.files) <= FIRST_FILES, sorted(first.files)


def test_a_captured_step_crosses_as_few_and_cuts_nothing():
    _, *steady = crossings(compile=True)
    for crossing in steady:
        assert len(crossing.calls) <= CAPTURED_FUNCTIONS, sorted(crossing.calls)
        assert len(crossing.files) <= CAPTURED_FILES, sorted(crossing.files)
        assert ("runtime/cache.py", "truncate_cache") not in crossing.calls  # a rollback moves nothing
        assert crossing.calls[("runtime/backend.py", "compile_key")] == 4  # 3 draft tokens, 1 verification
        assert crossing.files == {"runtime/loop.py", "runtime/step.py", "runtime/drafters/layer_skip.py",
                                  "runtime/verification.py", "runtime/backend.py", "runtime/timing.py"}


def test_per_generation_work_is_not_done_per_step():
    _, *steady = crossings()
    for crossing in steady:
        called = {name for _, name in crossing.calls}
        # The cut is one call; which layers slide, the plan's view and the mask's properties are known already.
        assert crossing.calls[("runtime/cache.py", "truncate_cache")] == 2
        assert not called & {"_can_truncate_layer", "_window", "_holds_history", "_alike", "plan_view", "view",
                             "layout_for", "is_empty", "num_skipped", "num_int8"}


def test_a_step_builds_one_request_and_three_answers():
    for crossing in crossings():
        assert sum(crossing.built.values()) <= VALUE_OBJECTS, crossing.built
        assert set(crossing.built) == {"StepRequest", "Proposal", "Verdict", "StepOutcome"}


PLUG_INS = ("drafter", "verifier", "controller", "lookahead", "part", "inner", "fallback")


@pytest.mark.parametrize("module", ["runtime/loop.py", "runtime/backend.py", "runtime/drafters/hybrid.py", "steer/drafter.py"])
def test_plug_in_capabilities_are_read_not_probed(module):
    """The bases in runtime/step.py declare every optional capability with its default: the loop,
    the backend and the wrapping drafters read them as attributes, never by getattr/hasattr."""
    tree = ast.parse((Path(PACKAGE) / module).read_text())
    probes = [
        ast.unparse(node) for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
        and any(word in ast.unparse(node.args[0]) for word in PLUG_INS)
    ]
    assert not probes, probes
