"""PEP 517 build backend: setuptools, run on a copy of the sources, so that building leaves the tree as it was.

setuptools writes ``build/`` and ``robustbench_filters.egg-info/`` next to the sources it builds, and pip builds
a local folder in place (``pip wheel .``, ``pip install .``, ``python -m build``): a clone would gain both, and a
later build could pick up stale files from ``build/``. So every hook that writes (wheels, sdists, their metadata)
runs setuptools in a temporary copy of just what a build reads (:data:`SOURCES`), and only the artefact comes
back. Editable installs are left to setuptools in place: they must point at this tree, and setuptools writes their
metadata in a temporary folder already.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools

#: what setuptools reads to build this project (the packages, their data, the metadata and this backend)
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "robustbench_filters", "cli", "build_backend")
#: never copied: byte code and build output a tree may hold
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")


@contextlib.contextmanager
def _in_copy() -> Iterator[Path]:
    """Work in a temporary copy of :data:`SOURCES` (the current folder is the project root, as PEP 517 says)."""
    root = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="robfilt-build-") as tmp:
        copy = Path(tmp) / "src"
        copy.mkdir()
        for name in SOURCES:
            path = root / name
            if path.is_dir():
                shutil.copytree(path, copy / name, ignore=SKIP)
            elif path.is_file():
                shutil.copy2(path, copy / name)
        os.chdir(copy)
        try:
            yield copy
        finally:
            os.chdir(root)


def _absolute(path: str | None) -> str | None:
    return None if path is None else os.path.abspath(path)


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    with _in_copy():
        return _setuptools.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_sdist(config_settings: dict[str, Any] | None = None) -> list[str]:
    with _in_copy():
        return _setuptools.get_requires_for_build_sdist(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    target = _absolute(metadata_directory)
    with _in_copy():
        return _setuptools.prepare_metadata_for_build_wheel(target, config_settings)


def build_wheel(
    wheel_directory: str, config_settings: dict[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    target, metadata = _absolute(wheel_directory), _absolute(metadata_directory)
    with _in_copy():
        return _setuptools.build_wheel(target, config_settings, metadata)


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    target = _absolute(sdist_directory)
    with _in_copy():
        return _setuptools.build_sdist(target, config_settings)


# Editable installs point at this tree: setuptools in place (it keeps their metadata in a temporary folder).
get_requires_for_build_editable = _setuptools.get_requires_for_build_editable
prepare_metadata_for_build_editable = _setuptools.prepare_metadata_for_build_editable
build_editable = _setuptools.build_editable
