"""Which command needs which extra (pyproject.toml's optional dependencies), checked before any work.

The base install runs ``generate``, ``mask``, ``profile``, ``bench`` and the method commands that
only decode; the searches need ``search`` (Optuna, BoTorch), the pictures ``plots`` (matplotlib),
``--kernels numba`` and the knapsack solver's timing ``kernels`` (numba). ``--kernels auto`` needs
nothing: without numba it runs the stock kernels (:func:`layersearch.kernels.select.choose_kernels`).
docs/cli.md shows this table to users.
"""

from __future__ import annotations

from typing import Any

from layersearch.common.extras import require_extras

#: ``command`` or ``command action`` -> the extras it always needs.
COMMAND_EXTRAS: dict[str, tuple[str, ...]] = {
    "demo": ("search", "plots"),
    "tune": ("search", "plots"),
    "study": ("search",),
    "study head-to-head": ("search", "plots"),
    "plot": ("plots",),
    "plot history": ("plots", "search"),
    "plot compare": ("plots", "search"),
    "transfer": ("plots",),
    "swift stream": ("search", "plots"),
    "knapspec bench": ("kernels",),  # it times the numba knapsack solver against the reference
}


def needed_extras(args: Any) -> tuple[str, ...]:
    """The extras the parsed ``args`` need: the command's own, then those its options ask for."""
    command = str(getattr(args, "command", ""))
    action = getattr(args, "action", None) or getattr(args, "kind", None)
    needed = list(COMMAND_EXTRAS.get(f"{command} {action}", COMMAND_EXTRAS.get(command, ())))
    if getattr(args, "kernels", None) == "numba":
        needed.append("kernels")
    mask = getattr(args, "mask", None)
    if getattr(args, "on_the_fly", None) == "swift" or (isinstance(mask, str) and (mask == "swift" or mask.startswith("swift:"))):
        # SWIFT on the fly: its search proposes masks with BoTorch's GP
        needed.append("search")
    if command == "knn":
        if getattr(args, "pca", None) or getattr(args, "plot", None):
            needed.append("plots")
        sources = [str(value).partition("=")[2] for value in getattr(args, "domain", None) or ()]
        if any(source.startswith("study:") for source in sources):  # a domain's mask read from a study
            needed.append("search")
    return tuple(dict.fromkeys(needed))


def check_extras(args: Any) -> None:
    """One error line naming the ``pip install`` to run when an extra ``args`` need is missing."""
    require_extras(*needed_extras(args))
