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

from build_wheel import build_wheel, tracked_files  # noqa: E402


def _status() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--ignored"], cwd=ROOT, capture_output=True, text=True
    ).stdout


def test_the_wheel_builds_without_leaving_files_in_the_tree(tmp_path: Path) -> None:
    before = _status()
    wheel = build_wheel(tmp_path / "dist")
    assert wheel.is_file() and wheel.name.startswith("robustbench_filters-") and _status() == before
    assert "LICENSE" in tracked_files(ROOT)


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
