"""`robfilt models list|show`: JSON output, the formulation note, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from robustbench_filters.cli import run
from robustbench_filters.models.describe import FORMULATION_NOTE

ALL_VARIANTS = ["deit", "deit-bsa", "deit-grc", "deit-bsa-grc", "lm", "lm-bsa", "lm-grc", "lm-bsa-grc"]
ZOO_MODELS = ["deit-at", "deit-grc-at"]  # adversarially trained weights of deit and deit-grc, under their own names
REPO = Path(__file__).resolve().parents[1]


def test_models_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["models", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == ALL_VARIANTS + ZOO_MODELS
    at = {r["name"]: r for r in rows}["deit-grc-at"]
    assert at["architecture"] == "deit-grc" and at["grc"] and at["sizes"] == ["micro"]
    assert at["zoo"]["micro"]["test_acc_pgd20"] >= 0.40  # the zoo's bar for an adversarially trained model
    sizes = {r["name"]: r["sizes"] for r in rows}
    assert sizes["deit-bsa-grc"] == ["micro", "tiny", "small", "base"]
    assert sizes["lm"] == ["micro", "small"]
    flags = {r["name"]: (r["bsa"], r["grc"]) for r in rows}
    assert flags["deit-bsa"] == (True, False) and flags["lm-grc"] == (False, True) and flags["lm"] == (False, False)


def test_models_list_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ALL_VARIANTS + ZOO_MODELS) and "PGD-20" in out


def test_models_show_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["models", "show", "deit-bsa-grc", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["name"] == "deit-bsa-grc" and info["size"] == "micro"
    cfg = info["config"]
    assert cfg["bsa"] is True and cfg["grc"] is True and cfg["grc_lambda"] == 0.1 and cfg["pos_kernel"] == "gaussian"
    assert isinstance(info["num_params"], int) and 100_000 < info["num_params"] < 400_000
    text = " ".join(info["formulas"])
    assert "sigma_h" in text and "lambda (Y_0 - Y)" in text
    assert info["note"] == FORMULATION_NOTE
    assert "this project's formulation" in info["note"] and "2506.10371" in info["note"]


def test_models_show_a_zoo_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["models", "show", "deit-at", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["architecture"] == "deit" and "adversarial training" in info["training"]
    assert info["zoo"]["metrics"]["test_acc_pgd20"] >= 0.40 and info["config"]["grc"] is False
    assert run(["models", "show", "deit-at", "--size", "tiny"]) == 2
    assert "micro only" in capsys.readouterr().err


def test_a_zoo_model_is_its_zoo_weights(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from robustbench_filters.models import create_model

    tuned, base = create_model("deit-at", checkpoint="zoo"), create_model("deit", checkpoint="zoo")
    assert any(not (a == b).all() for a, b in zip(tuned.state_dict().values(), base.state_dict().values(), strict=True))
    code = run(["attack", "--model", "deit-at", "--checkpoint", "none", "-n", "2", "--out", str(tmp_path / "o")])
    assert code == 2 and "its weights are the model" in capsys.readouterr().err


def test_models_show_text_mentions_formulas_and_note(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["models", "show", "lm-grc"]) == 0
    out = capsys.readouterr().out
    assert "GRC: Y <- Y + F(LN(Y))" in out and "this project's formulation" in out


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["models", "show", "deit-bsx"], "unknown model 'deit-bsx'. Did you mean 'deit-bsa'"),
        (["models", "show", "lm", "--size", "base"], "unknown size for lm 'base'"),
        (["models", "shoe", "deit"], "No such command"),
    ],
)
def test_user_errors_are_one_line_with_exit_code_2(capfd: pytest.CaptureFixture[str], argv, match: str) -> None:
    assert run(argv) == 2
    out, err = capfd.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and match in lines[0]
    assert "Traceback" not in err + out


def test_python_dash_m_entry_point() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "robustbench_filters.cli", "models", "list", "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert [r["name"] for r in json.loads(proc.stdout)] == ALL_VARIANTS + ZOO_MODELS
