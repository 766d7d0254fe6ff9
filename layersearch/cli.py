"""Command-line entry point: ``layersearch <command> ...`` and ``python -m layersearch``.

This module only builds the argument parsers and dispatches: each command is a module in
``layersearch/commands/`` (:data:`COMMANDS`) whose top level imports neither torch nor Optuna,
so ``--help`` stays fast; the heavy imports happen inside ``run``. Bad input
ends in one ``layersearch: error: ...`` line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from layersearch.common.errors import LayersearchError
from layersearch import __version__

#: The commands, one module each under layersearch/commands/ with ``add_parser(sub,
#: parser_class)`` and ``run(args)``; the order is the order of ``--help`` (``export_hf``: the
#: command ``export-hf``).
COMMANDS = ("generate", "mask", "profile", "bench", "demo", "study", "plot", "knapspec", "transfer", "disco",
            "knn", "swift", "steer", "tune", "export_hf", "export_vllm", "vllm_env")


#: Options whose empty value means "none of them" (``bench --drafters ""``: no peer drafters);
#: every other option refuses an empty value (see :meth:`Parser.parse_known_args`).
EMPTY_MEANS_NONE = frozenset({"drafters", "skip_ratios", "peers"})


class _Unset(str):
    """An empty default as argparse stores it when the option is left out: equal to "" for the
    commands, but told apart from an empty value the user typed."""


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line instead of usage + error, starting
    ``layersearch: error:`` like every other error, and naming the command; an empty value
    (``--spec ''``) is a usage error too."""

    def error(self, message: str) -> None:  # type: ignore[override]
        command = self.prog.partition(" ")[2]
        where = f"{command}: " if command else ""
        self.exit(2, f"layersearch: error: {where}{' '.join(message.split())}\n")

    def parse_known_args(self, args=None, namespace=None):
        """argparse's parse, then an empty value refused: a script's unset variable (``--spec "$SPEC"``)
        must not quietly run without the file, as if the option were absent. Only the options of
        :data:`EMPTY_MEANS_NONE` take one; an option left out keeps its default, even an empty one."""
        for action in self._actions:
            if type(action.default) is str and not action.default:
                action.default = _Unset()  # the option left out, not typed empty
        namespace, extras = super().parse_known_args(args, namespace)
        for action in self._actions:
            value = getattr(namespace, action.dest, None)
            values = value if isinstance(value, list) else [value]
            if action.dest in EMPTY_MEANS_NONE:
                continue
            if any(isinstance(v, str) and not isinstance(v, _Unset) and not v.strip() for v in values):
                name = "/".join(action.option_strings) or action.metavar or action.dest
                self.error(f"argument {name}: empty value (give one, or leave the option out)")
        return namespace, extras


#: What ``layersearch --help`` says the tool is (pyproject.toml's description says the same).
DESCRIPTION = ("Lossless speculative decoding for Hugging Face causal LMs: search and run draft plans (sub-layers "
               "skipped, in int8 or int4), prompt lookup and draft models, and tune them on your prompts.")


def build_parser() -> argparse.ArgumentParser:
    """The full ``layersearch`` argument parser."""
    parser = Parser(prog="layersearch", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"layersearch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name in COMMANDS:
        importlib.import_module(f"layersearch.commands.{name}").add_parser(sub, Parser)
    return parser


#: Set to 1 to see the traceback of a fault the CLI would otherwise report in one line.
TRACEBACK_ENV = "LAYERSEARCH_DEBUG"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status.

    2: bad input (a LayersearchError, or a usage error); 1: a fault layersearch could not
    turn into a precise message (out of memory, an I/O error, a bug), still told in one line;
    130: interrupted.
    """
    from layersearch.commands.renamed import renamed_command

    renamed = renamed_command(sys.argv[1:] if argv is None else list(argv))
    if renamed:  # an old command spelling: one line naming the new one
        return _fail(renamed, 2)
    parser = build_parser()
    args = parser.parse_args(argv)  # usage errors exit 2 through argparse
    try:
        from layersearch.commands.common import check_shared_options
        from layersearch.commands.outputs import check_overwrites

        check_shared_options(vars(args))  # seeds, draft lengths, ratios, learning rates: before any work
        from layersearch.commands.requires import check_extras

        check_extras(args)  # the optional packages this command needs (search, plots, kernels)
        module = importlib.import_module(f"layersearch.commands.{args.command}")
        derived = getattr(module, "output_paths", None)  # files a command writes beside its OUTPUT_OPTIONS
        read = getattr(module, "input_paths", None)  # files named inside its inputs (a spec's profile, mask file)
        from layersearch.commands.wording import option_words

        check_overwrites(vars(args), derived(args) if derived is not None else {},  # no output onto an input
                         read(args) if read is not None else (), option_words(parser, args))
        if not hasattr(args, "compile"):
            return int(module.run(args) or 0)
        from layersearch.common.progress import say
        from layersearch.runtime.compiling import compile_notes

        with compile_notes(lambda note: say(note.line())):  # --compile on: each forward compiling is a line on stderr
            return int(module.run(args) or 0)
    except LayersearchError as exc:
        from layersearch.commands.wording import cli_message, option_words

        return _fail(cli_message(exc, option_words(parser, args)), 2)
    except KeyboardInterrupt:
        _end_line()
        print("layersearch: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except MemoryError:
        return _fail("out of memory", 1)
    except RecursionError:
        return _fail("input nested too deeply (recursion limit reached)", 1)
    except OSError as exc:
        if os.environ.get(TRACEBACK_ENV):
            raise
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        return _fail(f"{exc.strerror or exc}{where}", 1)
    except Exception as exc:  # the promise is one line, never a traceback, even for our own bugs
        if os.environ.get(TRACEBACK_ENV):
            raise
        from layersearch.common.extras import extra_of, missing_message

        if isinstance(exc, ModuleNotFoundError) and exc.name is not None and extra_of(exc.name):  # an extra reached by a path requires.py misses
            return _fail(missing_message(exc.name), 2)
        lines = str(exc).strip().splitlines()
        first = lines[0] if lines else type(exc).__name__
        return _fail(f"{first[:300]} ({type(exc).__name__}; {TRACEBACK_ENV}=1 shows the traceback)", 1)


def _fail(message: str, status: int) -> int:
    """Print ``message`` as one ``layersearch: error:`` line on stderr and return ``status``."""
    _end_line()
    text = " ".join(message.split()) or "unknown error"
    if len(text) > 1000:
        text = text[:997] + "..."
    print(f"layersearch: error: {text}", file=sys.stderr, flush=True)
    return status


def _end_line() -> None:
    """Finish a progress line still open on stderr, so the error starts a line of its own."""
    from layersearch.common.progress import close_open_bars

    close_open_bars()


def _silence_stdout() -> None:
    """After a closed pipe, point stdout at /dev/null so the interpreter's final flush is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":
    sys.exit(main())
