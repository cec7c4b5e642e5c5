"""Build the wheel without leaving files in the source tree: copy the tracked files to a temporary folder, build
there (setuptools writes build/ and *.egg-info next to what it builds), and keep only the wheel.

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
    """The files git tracks, as they are in the working tree (uncommitted edits included)."""
    done = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True)
    return [f for f in done.stdout.decode().split("\0") if f and (root / f).is_file()]


def build_wheel(out: Path, root: Path = ROOT) -> Path:
    """Build the wheel of ``root`` into ``out``; returns its path. The source tree is left as it was."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="robfilt-wheel-") as tmp:
        src = Path(tmp) / "src"
        for name in tracked_files(root):
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, src / name)
        built = Path(tmp) / "dist"
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(built), str(src)],
            check=True,
        )
        (wheel,) = built.glob("robustbench_filters-*.whl")
        target = out / wheel.name
        shutil.copy2(wheel, target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="folder for the wheel (default: dist/)")
    print(build_wheel(parser.parse_args().out))


if __name__ == "__main__":
    main()
