"""The catalogue of bad inputs across every command.

Each case asserts three things: the exit code (2 for usage errors, 1 for a regression in ``check``), a single
``error:`` line on stderr that names the problem and the fix, and that nothing under the output folder was
created or changed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import finished
import pytest
import torch

from robustbench_filters.cli import run
from robustbench_filters.models import create_model, save_checkpoint


@pytest.fixture(scope="module")
def world(tmp_path_factory, finished_run) -> dict[str, Path]:
    """Runs, checkpoints and files that the bad-input cases point at (built once)."""
    root = tmp_path_factory.mktemp("world")
    shutil.copytree(finished_run, root / "run-a")  # the session's finished run (tests/finished.py)
    assert run([*finished.ARGS, "--seed", "1", "--out", str(root / "run-b")]) == 0  # the same on other examples
    unfinished = root / "unfinished"
    shutil.copytree(root / "run-a", unfinished)
    (unfinished / "summary.json").unlink()
    manifest = json.loads((unfinished / "manifest.json").read_text())
    manifest["status"] = "running"
    (unfinished / "manifest.json").write_text(json.dumps(manifest))
    torch.manual_seed(0)
    save_checkpoint(create_model("lm", checkpoint="none"), root / "lm-ckpt")
    save_checkpoint(create_model("deit", checkpoint="none"), root / "corrupt-ckpt")
    blob = bytearray((root / "corrupt-ckpt" / "model.safetensors").read_bytes())
    blob[-100:] = bytes(100)
    (root / "corrupt-ckpt" / "model.safetensors").write_bytes(bytes(blob))
    torch.save(create_model("deit", checkpoint="none").state_dict(), root / "weights.pt")
    (root / "empty.txt").write_text("")
    (root / "empty-dir").mkdir()
    (root / "notarun").mkdir()
    (root / "notarun" / "hello.txt").write_text("hi")
    (root / "spec-unknown.toml").write_text(
        'version = 1\n[image]\nmodels = ["deit"]\nattacks = ["pgd"]\nepss = [0.1]\n'
    )
    (root / "spec-broken.toml").write_text("version = 1\n[image\n")
    (root / "spec-missing.toml").write_text(
        'version = 1\n[image]\nmodels = ["deit"]\nattacks = ["fgsm"]\n'
        '[[image.require]]\nattack = "pgd"\neps = 0.5\nmin_acc = 0.1\n'
    )
    (root / "spec-escape.toml").write_text(
        'version = 1\nout = "../../../../../../tmp/robfilt-escape"\n[image]\nmodels = ["deit"]\n'
    )
    summary = json.loads((root / "run-a" / "summary.json").read_text())
    for model in summary["models"].values():  # a baseline that was perfect: the run regressed from it
        for cell in [model["clean"], *model["robust"]]:
            cell.update(acc=1.0, lo=1.0, hi=1.0, correct=cell["n"])
    (root / "baseline.json").write_text(json.dumps(summary))
    return root


def W(name: str) -> str:
    return f"{{world}}/{name}"


CASES: list[tuple[str, list[str], str, int]] = [
    # models
    ("models-unknown-name", ["models", "show", "deit-bsx"], "Did you mean", 2),
    ("models-unknown-size", ["models", "show", "deit", "--size", "huge"], "unknown size", 2),
    ("models-bad-option", ["models", "list", "--bogus"], "No such option", 2),
    # train
    ("train-unknown-model", ["train", "--model", "vit", "--steps", "1", "--out", "{out}"], "unknown model", 2),
    ("train-zero-steps", ["train", "--model", "deit", "--steps", "0", "--out", "{out}"], "--steps must be positive", 2),
    (
        "train-negative-epochs",
        ["train", "--model", "deit", "--epochs", "-2", "--out", "{out}"],
        "--epochs must be positive",
        2,
    ),
    (
        "train-zero-batch",
        ["train", "--model", "deit", "--steps", "1", "--batch-size", "0", "--out", "{out}"],
        "--batch-size",
        2,
    ),
    (
        "train-missing-data",
        ["train", "--model", "lm", "--steps", "1", "--data", "text:/no/such/file", "--out", "{out}"],
        "does not exist",
        2,
    ),
    (
        "train-empty-text",
        ["train", "--model", "lm", "--steps", "1", "--data", "text:" + W("empty.txt"), "--out", "{out}"],
        "empty",
        2,
    ),
    (
        "train-empty-image-dir",
        ["train", "--model", "deit", "--steps", "1", "--data", "imagefolder:" + W("empty-dir"), "--out", "{out}"],
        "empty-dir",
        2,
    ),
    (
        "train-bad-tokenizer",
        ["train", "--model", "lm", "--steps", "1", "--tokenizer", "wordpiece", "--out", "{out}"],
        "unknown --tokenizer",
        2,
    ),
    (
        "train-unknown-data",
        ["train", "--model", "deit", "--steps", "1", "--data", "fashion-mnsit", "--out", "{out}"],
        "Did you mean",
        2,
    ),
    # attack
    ("attack-eps-div0", ["attack", "--eps", "8/0"], "divides by zero", 2),
    ("attack-eps-empty-item", ["attack", "--eps", ","], "empty item", 2),
    ("attack-eps-nan", ["attack", "--eps", "nan"], "not finite", 2),
    ("attack-eps-negative", ["attack", "--eps", "-0.5"], "is negative", 2),
    ("attack-eps-above-1", ["attack", "--eps", "8"], "above 1", 2),
    ("attack-eps-word", ["attack", "--eps", "small"], "not a number", 2),
    ("attack-unknown-attack", ["attack", "--attack", "pgdd"], "Did you mean", 2),
    ("attack-text-on-image", ["attack", "--attack", "wordswap"], "does not fit", 2),
    (
        "attack-rate-above-1",
        ["attack", "--model", "lm", "--attack", "wordswap", "--rate", "1.5"],
        "outside [0, 1]",
        2,
    ),
    (
        "attack-too-many-examples",
        ["attack", "--n-examples", "99999"],
        "larger than the data (2000 examples); pass --n-examples 2000",
        2,
    ),
    ("attack-zero-steps", ["attack", "--steps", "0"], "--steps must be positive", 2),
    ("attack-bad-step-size", ["attack", "--step-size", "-1"], "--step-size must be a positive number", 2),
    ("attack-wrong-checkpoint", ["attack", "--checkpoint", W("lm-ckpt")], "not 'deit'", 2),
    ("attack-corrupt-checkpoint", ["attack", "--checkpoint", W("corrupt-ckpt")], "corrupted", 2),
    ("attack-pickle-checkpoint", ["attack", "--checkpoint", W("weights.pt")], "pickle", 2),
    ("attack-unknown-model", ["attack", "--model", "deit,deit-grcc"], "Did you mean", 2),
    ("attack-mixed-families", ["attack", "--model", "deit,lm"], "cannot mix", 2),
    ("attack-eps-with-corruption", ["attack", "--attack", "corruption", "--eps", "0.1"], "--eps does not apply", 2),
    # lipschitz
    (
        "lipschitz-zero-examples",
        ["lipschitz", "--model", "deit", "--checkpoint", "none", "--n-examples", "0", "--out", "{out}"],
        "n-examples",
        2,
    ),
    (
        "lipschitz-unknown-method",
        ["lipschitz", "--model", "deit", "--checkpoint", "none", "--method", "exactt", "--out", "{out}"],
        "Did you mean",
        2,
    ),
    (
        "lipschitz-unknown-model",
        ["lipschitz", "--model", "deit-xyz", "--checkpoint", "none", "--out", "{out}"],
        "unknown model",
        2,
    ),
    # report
    ("report-not-a-run", ["report", W("notarun"), "--out", "{out}"], "not a robfilt run folder", 2),
    ("report-mixed-runs", ["report", W("run-a"), W("run-b"), "--out", "{out}"], "different examples", 2),
    ("report-unfinished-run", ["report", W("unfinished"), "--out", "{out}"], "unfinished", 2),
    ("report-bad-format", ["report", W("run-a"), "--out", "{out}", "--format", "docx"], "docx", 2),
    # check
    ("check-unknown-key", ["check", "--spec", W("spec-unknown.toml"), "--out", "{out}"], "epss", 2),
    ("check-malformed-spec", ["check", "--spec", W("spec-broken.toml"), "--out", "{out}"], "spec-broken.toml", 2),
    (
        "check-missing-metric",
        ["check", "--spec", W("spec-missing.toml"), "--run", W("run-a"), "--out", "{out}"],
        "pgd",
        2,
    ),
    ("check-path-escapes", ["check", "--spec", W("spec-escape.toml")], "outside", 2),
    (
        "check-regression",
        ["check", "--run", W("run-a"), "--baseline", W("baseline.json"), "--out", "{out}"],
        "regress",
        1,
    ),
    (
        "check-unfinished-run",
        ["check", "--run", W("unfinished"), "--baseline", W("baseline.json"), "--out", "{out}"],
        "unfinished",
        2,
    ),
]

DEFAULTS = {"attack": ["--model", "deit", "--checkpoint", "none", "--out", "{out}"]}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return (
        {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        if folder.exists()
        else {}
    )


@pytest.mark.usefixtures("gate_in_process")  # `check` evaluated here, not in a child
@pytest.mark.parametrize("case,argv,needle,code", CASES, ids=[c[0] for c in CASES])
def test_bad_input(world, tmp_path, capfd, case, argv, needle, code):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("earlier work")  # nothing written earlier may be lost or changed
    args = list(argv)
    if args[0] == "attack" and "--out" not in args:
        defaults = list(DEFAULTS["attack"])
        # options given by the case win over the defaults
        for flag in ("--model", "--checkpoint"):
            if flag in args:
                i = defaults.index(flag)
                del defaults[i : i + 2]
        args += defaults
    args = [a.replace("{out}", str(out / "run")).replace("{world}", str(world)) for a in args] + ["-q"]
    world_before = _snapshot(world)
    before = _snapshot(out)
    result = run(args)
    captured = capfd.readouterr()
    err = captured.err.strip()
    lines = [line for line in err.splitlines() if line.strip()]
    assert result == code, f"{case}: exit {result}, stderr: {err}"
    assert lines and lines[-1].startswith("error:"), f"{case}: {err}"
    assert len([ln for ln in lines if ln.startswith("error:")]) == 1 and "Traceback" not in err, f"{case}: {err}"
    assert needle.lower() in lines[-1].lower(), f"{case}: {lines[-1]}"
    if code == 2:
        assert len(lines) == 1, f"{case}: expected exactly one line, got {lines}"
    assert _snapshot(out) == before or code == 1, f"{case}: files under --out changed"
    if code == 1:  # a regression verdict may write its reports, but never touch earlier files
        assert (out / "keep.txt").read_text() == "earlier work"
    assert _snapshot(world) == world_before, f"{case}: input files changed"


def test_catalogue_is_big_enough():
    commands = {c[1][0] for c in CASES}
    assert len(CASES) >= 30
    assert {"models", "train", "attack", "lipschitz", "report", "check"} <= commands


def test_pickle_checkpoint_loads_only_when_opted_in(world, tmp_path, capfd):
    """--allow-pickle reads a torch state dict with weights_only=True; without it the file is refused."""
    args = [
        "attack",
        "--model",
        "deit",
        "--checkpoint",
        str(world / "weights.pt"),
        "--attack",
        "fgsm",
        "--eps",
        "0.01",
        "--n-examples",
        "4",
        "-q",
        "--out",
        str(tmp_path / "run"),
    ]
    assert run(args) == 2
    assert "pickle" in capfd.readouterr().err
    assert run(args + ["--allow-pickle"]) == 0
