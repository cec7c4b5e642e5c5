"""The exit-code table of docs/run-folders.md, held to the code: 3 for failed sanity checks, and never 0 from a gate that
did not check (a model's code that ends the process must not pass CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from robustbench_filters.cli import run

MASKED = '''
import torch
from torch import nn


class Masked(nn.Module):
    """Gradient masking: rounding the input makes every input gradient zero."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(784, 10)

    def forward(self, x):
        return self.lin(torch.round(x.flatten(1) * 4) / 4)


def build():
    return Masked()
'''

ENDS = "import os, sys\n\ndef build():\n    {call}\n"

SPEC = """version = 1
name = "exit codes"
allow_code = true
out = "runs/check"

[image]
models = ["{model}"]
attacks = ["fgsm"]
eps = [0.01]
n_examples = 8
checkpoint = "none"

[[image.require]]
attack = "clean"
min_acc = 0.0
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "masked.py").write_text(MASKED)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_failed_sanity_check_exits_3_unless_allowed(project: Path, capfd: pytest.CaptureFixture[str]) -> None:
    argv = ["attack", "--model", "masked.py:build", "--attack", "fgsm", "--eps", "0.1", "--n-examples", "8", "-q"]
    assert run([*argv, "--out", str(project / "a")]) == 3
    err = capfd.readouterr().err
    assert "sanity check(s) failed" in err and "--allow-failed-checks" in err
    assert (project / "a" / "summary.json").exists()  # the numbers are kept, and marked failing
    assert run([*argv, "--out", str(project / "b"), "--allow-failed-checks"]) == 0


@pytest.mark.parametrize("call", ["os._exit(0)", "sys.exit(0)", "raise KeyboardInterrupt"])
def test_gate_never_passes_when_user_code_ends_it(project: Path, capfd: pytest.CaptureFixture[str], call: str) -> None:
    (project / "ends.py").write_text(ENDS.format(call=call))
    (project / "spec.toml").write_text(SPEC.format(model="ends.py:build"))
    code = run(["check", "--spec", str(project / "spec.toml"), "-q"])
    err = capfd.readouterr().err.strip()
    assert code in (2, 130) and code != 0, err
    assert err.splitlines() and err.splitlines()[-1].startswith(("error:", "interrupted")), err


PLAIN = "import torch\nfrom torch import nn\n\ndef build():\n    torch.manual_seed(0)\n    return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))\n"


def test_gate_passes_when_every_check_was_evaluated(project: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (project / "plain.py").write_text(PLAIN)
    (project / "spec.toml").write_text(SPEC.format(model="plain.py:build"))
    assert run(["check", "--spec", str(project / "spec.toml"), "-q"]) == 0, capfd.readouterr().err


@pytest.mark.usefixtures("gate_in_process")  # the gate's verdict, evaluated here; the child's exit 1 is passed on as is
def test_gate_fails_on_a_failed_sanity_check_when_the_spec_says_so(
    project: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (project / "spec.toml").write_text(SPEC.format(model="masked.py:build").replace("out =", 'sanity = "fail"\nout ='))
    assert run(["check", "--spec", str(project / "spec.toml"), "-q"]) == 1, capfd.readouterr().err
