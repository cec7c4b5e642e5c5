"""The CI files users copy cannot rot: the workflows call scripts that exist, and (slow) those scripts pass.

Default run: both workflows parse, install with CPU torch, run their gate script, publish the summary and the
JUnit XML; every file they reference exists; the example model loads and classifies. ``-m slow``: run the
exact ``run:`` line of each workflow's gate step with this checkout's robfilt, and retrain the example weights.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import torch

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
PROJECT_WORKFLOW = ROOT / ".github" / "workflows" / "robustness.yml"
EXAMPLE = ROOT / "examples" / "ci"
EXAMPLE_WORKFLOW = EXAMPLE / "robustness.yml"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def load_workflow(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    (job,) = workflow["jobs"].values()
    return job["steps"]


def step(workflow: dict[str, Any], name: str) -> dict[str, Any]:
    matches = [s for s in steps(workflow) if s.get("name") == name]
    assert len(matches) == 1, f"one step named {name!r} expected"
    return matches[0]


def uses(workflow: dict[str, Any], action: str) -> dict[str, Any]:
    matches = [s for s in steps(workflow) if str(s.get("uses", "")).startswith(action + "@")]
    assert len(matches) == 1, f"one step using {action} expected"
    return matches[0]


@pytest.mark.parametrize("path", [PROJECT_WORKFLOW, EXAMPLE_WORKFLOW], ids=["project", "example"])
def test_workflow_structure(path: Path) -> None:
    wf = load_workflow(path)
    assert {"push", "pull_request"} <= set(wf["on"])
    uses(wf, "actions/checkout")
    assert str(uses(wf, "actions/setup-python")["with"]["python-version"]) == "3.11"
    install = step(wf, "Install (CPU torch)" if path == PROJECT_WORKFLOW else "Install robfilt (CPU torch)")["run"]
    assert f"torch torchvision --index-url {CPU_INDEX}" in install
    summary = step(wf, "Job summary")
    assert summary["if"] == "always()" and '>> "$GITHUB_STEP_SUMMARY"' in summary["run"]
    assert "$GATE_OUT/robustness.md" in summary["run"]
    upload = uses(wf, "actions/upload-artifact")
    assert upload["if"] == "always()"
    assert "${{ env.GATE_OUT }}/robustness-junit.xml" in upload["with"]["path"]
    assert "${{ env.GATE_OUT }}/robustness.md" in upload["with"]["path"]
    assert wf["env"]["GATE_OUT"]


def test_project_workflow_installs_the_checkout_and_runs_the_gate_script() -> None:
    wf = load_workflow(PROJECT_WORKFLOW)
    install = step(wf, "Install (CPU torch)")["run"]
    assert "pip install -c constraints.txt -e ." in install  # the versions make test uses: no resolver search
    assert "constraints.txt" in wf["jobs"][next(iter(wf["jobs"]))]["steps"][1]["with"]["cache-dependency-path"]
    assert step(wf, "Robustness gate")["run"].strip() == "bash .ci/gate.sh"
    script = ROOT / ".ci" / "gate.sh"
    assert os.access(script, os.X_OK)
    text = script.read_text()
    assert "check --spec robustness.toml" in text and '--junit "$out/robustness-junit.xml"' in text
    assert '--summary "$out/robustness.md"' in text and 'out="${GATE_OUT:-' in text
    assert (ROOT / "robustness.toml").is_file()


def _recipe(makefile: str, target: str) -> list[str]:
    """The command lines of ``target`` (its tab-indented lines after the ``target:`` line)."""
    lines = makefile.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    out = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        out.append(line.strip())
    return out


def test_makefile_ci_gate_target_runs_the_same_script() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert _recipe(makefile, "ci-gate") == ["ROBFILT=$(BIN)/robfilt bash .ci/gate.sh"]
    phony = next(line for line in makefile.splitlines() if line.startswith(".PHONY:")).split()[1:]
    assert "ci-gate" in phony
    # make test = the suite, then the gate through ci-gate (no second copy of the robfilt check line)
    test = _recipe(makefile, "test")
    assert len(test) == 2 and "pytest" in test[0] and test[1] == "$(MAKE) ci-gate"
    assert "robfilt check" not in "\n".join(test)


def test_example_workflow_installs_robfilt_as_a_dependency() -> None:
    wf = load_workflow(EXAMPLE_WORKFLOW)
    install = step(wf, "Install robfilt (CPU torch)")["run"]
    assert "robustbench-filters" in install and "-e ." not in install
    assert step(wf, "Robustness gate")["run"].strip() == 'bash "$GATE_DIR/run_gate.sh"'
    gate_dir = ROOT / wf["env"]["GATE_DIR"]
    assert gate_dir == EXAMPLE
    for name in ("robustness.toml", "model.py", "train.py", "weights.safetensors", "run_gate.sh"):
        assert (gate_dir / name).is_file(), name
    assert os.access(gate_dir / "run_gate.sh", os.X_OK)
    script = (gate_dir / "run_gate.sh").read_text()
    assert 'check --spec "$here/robustness.toml"' in script and "PYTHONPATH" not in script


def test_example_spec_names_the_factory_and_allows_code() -> None:
    spec = tomllib.loads((EXAMPLE / "robustness.toml").read_text())
    assert spec["allow_code"] is True
    (ref,) = spec["image"]["models"]
    path, _, factory = ref.partition(":")
    assert path.endswith(".py")  # a file next to the spec, so no PYTHONPATH is needed
    source = (EXAMPLE / path).read_text()
    assert f"def {factory}(" in source
    assert all(r.get("min_acc") for r in spec["image"]["require"])


def test_example_model_loads_and_classifies() -> None:
    sys.path.insert(0, str(EXAMPLE))
    try:
        import model as example_model
    finally:
        sys.path.remove(str(EXAMPLE))
    from robustbench_filters.data import load_images

    net = example_model.build()
    assert not net.training
    data = load_images("fashion-mnist", split="test", n_max=256)
    with torch.no_grad():
        logits = net(data.x)
    assert logits.shape == (256, 10) and float(data.x.min()) >= 0 and float(data.x.max()) <= 1
    assert (logits.argmax(1) == data.y).float().mean().item() >= 0.78


def _run_gate_step(workflow: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run the workflow's gate step as GitHub would: its `run:` line, from the repository root, its env."""
    wf = load_workflow(workflow)
    robfilt = shutil.which("robfilt", path=str(Path(sys.executable).parent))
    assert robfilt, "robfilt is not installed next to this Python"
    env = {**os.environ, **{k: str(v) for k, v in wf["env"].items()}, "ROBFILT": robfilt, "OMP_NUM_THREADS": "1"}
    env["GATE_OUT"] = str(tmp_path / "gate")
    return subprocess.run(["bash", "-c", step(wf, "Robustness gate")["run"]], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=900)  # fmt: skip


def _check_outputs(tmp_path: Path) -> None:
    root = ET.parse(tmp_path / "gate" / "robustness-junit.xml").getroot()
    assert int(root.get("tests", "0")) > 0 and root.get("failures") == "0"
    assert "passed" in (tmp_path / "gate" / "robustness.md").read_text()


@pytest.mark.slow
def test_project_gate_step_passes(tmp_path: Path) -> None:
    proc = _run_gate_step(PROJECT_WORKFLOW, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    _check_outputs(tmp_path)


@pytest.mark.slow
def test_example_gate_step_passes(tmp_path: Path) -> None:
    proc = _run_gate_step(EXAMPLE_WORKFLOW, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    _check_outputs(tmp_path)


@pytest.mark.slow
def test_example_weights_are_reproducible(tmp_path: Path) -> None:
    out = tmp_path / "weights.safetensors"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(EXAMPLE)}
    proc = subprocess.run([sys.executable, "train.py", "--out", str(out)], cwd=EXAMPLE, env=env, text=True,
                          capture_output=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]

    def digest(p: Path) -> str:
        return hashlib.sha256(p.read_bytes()).hexdigest()

    assert digest(out) == digest(EXAMPLE / "weights.safetensors")


def test_constraints_pin_every_dependency_inside_its_range() -> None:
    """make test installs with -c constraints.txt; a missing or out-of-range pin would send pip back to searching."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = version.strip()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    for text in wanted:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req.name}=={pins[name]} is outside {req}"
    makefile = (ROOT / "Makefile").read_text()
    assert "-c constraints.txt" in makefile and "pyproject.toml constraints.txt" in makefile
