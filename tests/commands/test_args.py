"""The CLI's shared arguments: one registration pattern, defaults equal to the runtime's."""

from __future__ import annotations

import argparse
import importlib

import pytest

from layersearch.cli import COMMANDS, build_parser
from layersearch.decoder.spec import LookaheadSpec
from layersearch.runtime import DRAFT_THRESHOLD, MAX_DRAFT
from layersearch.runtime.draft_policy import DraftPolicy

#: Commands whose longest draft is a method's own setting, not the runtime's default.
OWN_MAX_DRAFT = {"knapspec bench": 10}  # KnapSpec's D


def test_draft_defaults_are_the_runtime_defaults():
    policy, spec = DraftPolicy(), LookaheadSpec()
    assert (policy.max_draft, policy.threshold) == (spec.max_draft, spec.threshold) == (MAX_DRAFT, DRAFT_THRESHOLD)
    args = build_parser().parse_args(["generate", "--prompt", "x"])
    assert (args.max_draft, args.draft_threshold) == (MAX_DRAFT, DRAFT_THRESHOLD)


def _parsers(parser: argparse.ArgumentParser, path: str = ""):
    """Each (sub)command's parser with its path (``study create``), the subcommands followed."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{path} {name}".strip())


def test_every_max_draft_option_defaults_to_the_one_constant():
    defaults = {path: action.default for path, parser in _parsers(build_parser())
                for action in parser._actions if action.dest == "max_draft"}
    assert len(defaults) >= 8  # generate, bench, study create, disco, steer eval, knn, swift, transfer, ...
    assert {path: d for path, d in defaults.items() if path not in OWN_MAX_DRAFT} == {
        path: MAX_DRAFT for path in defaults if path not in OWN_MAX_DRAFT}
    assert {path: defaults[path] for path in OWN_MAX_DRAFT} == OWN_MAX_DRAFT


def test_every_command_module_registers_and_runs():
    for name in COMMANDS:
        module = importlib.import_module(f"layersearch.commands.{name}")
        assert callable(module.add_parser) and callable(module.run)


def test_study_defaults_are_the_objectives_defaults():
    from layersearch.objectives import DEFAULT_GAMMA, DEFAULT_MAX_NEW_TOKENS, DEFAULT_SAMPLES

    args = build_parser().parse_args(["study", "create", "--name", "s", "--domain", "math", "--strategy", "tpe", "--objective", "tpt"])
    assert (args.samples, args.max_new_tokens, args.gamma) == (DEFAULT_SAMPLES, DEFAULT_MAX_NEW_TOKENS, DEFAULT_GAMMA)
    assert (args.max_draft, args.draft_threshold) == (MAX_DRAFT, DRAFT_THRESHOLD)


def test_demo_runs_tune_with_its_own_parser():
    from layersearch.commands.demo import tune_args

    quick = tune_args("--prompts", "p.jsonl", "--budget", "5", "--out", "s.json")
    assert (quick.budget, quick.repeats, quick.train_prompts, quick.report, quick.name) == (5.0, 2, None, None, None)  # None: what the file holds


def test_study_help_names_every_registered_strategy(capsys):
    from layersearch.strategies import STRATEGIES

    with pytest.raises(SystemExit):
        build_parser().parse_args(["study", "create", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(name in text for name in STRATEGIES)


def test_kernel_choices_are_the_runtime_choices():
    from layersearch.commands.args import KERNEL_CHOICES
    from layersearch.kernels.select import CHOICES

    assert KERNEL_CHOICES == CHOICES
    for command in (["generate", "--prompt", "x"], ["profile"], ["bench"]):
        assert build_parser().parse_args(command).kernels == "auto"


def test_compile_choices_match_the_spec():
    from layersearch.commands.args import COMPILE_CHOICES
    from layersearch.decoder.spec import COMPILE_CHOICES as SPEC_CHOICES

    assert COMPILE_CHOICES == SPEC_CHOICES
