"""hatchling build hook: an editable install imports ``robustbench_filters.cli`` from ``cli/`` in this tree.

``cli/`` sits at the top of the repository and a wheel holds it as ``robustbench_filters/cli`` (pyproject.toml's
force-include). hatchling's editable install puts the tree on ``sys.path``, which finds ``robustbench_filters/``
but not a ``cli`` inside it, and its dev mode cannot map a folder into a package. So for editable installs only,
this hook ships a small import finder (and the ``.pth`` file that installs it at start-up) that answers for
``robustbench_filters.cli`` alone, with ``cli/`` here; the editable wheel then holds no copy of ``cli/``, and an
edit there takes effect at once. Regular wheels and sdists are left to hatchling as configured.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

#: the module the editable wheel installs; its .pth file imports it at start-up
FINDER = "_robustbench_filters_cli"

FINDER_SOURCE = '''"""robustbench_filters.cli of an editable install of robustbench-filters is {cli} (hatch_build.py)."""

import importlib.util
import sys

CLI = {cli!r}


class CliFinder:
    """Finds robustbench_filters.cli in the source tree; every other name is left to the other finders."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "robustbench_filters.cli":
            return None
        return importlib.util.spec_from_file_location(name, CLI + "/__init__.py", submodule_search_locations=[CLI])


if CliFinder not in sys.meta_path:
    sys.meta_path.append(CliFinder)
'''


class EditableCliHook(BuildHookInterface):
    """Adds the finder of ``robustbench_filters.cli`` to editable wheels (and nothing to any other build)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version != "editable":
            return
        self._folder = Path(tempfile.mkdtemp(prefix="robfilt-editable-"))  # outside the tree; removed in finalize
        finder, pth = self._folder / f"{FINDER}.py", self._folder / f"{FINDER}.pth"
        finder.write_text(FINDER_SOURCE.format(cli=str(Path(self.root, "cli").resolve())))
        pth.write_text(f"import {FINDER}\n")
        # replaces the force-include map for this build: no copy of cli/, the finder points at it instead
        build_data["force_include_editable"] = {str(finder): finder.name, str(pth): pth.name}

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        folder = getattr(self, "_folder", None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
