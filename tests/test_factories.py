"""Factories: by file path or dotted module, relative to the working directory or a spec's folder, no PYTHONPATH."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import safetensors.torch
import torch

from robustbench_filters.core.errors import CheckpointError, RobfiltError
from robustbench_filters.models.loading import load_model
from robustbench_filters.models.ref import ModelKind

MODELS_PY = """
import torch
from torch import nn
from layers import Scale  # a sibling file: importable because the factory file's folder is

class Net(nn.Module):
    def __init__(self, width=8, classes=3):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(16, width), nn.ReLU(), nn.Linear(width, classes))
        self.scale = Scale()

    def forward(self, x):
        return self.scale(self.body(x))

def build(width: int = 8, classes: int = 3):
    return Net(width, classes)

def boom():
    raise ValueError("the factory is broken")

def leave():
    import sys
    sys.exit(3)

def not_a_model():
    return "a string"

def interrupted():
    raise KeyboardInterrupt
"""
LAYERS_PY = """
from torch import nn
class Scale(nn.Module):
    def forward(self, x):
        return 2 * x
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project: proj/models.py (+ layers.py), proj/pkgx/nets.py, and proj/specs/ next to them."""
    proj = tmp_path / "proj"
    (proj / "specs").mkdir(parents=True)
    (proj / "models.py").write_text(textwrap.dedent(MODELS_PY))
    (proj / "layers.py").write_text(textwrap.dedent(LAYERS_PY))
    pkg = proj / f"pkgx_{tmp_path.name.replace('-', '_')}"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text("from torch import nn\n\ndef tiny(classes=2):\n    return nn.Linear(16, classes)\n")
    return proj


def _x() -> torch.Tensor:
    return torch.rand(2, 1, 4, 4)


def test_file_factory_from_its_own_folder_with_arguments(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    before = list(sys.path)
    loaded = load_model("mynet=models.py:build?width=5&classes=4")
    assert sys.path == before
    assert loaded.label == "mynet" and loaded.ref.kind is ModelKind.FACTORY and loaded.source == "factory"
    assert loaded.module.body[1].out_features == 5 and loaded.module(_x()).shape == (2, 4)
    assert not loaded.module.training


def test_file_factory_from_another_folder_and_relative_to_a_spec(project: Path, tmp_path: Path, monkeypatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(RobfiltError, match="factory file .*models.py does not exist"):
        load_model("models.py:build")
    assert load_model("proj/models.py:build", base_dir=tmp_path).module(_x()).shape == (2, 3)
    assert load_model("../models.py:build", base_dir=project / "specs").module(_x()).shape == (2, 3)
    assert load_model(f"{project / 'models.py'}:build").module(_x()).shape == (2, 3)


def test_dotted_module_relative_to_base_dir_without_pythonpath(project: Path, tmp_path: Path, monkeypatch) -> None:
    pkg = next(p.name for p in project.iterdir() if p.name.startswith("pkgx_"))
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    with pytest.raises(RobfiltError, match=f"no module '{pkg}.nets' in .* or on sys.path"):
        load_model(f"{pkg}.nets:tiny")
    loaded = load_model(f"{pkg}.nets:tiny?classes=6", base_dir=project)
    assert loaded.module(_x().flatten(1)).shape == (2, 6) and sys.path == before


def test_checkpoint_is_applied_to_factory_models(project: Path, tmp_path: Path) -> None:
    trained = load_model("models.py:build", base_dir=project, seed=5).module
    path = tmp_path / "net.safetensors"
    safetensors.torch.save_file(trained.state_dict(), str(path))
    loaded = load_model("models.py:build", checkpoint=str(path), base_dir=project, seed=0)
    assert loaded.source == str(path)
    x = _x()
    with torch.no_grad():
        assert torch.equal(loaded.module(x), trained(x))
        assert not torch.equal(load_model("models.py:build", base_dir=project, seed=0).module(x), trained(x))
    with pytest.raises(
        CheckpointError, match=r"does not fit models.py:build\?width=4: .*body.1.weight: file 8x16 vs model 4x16"
    ):
        load_model("models.py:build?width=4", checkpoint=str(path), base_dir=project)


@pytest.mark.parametrize(
    ("ref", "match"),
    [
        ("models.py:boom", r"model models.py:boom: factory boom\(\) failed with ValueError: the factory is broken\."),
        ("models.py:leave", r"factory leave\(\) failed with sys.exit\(3\)"),
        ("models.py:not_a_model", r"returned str, not a torch nn.Module"),
        ("models.py:nope", r"has no callable 'nope'; it has: .*build"),
        ("models.py:build?depth=3", r"build\(\) cannot take \['depth'\].*it takes: width, classes"),
        ("broken.py:build", r"importing broken.py failed with ZeroDivisionError"),
        ("exits.py:build", r"importing exits.py failed with sys.exit\(None\)"),
        ("needs.py:build", r"importing needs.py failed with ModuleNotFoundError: No module named 'not_installed_xyz'"),
    ],
)
def test_user_code_failures_are_one_line_naming_the_model(project: Path, ref: str, match: str) -> None:
    (project / "broken.py").write_text("1 / 0\n")
    (project / "exits.py").write_text("import sys\nsys.exit()\n")
    (project / "needs.py").write_text("import not_installed_xyz\n")
    before = list(sys.path)
    with pytest.raises(RobfiltError, match=match) as info:
        load_model(ref, base_dir=project)
    assert "\n" not in str(info.value) and sys.path == before


def test_ctrl_c_in_a_factory_still_stops(project: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        load_model("models.py:interrupted", base_dir=project)


def test_a_spec_names_a_factory_file_relative_to_its_own_folder(project: Path, tmp_path: Path, monkeypatch) -> None:
    """The light check of a reference (before any heavy import) looks for the file from the spec's folder too."""
    from robustbench_filters.gate.spec import load_spec

    (project / "pyproject.toml").write_text("")
    spec = project / "specs" / "gate.toml"
    spec.write_text('allow_code = true\n[image]\nmodels = ["../models.py:build"]\nattacks = ["fgsm"]\neps = [0.1]\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_spec(spec).sections["image"].config.models == ("../models.py:build",)
