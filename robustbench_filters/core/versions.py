"""The package version and the provenance every record carries (library versions, git commit).

A base module: it imports nothing from the package, so records, checkpoints and the CLI's ``--version`` can
use it without pulling in models or torch.
"""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

__version__ = "0.2.0"


def library_versions() -> dict[str, str]:
    """Versions of the libraries whose behaviour a number depends on (recorded in cards and run manifests)."""
    import numpy
    import safetensors
    import timm
    import torch

    return {
        "robustbench_filters": __version__,
        "torch": torch.__version__,
        "timm": timm.__version__,
        "numpy": numpy.__version__,
        "safetensors": safetensors.__version__,
        "python": platform.python_version(),
    }


def git_commit() -> str | None:
    """The commit of the robfilt source tree, if it is a git checkout (recorded for provenance)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None
