"""``--json``: exactly one JSON object on stdout on every exit path of every command.

Success, usage errors from typer/click itself (unknown options, bad option types, missing arguments), one-line
errors, errors raised while loading (a factory that raises, a bug), a failed sanity check (exit 3), Ctrl-C, a
model that prints, and the gate's supervised child ending the process. Each case runs in-process (the gate's
child is a process by design).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robustbench_filters.cli import run

ENDS = "import os, sys\n\ndef build():\n    {call}\n"
PRINTS = (
    "import torch\nfrom torch import nn\n\nclass Loud(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        torch.manual_seed(0)\n        self.lin = nn.Linear(784, 10)\n    def forward(self, x):\n"
    "        print('forward called')\n        return self.lin(x.flatten(1))\n\ndef build():\n"
    "    print('building the model')\n    return Loud()\n"
)
MASKED = (
    "import torch\nfrom torch import nn\n\nclass Masked(nn.Module):\n    def __init__(self):\n"
    "        super().__init__()\n        torch.manual_seed(0)\n        self.lin = nn.Linear(784, 10)\n"
    "    def forward(self, x):\n        return self.lin(torch.round(x.flatten(1) * 4) / 4)\n\ndef build():\n"
    "    return Masked()\n"
)
TINY = ["--attack", "fgsm", "--eps", "0.1", "--n-examples", "4", "--batch-size", "4", "-q"]


def one_json(out: str) -> dict:
    """stdout holds exactly one JSON document, and it is an object."""
    value = json.loads(out)  # raises on empty output, on two documents and on any other text
    assert isinstance(value, dict), out
    return value


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "ends.py").write_text(ENDS.format(call="os._exit(0)"))
    (tmp_path / "raises.py").write_text(ENDS.format(call="raise ValueError('broken config')"))
    (tmp_path / "prints.py").write_text(PRINTS)
    (tmp_path / "masked.py").write_text(MASKED)
    (tmp_path / "notarun").mkdir()
    (tmp_path / "notarun" / "x.txt").write_text("x")
    monkeypatch.chdir(tmp_path)
    return tmp_path


ERRORS: list[tuple[list[str], int]] = [
    # typer/click's own usage errors
    (["--json"], 2),
    (["nosuchcommand", "--json"], 2),
    (["attack", "--json", "--bogus"], 2),
    (["attack", "--json", "--steps", "abc"], 2),
    (["lipschitz", "--json", "-n", "many"], 2),
    (["certify", "--json", "--n0"], 2),
    (["train", "--json", "--seed", "x"], 2),
    (["report", "--json"], 2),
    (["report", "--json", "notarun"], 2),
    (["study", "--json", "--seeds", "x"], 2),
    (["verify", "--json"], 2),
    (["models", "show", "--json", "--nope"], 2),
    # one-line errors
    (["attack", "--json", "--model", "nosuch-model"], 2),
    (["attack", "--json", "--model", "deit", "--eps", "0.1,0.1", "--checkpoint", "none"], 2),
    (["lipschitz", "--json", "--model", "deit", "--method", "nosuch"], 2),
    (["certify", "--json", "--model", "deit", "--sigma", "-1"], 2),
    (["train", "--json", "--model", "nosuch"], 2),
    (["report", "--json", "notarun", "--out", "rep"], 2),
    (["report", "--json", "notarun", "notarun", "--out", "rep"], 2),
    (["study", "--json", "--seeds", "0", "--out", "s"], 2),
    (["study", "--json", "--write-up", "--out", "nothing-here"], 2),
    (["verify", "--json", "notarun"], 2),
    (["models", "show", "nosuch", "--json"], 2),
    # errors raised while loading a user's model
    (["attack", "--json", "--model", "raises.py:build", *TINY], 2),
    (["attack", "--json", "--model", "missing.py:build", *TINY], 2),
]


@pytest.mark.parametrize(("argv", "code"), ERRORS, ids=[" ".join(a) for a, _ in ERRORS])
def test_every_error_path_prints_one_json_object(project, capsys, argv: list[str], code: int) -> None:
    assert run(argv) == code
    out = capsys.readouterr().out
    doc = one_json(out)
    assert doc.get("exit_code", code) == code or "runs" in doc, doc


def test_help_and_version_under_json_still_print_one_object(project, capsys) -> None:
    for argv in (["attack", "--help", "--json"], ["--json", "--version"], ["models", "--json"]):
        code = run(argv)
        doc = one_json(capsys.readouterr().out)
        assert doc["exit_code"] == code


def test_success_sanity_failure_and_a_printing_model_print_one_object(project, capsys) -> None:
    assert run(["attack", "--json", "--model", "prints.py:build", *TINY, "--out", "a"]) == 0
    cap = capsys.readouterr()
    doc = one_json(cap.out)
    assert doc["out"] == "a" and "building the model" in cap.err  # the model's prints go to stderr
    assert run(["attack", "--json", "--model", "masked.py:build", *TINY, "--out", "b"]) == 3
    doc = one_json(capsys.readouterr().out)
    assert doc["checks_summary"]["fail"] >= 1  # the summary, marked failing: exit 3
    assert run(["report", "a", "--out", "rep", "--json", "--figures", "none"]) == 0
    assert "tables" in one_json(capsys.readouterr().out)
    assert run(["verify", "a", "--json"]) == 0
    assert one_json(capsys.readouterr().out)["ok"] is True


def test_ctrl_c_and_a_bug_print_one_object(project, capsys, monkeypatch) -> None:
    import robustbench_filters.api.evaluate as runner  # the CLI runs through the API, which calls the runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run", interrupted)
    assert run(["attack", "--json", "--model", "deit", "--checkpoint", "none", *TINY]) == 130
    assert one_json(capsys.readouterr().out)["exit_code"] == 130

    def bug(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(runner, "run", bug)
    assert run(["attack", "--json", "--model", "deit", "--checkpoint", "none", *TINY]) == 1
    cap = capsys.readouterr()
    assert "ZeroDivisionError" in one_json(cap.out)["error"] and "Traceback" in cap.err


SPEC = """version = 1
allow_code = true
out = "runs/check"
[image]
models = ["{model}"]
attacks = ["fgsm"]
eps = [0.01]
n_examples = 4
checkpoint = "none"
[[image.require]]
attack = "clean"
min_acc = 0.0
"""


def test_gate_supervised_child_ending_the_process_prints_one_object(project, capfd) -> None:
    """The child ends with os._exit(0) before it evaluates a check and prints nothing: the parent speaks for it."""
    (project / "spec.toml").write_text(SPEC.format(model="ends.py:build"))
    assert run(["check", "--spec", "spec.toml", "--json", "-q"]) == 2
    doc = one_json(capfd.readouterr().out)
    assert doc["exit_code"] == 2 and "before it evaluated its checks" in doc["error"]


def test_the_gate_forwards_exactly_its_childs_object() -> None:
    """What the supervisor reads from its child's stdout: the one object, also among stray lines a child's
    C code may write to the descriptor; nothing usable gives None (the parent then prints its own error)."""
    from robustbench_filters.cli.check import _one_json

    doc = {"error": "bad --tolerance", "exit_code": 2}
    assert _one_json(json.dumps(doc, indent=2)) == doc
    assert _one_json("loading weights...\n" + json.dumps(doc, indent=2) + "\n") == doc
    assert _one_json("") is None and _one_json("[1, 2]") is None and _one_json("not json") is None


@pytest.mark.parametrize("rank", ["0", "1"])
def test_under_torchrun_only_rank_0_writes_json(project, capsys, monkeypatch, rank: str) -> None:  # noqa: ANN001
    """Every torchrun rank runs the command and their stdouts are joined: rank 1 adds nothing, on success or error
    (its one-line error still reaches stderr)."""
    for name, value in (("RANK", rank), ("WORLD_SIZE", "2"), ("LOCAL_RANK", rank)):
        monkeypatch.setenv(name, value)
    assert run(["models", "list", "--json"]) == 0
    listed = capsys.readouterr().out
    assert run(["attack", "--json", "--n-examples", "0"]) == 2
    out, err = capsys.readouterr()
    assert "--n-examples must be positive" in err
    if rank == "1":
        assert listed == "" and out == ""
    else:
        assert isinstance(json.loads(listed), list) and one_json(out)["exit_code"] == 2
