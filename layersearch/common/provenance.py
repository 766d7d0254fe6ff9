"""Where a figure was made: the layersearch commit, the library versions and the command line.

Profiles and benchmark files record these so anyone reading a figure can tell what produced it.
Nothing here imports torch: versions come from the installed distributions' metadata.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def package_version(name: str) -> str:
    """The installed version of distribution ``name`` ("" where it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return ""


def layersearch_commit() -> str:
    """The git commit of the layersearch checkout this code runs from (read from its ``.git``, no
    git process), else ``layersearch <version>`` for an installed copy."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = _git_head(root / ".git")
    except (OSError, ValueError):
        head = None
    if head:
        return head
    from layersearch import __version__

    return f"layersearch {__version__}"


def _git_head(git: Path) -> str | None:
    """The commit ``HEAD`` names in the git folder ``git`` (a worktree's ``.git`` file is followed)."""
    if git.is_file():  # a worktree: "gitdir: <path>"
        git = Path(git.read_text(encoding="utf-8").split("gitdir:", 1)[1].strip())
    if not git.is_dir():
        return None
    head = (git / "HEAD").read_text(encoding="utf-8").strip()
    if not head.startswith("ref:"):
        return head or None
    ref = head.split(":", 1)[1].strip()
    common = git / (git / "commondir").read_text(encoding="utf-8").strip() if (git / "commondir").is_file() else git
    for folder in (git, common):
        if (folder / ref).is_file():
            return (folder / ref).read_text(encoding="utf-8").strip()
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text(encoding="utf-8").splitlines():
            if line.endswith(" " + ref):
                return line.split()[0]
    return None


def cpu_name() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``), else what ``platform`` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown CPU"


def provenance(argv: list[str] | None = None) -> dict[str, Any]:
    """The record a raw results file carries: argv, commit and the versions of python, torch and transformers."""
    return {
        "argv": list(sys.argv if argv is None else argv),
        "commit": layersearch_commit(),
        "python": sys.version.split()[0],
        "torch": package_version("torch"),
        "transformers": package_version("transformers"),
    }
