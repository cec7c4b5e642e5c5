"""Build the wheel of the working tree as a clone would hold it: copy the tracked files to a temporary folder, build
there with pip (the build backend, build_backend/robfilt_build.py, leaves nothing in that copy either), and keep
only the wheel.

    python scripts/build_wheel.py --out dist       # what `make wheel` runs
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tracked_files(root: Path) -> list[str]:
    """The files a clone would hold: those git tracks or would track (not ignored), as they are in the working
    tree (uncommitted edits and new files included)."""
    done = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    )
    return [f for f in done.stdout.decode().split("\0") if f and (root / f).is_file()]


def copy_tree(root: Path, dest: Path) -> Path:
    """Copy the files of :func:`tracked_files` from ``root`` into ``dest`` (a clone's tree, without .git)."""
    for name in tracked_files(root):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, dest / name)
    return dest


def pip_wheel(src: Path, out: Path) -> Path:
    """``pip wheel SRC`` (what a user runs in a clone) into ``out``; returns the wheel."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(src)], check=True
    )
    (wheel,) = out.glob("robustbench_filters-*.whl")
    return wheel


def build_wheel(out: Path, root: Path = ROOT) -> Path:
    """Build the wheel of ``root`` into ``out``; returns its path. The source tree is left as it was."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="robfilt-wheel-") as tmp:
        wheel = pip_wheel(copy_tree(root, Path(tmp) / "src"), Path(tmp) / "dist")
        target = out / wheel.name
        shutil.copy2(wheel, target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="folder for the wheel (default: dist/)")
    print(build_wheel(parser.parse_args().out))


if __name__ == "__main__":
    main()
