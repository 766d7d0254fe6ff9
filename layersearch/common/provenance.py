"""Where a figure was made: the layersearch commit, the library versions and the command line.

Profiles and benchmark files record these so anyone reading a figure can tell what produced it.
Nothing here imports torch: versions come from the installed distributions' metadata.
"""

from __future__ import annotations

import subprocess
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
    """The git commit of the layersearch checkout this code runs from (with ``+dirty`` when its
    tracked files differ from it), else ``layersearch <version>`` for an installed copy."""
    root = Path(__file__).resolve().parents[2]
    if (root / ".git").exists():
        try:
            head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                  timeout=10, check=True).stdout.strip()
            dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            if head:
                return head + ("+dirty" if dirty else "")
        except (OSError, subprocess.SubprocessError):
            pass
    from layersearch import __version__

    return f"layersearch {__version__}"


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
