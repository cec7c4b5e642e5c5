"""A user's install: hatchling builds the wheel without touching the source tree, the wheel holds the package with
its data and the command line, `pip install .` and `pip install -e .` leave the tree as it was and give the robfilt
command, and (slow) the wheel installs into a fresh virtual environment and runs the headline command from another
folder. pip fetches hatchling for its isolated build environment from the package index, as for any user."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WHEEL = "robustbench_filters-0.2.0-py3-none-any.whl"


def tracked_files(root: Path) -> list[str]:
    """The files a clone would hold: those git tracks or would track (not ignored), as they are in the working tree
    (uncommitted edits and new files included)."""
    done = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    )
    return [f for f in done.stdout.decode().split("\0") if f and (root / f).is_file()]


def _clone(dest: Path) -> Path:
    """A clone of the working tree as it is: its files in ``dest``, in a git repository of their own, committed."""
    for name in tracked_files(ROOT):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes((ROOT / name).read_bytes())
    git = ["git", "-C", str(dest), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "clone"], check=True)
    return dest


def _untouched(clone: Path) -> None:
    """The tree is as it was: git sees no change, and no build/ nor *.egg-info exists, not even an ignored one."""
    status = subprocess.run(
        ["git", "status", "--porcelain", "--ignored"], cwd=clone, capture_output=True, text=True, check=True
    )
    assert status.stdout == "", f"the build left files in the tree:\n{status.stdout}"
    assert not (clone / "build").exists() and not list(clone.rglob("*.egg-info"))


def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", *args], check=True, timeout=600)


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _clone(tmp_path_factory.mktemp("clone"))


def test_the_build_backend_is_hatchling() -> None:
    """No home-made backend: hatchling builds from the tree and writes nothing into it."""
    system = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    assert system["build-backend"] == "hatchling.build" and "backend-path" not in system
    assert [r.split(">")[0] for r in system["requires"]] == ["hatchling"]
    assert not (ROOT / "build_backend").exists() and not (ROOT / "setup.py").exists()


def test_pip_wheel_leaves_the_tree_and_holds_the_package_its_data_and_the_cli(clone: Path, tmp_path: Path) -> None:
    """``pip wheel .`` in a clone: the clone is left as it was, and the wheel holds every file of robustbench_filters/
    (code, the zoo weights, the data sets, py.typed) and of cli/ (as robustbench_filters/cli), nothing else."""
    _pip(Path(sys.executable), "wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp_path), str(clone))
    _untouched(clone)
    names = set(zipfile.ZipFile(tmp_path / WHEEL).namelist())
    wanted = {f for f in tracked_files(clone) if f.startswith("robustbench_filters/")}
    wanted |= {f"robustbench_filters/{f}" for f in tracked_files(clone) if f.startswith("cli/")}
    package = {n for n in names if not n.startswith("robustbench_filters-0.2.0.dist-info/")}
    assert package == wanted, (sorted(wanted - package)[:5], sorted(package - wanted)[:5])
    for needed in ("robustbench_filters/py.typed", "robustbench_filters/cli/__init__.py"):
        assert needed in names
    for folder in ("robustbench_filters/zoo/deit-grc-micro/", "robustbench_filters/assets/austen/"):
        assert any(n.startswith(folder) for n in names), folder
    assert any(n.endswith(".safetensors") for n in names)
    entry_points = zipfile.ZipFile(tmp_path / WHEEL).read("robustbench_filters-0.2.0.dist-info/entry_points.txt")
    assert "robfilt = robustbench_filters.cli:main" in entry_points.decode()


_WHERE = (
    "import importlib.util as u, json; cli = u.find_spec('robustbench_filters.cli'); print(json.dumps({"
    "'package': u.find_spec('robustbench_filters').origin, 'cli': cli.origin, "
    "'cli modules': cli.submodule_search_locations}))"
)


def _origins(python: Path) -> dict:
    """Where the package and its cli would be imported from (find_spec imports only robustbench_filters itself, which
    needs no dependency), and where the cli's modules are looked for."""
    done = subprocess.run([str(python), "-c", _WHERE], capture_output=True, text=True, check=True, cwd="/")
    return json.loads(done.stdout)


@pytest.mark.parametrize("editable", [False, True], ids=["install", "editable"])
def test_pip_install_leaves_the_tree_and_gives_the_cli(clone: Path, tmp_path: Path, editable: bool) -> None:
    """``pip install .`` and ``pip install -e .`` leave the clone as it was; both give the robfilt script and
    ``robustbench_filters.cli``, which an editable install imports from cli/ in the clone (hatch_build.py) and a
    regular one from the installed package."""
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    _pip(python, "install", "--no-deps", "--quiet", *(["-e"] if editable else []), str(clone))
    _untouched(clone)
    script = (env / "bin" / "robfilt").read_text()
    assert "from robustbench_filters.cli import main" in script
    origins = _origins(python)
    if editable:
        package, cli = clone / "robustbench_filters", clone / "cli"
    else:
        package = next((env / "lib").glob("python3*/site-packages")) / "robustbench_filters"
        cli = package / "cli"
    assert origins == {
        "package": str(package / "__init__.py"),
        "cli": str(cli / "__init__.py"),
        "cli modules": [str(cli)],
    }


@pytest.mark.slow
def test_a_fresh_venv_installs_the_wheel_and_runs_the_headline_command(tmp_path: Path) -> None:
    clone = _clone(tmp_path / "clone")
    _pip(Path(sys.executable), "wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp_path / "dist"), str(clone))
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "-c", str(ROOT / "constraints.txt")]
    subprocess.run(
        [*pip, "torch==2.14.1", "torchvision==0.29.1", str(tmp_path / "dist" / WHEEL)], check=True, timeout=1800
    )
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
