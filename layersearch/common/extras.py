"""Optional dependencies: which extra installs which package, and the one line when one is missing.

The base install is the runtime (``generate``, ``load_decoder``, specs, ``bench``). The searches,
the pictures and the numba CPU kernels are extras of pyproject.toml; a command that needs a missing
one stops with one error line naming the ``pip install`` to run (:func:`require_extra`), and
``kernels="auto"`` runs the stock kernels without numba, saying so once (:func:`note_once`).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

from layersearch.common.errors import LayersearchError

#: Extra -> the top-level modules layersearch imports from it (pyproject.toml's optional
#: dependencies; the search extra also installs optuna-dashboard, a program of its own).
EXTRAS: dict[str, tuple[str, ...]] = {
    "search": ("optuna", "botorch", "gpytorch"),
    "plots": ("matplotlib",),
    "kernels": ("numba",),
}


class MissingExtra(LayersearchError):
    """An optional package is not installed; the message names the extra to install."""


def install_command(extra: str) -> str:
    """The command that installs ``extra`` into a checkout (the README's install is editable)."""
    return f'pip install -e ".[{extra}]"'


def extra_of(module: str | None) -> str | None:
    """The extra that installs ``module`` (a dotted name; its top level decides), or None."""
    top = (module or "").partition(".")[0]
    return next((extra for extra, modules in EXTRAS.items() if top in modules), None)


def missing_message(module: str, extra: str | None = None) -> str:
    """The one line for a missing ``module``: what is missing and the install command."""
    extra = extra or extra_of(module) or "search"
    return f"{module.partition('.')[0]} is not installed; it comes with the {extra} extra: {install_command(extra)}"


def has_module(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a half-removed module
        return False


def require_extra(module: str, extra: str | None = None) -> ModuleType:
    """Import ``module``; when it is not installed, a :class:`MissingExtra` naming ``extra``'s install.

    ``extra`` defaults to the extra :data:`EXTRAS` lists ``module`` under."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        # Only the package itself missing is the extra's fault; a broken install says what it lacks.
        top = module.partition(".")[0]
        if exc.name is not None and exc.name.partition(".")[0] != top:
            raise
        raise MissingExtra(missing_message(module, extra)) from None


def require_extras(*extras: str) -> None:
    """Check that every module of each of ``extras`` imports (found, not loaded): one line otherwise."""
    for extra in extras:
        for module in EXTRAS[extra]:
            if not has_module(module):
                raise MissingExtra(missing_message(module, extra))


_NOTED: set[str] = set()


def note_once(message: str) -> None:
    """Print ``layersearch: note: message`` on stderr, once per process for each message."""
    if message in _NOTED:
        return
    _NOTED.add(message)
    print(f"layersearch: note: {message}", file=sys.stderr, flush=True)
