"""One rule everywhere: a list that repeats a value is refused in one line, in every spec section, CLI option and
API argument (a repeated model or eps would be measured or judged twice and narrow every interval)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch import nn

from robustbench_filters.cli import run
from robustbench_filters.configs import LipschitzConfig
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.gate.spec import load_spec
from robustbench_filters.study import StudyPlan, run_study
from robustbench_filters.study.plan import LM_ATTACK_TEMPLATE

SECTION = 'version = 1\n[image]\nmodels = ["deit", "deit-grc"]\nattacks = ["pgd"]\neps = [0.01, 0.02]\n'


def _spec(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "proj"
    root.mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text("")
    path = root / "robustness.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (SECTION + '[[image.require]]\nmodels = ["deit", "deit"]\nmin_acc = 0.1\n', "models lists 'deit' twice"),
        (SECTION + '[[image.require]]\nattack = "pgd"\neps = [0.01, 0.01]\nmin_acc = 0.1\n', "eps lists 0.01 twice"),
        (SECTION.replace("0.02", '"8/255"') + '[[image.require]]\nattack = "pgd"\neps = ["8/255", 0.03137254901960784]'
         '\nmin_acc = 0.1\n', "twice"),
        (SECTION + '[[image.require]]\nmodel = "deit"\nmin_acc = 0.1\n[[image.require]]\nmin_acc = 0.1\n',
         "#2 requires min_acc of deit under clean again"),
        (SECTION + '[[image.require]]\nattack = "pgd"\neps = [0.01]\nmin_acc = 0.1\n[[image.require]]\nattack = "pgd"'
         '\neps = [0.02, "1/100"]\nmin_acc = 0.1\n', "again"),
        (SECTION.replace('["pgd"]', '["pgd", "pgd"]'), "lists 'pgd' twice"),
        (SECTION.replace("[0.01, 0.02]", "[0.01, 0.01]"), "lists 0.01 twice"),
        (SECTION.replace('"deit-grc"]', '"deit"]'), "lists 'deit' twice"),
        ('version = 1\n[image]\nmodels = ["deit"]\nattacks = ["corruption"]\nseverities = [1, 1]\n', "lists 1 twice"),
    ],
)  # fmt: skip
def test_spec_lists_refuse_repeats(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(RobfiltError, match=needle):
        load_spec(_spec(tmp_path, text))


def test_a_min_and_a_max_of_one_metric_are_two_requirements(tmp_path: Path) -> None:
    text = ('version = 1\n[lm]\nmodels = ["lm"]\n[[lm.require]]\nmax_ppl = 100\n[[lm.require]]\nmin_token_acc = 0.1\n'
            '[[lm.require]]\nmin_token_acc = 0.1\nmodels = ["lm"]\nattack = "clean"\n')  # fmt: skip
    with pytest.raises(RobfiltError, match="again"):
        load_spec(_spec(tmp_path, text))
    spec = load_spec(_spec(tmp_path, text.rsplit("[[lm.require]]", 1)[0]))
    assert len(spec.sections["lm"].requirements) == 2
    soft_and_hard = text.replace("min_token_acc = 0.1\nmodels", 'min_token_acc = 0.05\nmode = "point"\nmodels')
    assert len(load_spec(_spec(tmp_path, soft_and_hard)).sections["lm"].requirements) == 3


def test_api_arguments_refuse_repeats(tmp_path: Path) -> None:
    with pytest.raises(RobfiltError, match="twice"):
        LipschitzConfig(models=("deit",), gap_rhos=(1e-3, 1e-3))
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    from robustbench_filters.api.evaluate import evaluate

    with pytest.raises(RobfiltError, match="the same model object is given twice"):
        evaluate(models=[net, net], attacks=["fgsm"], eps=[0.1], n_examples=2)
    from robustbench_filters.report import build_report

    with pytest.raises(RobfiltError, match="listed twice"):
        build_report([tmp_path / "unused"], tmp_path / "rep", formats=("md", "md"))
    with pytest.raises(RobfiltError, match="reuse lists"):
        run_study(StudyPlan(seeds=(0,)), tmp_path / "s", reuse=[tmp_path, tmp_path / "." / ""])
    with pytest.raises(RobfiltError, match="rates lists 0.1 twice"):
        dataclasses.replace(LM_ATTACK_TEMPLATE, rates=(0.1, 0.1))
    with pytest.raises(RobfiltError, match="model 'deit' twice"):
        StudyPlan(vision_models=("deit", "deit")).validate()
    assert not (tmp_path / "s").exists() and not (tmp_path / "rep").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["verify", "{a}", "{a}"],
        ["study", "--reuse", "{a}", "--reuse", "{a}", "--out", "{out}"],
        ["report", "{a}", "--out", "{out}", "--format", "md,md"],
        ["lipschitz", "--model", "deit", "--gap", "--gap-rho", "0.1,0.1", "--out", "{out}"],
        ["certify", "--model", "deit", "--sigma", "0.25,0.25", "--out", "{out}"],
        ["attack", "--model", "deit,deit", "--out", "{out}"],
        ["attack", "--model", "deit", "--attack", "fgsm,fgsm", "--out", "{out}"],
        ["attack", "--model", "deit", "--model-arg", "num_classes=10", "--model-arg", "num_classes=10",
         "--out", "{out}"],
    ],
)  # fmt: skip
def test_cli_lists_refuse_repeats(tmp_path: Path, capsys, argv: list[str]) -> None:
    (tmp_path / "a").mkdir()
    args = [a.format(a=tmp_path / "a", out=tmp_path / "out") for a in argv]
    assert run(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ("twice" in err or "given" in err), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("tables", "needle"),
    [
        ('[[image.require]]\nmin_acc = 0.5\n[[image.require]]\nmodel = "deit"\nmin_acc = 0.4\n',
         r"\[\[image.require\]\] #2 requires min_acc = 0.4 of deit under clean, but \[\[image.require\]\] #1 requires "
         r"min_acc = 0.5 of the same \(interval mode\); a check has one limit"),
        ('[[image.require]]\nattack = "pgd"\neps = 0.01\nmin_acc = 0.2\nmode = "point"\n[[image.require]]\n'
         'attack = "pgd"\neps = ["1/100"]\nmin_acc = 0.3\nmode = "point"\nmodels = ["deit-grc"]\n',
         r"#2 requires min_acc = 0.3 of deit-grc under pgd eps 0.01, but .* #1 requires min_acc = 0.2 .*point mode"),
    ],
)  # fmt: skip
@pytest.mark.usefixtures("gate_in_process")  # `check` evaluated here, not in a child
def test_two_limits_for_one_check_are_refused_naming_both_tables(
    tmp_path: Path, tables: str, needle: str, capfd
) -> None:
    """A check with two limits (which would the gate hold?) is refused like a repeated one, in one line naming both
    tables; from the API (load_spec) and the CLI (robfilt check exits 2 before any run)."""
    path = _spec(tmp_path, SECTION + tables)
    with pytest.raises(RobfiltError, match=needle):
        load_spec(path)
    assert run(["check", "--spec", str(path), "--out", str(tmp_path / "out"), "-q"]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "a check has one limit" in err and not (tmp_path / "out").exists()
