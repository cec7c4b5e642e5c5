"""A user's install: the wheel builds without touching the source tree, installs into a fresh virtual environment
and runs the headline command from another folder (slow: the environment downloads nothing but is large)."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from build_wheel import build_wheel, copy_tree, pip_wheel, tracked_files  # noqa: E402


def _status() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--ignored"], cwd=ROOT, capture_output=True, text=True
    ).stdout


def _listing(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def test_pip_wheel_in_a_clone_leaves_no_build_or_egg_info(tmp_path: Path) -> None:
    """``pip wheel .`` in a clone (a copy of the tracked files) leaves the clone's tree exactly as it was."""
    before = _status()
    clone = copy_tree(ROOT, tmp_path / "clone")
    listed = _listing(clone)
    wheel = pip_wheel(clone, tmp_path / "dist")
    assert wheel.is_file() and wheel.name.startswith("robustbench_filters-")
    assert _listing(clone) == listed, "the build left files in the tree"
    assert not (clone / "build").exists() and not list(clone.glob("*.egg-info"))
    assert _status() == before and "LICENSE" in tracked_files(ROOT)


def _backend():  # noqa: ANN202
    sys.path.insert(0, str(ROOT / "build_backend"))
    import robfilt_build

    return robfilt_build


def test_the_build_backend_runs_setuptools_on_a_copy(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The configuration, fast: pip builds with build_backend/robfilt_build.py, whose writing hooks run setuptools
    in a copy (a stand-in setuptools writes build/ and *.egg-info where it runs, as the real one does)."""
    import tomllib

    system = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    assert system["build-backend"] == "robfilt_build" and system["backend-path"] == ["build_backend"]
    backend = _backend()
    assert "build_backend/robfilt_build.py" in (ROOT / "MANIFEST.in").read_text()  # an sdist can build itself

    class Setuptools:
        @staticmethod
        def _litter(directory: str, name: str) -> str:
            for junk in ("build/lib", "robustbench_filters.egg-info"):
                (Path.cwd() / junk).mkdir(parents=True)
            assert (Path.cwd() / "pyproject.toml").is_file() and (Path.cwd() / "robustbench_filters").is_dir()
            (Path(directory) / name).write_text("built")
            return name

        def build_wheel(self, directory, settings=None, metadata=None) -> str:  # noqa: ANN001
            return self._litter(directory, "x.whl")

        def build_sdist(self, directory, settings=None) -> str:  # noqa: ANN001
            return self._litter(directory, "x.tar.gz")

        def prepare_metadata_for_build_wheel(self, directory, settings=None) -> str:  # noqa: ANN001
            return self._litter(directory, "x.dist-info")

    monkeypatch.setattr(backend, "_setuptools", Setuptools())
    tree = tmp_path / "tree"
    (tree / "robustbench_filters").mkdir(parents=True)
    (tree / "pyproject.toml").write_text("[project]\n")
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(tree)
    listed = _listing(tree)
    assert backend.build_wheel("../out") == "x.whl"  # a relative target is the caller's, not the copy's
    assert backend.build_sdist(str(out)) == "x.tar.gz"
    assert backend.prepare_metadata_for_build_wheel(str(out)) == "x.dist-info"
    assert _listing(tree) == listed and Path.cwd() == tree
    assert sorted(p.name for p in out.iterdir()) == ["x.dist-info", "x.tar.gz", "x.whl"]


@pytest.mark.slow
def test_a_fresh_venv_installs_the_wheel_and_runs_the_headline_command(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "dist")
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "-c", str(ROOT / "constraints.txt")]
    subprocess.run([*pip, "torch==2.14.1", "torchvision==0.29.1", str(wheel)], check=True, timeout=1800)
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    done = subprocess.run(
        [str(env / "bin" / "robfilt"), "attack", "--model", "deit-grc", "--attack", "pgd", "-n", "8", "--json", "-q"],
        cwd=elsewhere, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["models"]["deit-grc"]["clean"]["n"] == 8
    assert (elsewhere / summary["out"]).is_dir() or Path(summary["out"]).is_dir()
