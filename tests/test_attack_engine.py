"""The image attack engine: catalogue, cascade, rows, resume, sanity checks, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from robustbench_filters.api.evaluate import evaluate
from robustbench_filters.attacks import ATTACKS
from robustbench_filters.checks import image as IC
from robustbench_filters.cli import run
from robustbench_filters.core.family import Family
from robustbench_filters.data import load_images


class TinyNet(nn.Module):
    """A small MLP on 28x28 images: trains in seconds, strong enough for attacks to matter."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - 0.286) / 0.353)


@pytest.fixture(scope="module")
def tiny_net() -> nn.Module:
    torch.manual_seed(0)
    data = load_images("fashion-mnist", split="train")
    model = TinyNet()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(2):
        for i in range(0, 6000, 100):
            loss = F.cross_entropy(model(data.x[i : i + 100]), data.y[i : i + 100])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


class RoundedNet(nn.Module):
    """Gradient masking by quantisation: round() has zero gradient almost everywhere."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(torch.round(x * 4) / 4)


class SoftmaxNet(nn.Module):
    """Gradient masking by a softmax output layer (CE on probabilities saturates)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x).softmax(-1)


def _acc(result, attack: str) -> pd.Series:
    rows = result.rows
    return rows[rows.attack == attack].groupby("eps").correct.mean()


EPS = {"linf": 0.05, "l2": 1.0}


@pytest.mark.parametrize("attack", sorted(a for a, info in ATTACKS.items() if Family.IMAGE in info.families))
def test_every_catalogue_attack_stays_in_ball_and_lowers_accuracy(tiny_net, attack):
    info = ATTACKS[attack]
    norm = info.default_norm.value
    steps = None if info.steps == 1 else 10  # fgsm is one step (and refuses another count)
    result = evaluate([tiny_net], [attack], [EPS[norm]], n_examples=24, seed=1, norm=norm, steps=steps)
    rows = result.rows
    adv = rows[rows.attack == attack]
    assert (adv.pert_norm <= adv.eps * (1 + 1e-5) + 1e-6).all()
    assert adv.in_box.all()
    clean = rows[rows.attack == "clean"].correct.mean()
    assert adv.correct.mean() < clean, f"{attack} did not lower accuracy ({clean} -> {adv.correct.mean()})"


def test_cascade_is_at_least_as_strong_as_independent_runs(tiny_net):
    grid = [0.01, 0.03, 0.06]
    cascade = _acc(evaluate([tiny_net], ["pgd"], grid, n_examples=48, seed=3, steps=5), "pgd")
    for eps in grid:
        alone = _acc(evaluate([tiny_net], ["pgd"], [eps], n_examples=48, seed=3, steps=5), "pgd")[eps]
        assert cascade[eps] <= alone + 1 / 48 + 1e-9


def test_adversarial_found_at_small_eps_counts_at_larger_eps(tiny_net):
    result = evaluate([tiny_net], ["fgsm"], [0.02, 0.05, 0.1], n_examples=48, seed=0)
    rows = result.rows[result.rows.attack == "fgsm"].sort_values(["example_id", "eps"])
    for _, grp in rows.groupby("example_id"):
        flags = grp.correct.tolist()
        assert flags == sorted(flags, reverse=True)  # once fooled, fooled at every larger eps


def test_summary_has_intervals_and_checks(tiny_net):
    result = evaluate([tiny_net], ["fgsm", "pgd"], [0.02, 0.05], n_examples=32, seed=0, steps=20)
    model = next(iter(result.summary.models.values()))
    assert 0 <= model.clean.lo <= model.clean.acc <= model.clean.hi <= 1
    names = {c.name for c in result.summary.checks}
    assert {
        "eps=0 equals clean",
        "accuracy non-increasing in eps",
        "PGD at least as strong as FGSM",
        "inside eps-ball and [0,1]",
        "finite, non-zero gradients",
        "eval mode, deterministic",
    } <= names
    assert result.summary.checks_summary.passed


def test_pgd_weaker_than_fgsm_is_reported_as_failing(tiny_net):
    """5 steps of 0.15*eps cannot reach the ball's corners: the check must say so, not hide it."""
    result = evaluate([tiny_net], ["fgsm", "pgd"], [0.02, 0.05], n_examples=32, seed=0, steps=5)
    assert _status(result, "PGD at least as strong as FGSM") in (["fail"], ["warn"])
    assert _status(result, "PGD step budget reaches the ball") == ["warn"]


def _status(result, name):
    return [c.status for c in result.summary.checks if c.name == name]


def test_checks_flag_quantisation_masking(tiny_net):
    result = evaluate([RoundedNet(tiny_net)], ["pgd"], [0.05], n_examples=32, seed=0, steps=5)
    assert _status(result, "finite, non-zero gradients") == ["fail"]
    assert not result.summary.checks_summary.passed


def test_checks_flag_softmax_output(tiny_net):
    result = evaluate([SoftmaxNet(tiny_net)], ["pgd"], [0.05], n_examples=32, seed=0, steps=5)
    assert _status(result, "outputs are logits") == ["fail"]


def test_check_masking_flags_quantised_model(tiny_net):
    result = evaluate([RoundedNet(tiny_net)], ["pgd"], [0.02, 0.05], n_examples=32, seed=0, steps=5, check_masking=True)
    assert _status(result, "large eps reaches chance") == ["fail"]


class ZeroGradNet(nn.Module):
    """Masked gradients with an unchanged forward pass: the input gradient is exactly zero."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.detach() + 0 * x)


def test_check_masking_square_breaks_what_the_gradient_attack_left(tiny_net):
    """FGSM cannot move on a zero gradient; Square, run on the examples it left robust, breaks them: the number is
    overstated and the per-example black-box check says so (exit 3 on the CLI)."""
    result = evaluate([ZeroGradNet(tiny_net)], ["fgsm"], [0.1], n_examples=32, seed=0, check_masking=True)
    (check,) = [c for c in result.summary.checks if c.name == "white-box beats black-box"]
    assert check.status == "fail", check
    assert "overstated by at least" in check.detail
    assert not result.summary.checks_summary.passed


def test_check_blackbox_allowance():
    """The black-box check allows what the convergence check allows on the examples it covers: one at 256."""
    assert IC.check_blackbox(1, 71, 256, 256, 0.15, 5000, "m").status == "pass"
    assert IC.check_blackbox(2, 71, 256, 256, 0.15, 5000, "m").status == "fail"
    assert IC.check_blackbox(1, 10, 32, 32, 0.1, 5000, "m").status == "fail"
    assert IC.check_blackbox(0, 0, 32, 32, 0.1, 5000, "m").status == "pass"


def test_check_masking_passes_on_healthy_model(tiny_net):
    result = evaluate([tiny_net], ["pgd"], [0.02, 0.05], n_examples=32, seed=0, steps=20, check_masking=True)
    for name in ("large eps reaches chance", "5x steps not weaker", "white-box beats black-box"):
        assert _status(result, name) == ["pass"], result.summary.checks


def test_same_seed_same_numbers_and_resume(tiny_net, tmp_path):
    out = tmp_path / "run"
    first = evaluate([tiny_net], ["pgd"], [0.02, 0.05], n_examples=40, seed=5, steps=5, batch_size=16, out=out)
    summary = json.loads((out / "summary.json").read_text())
    # simulate a run killed after some units: drop the summary, the merged rows and one part
    (out / "summary.json").unlink()
    (out / "rows.parquet").unlink()
    parts = sorted((out / "parts").glob("*.parquet"))
    parts[-1].unlink()
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["status"] = "running"
    (out / "manifest.json").write_text(json.dumps(manifest))
    again = evaluate(
        [tiny_net], ["pgd"], [0.02, 0.05], n_examples=40, seed=5, steps=5, batch_size=16, out=out, resume=True
    )
    assert json.loads((out / "summary.json").read_text()) == summary
    pd.testing.assert_frame_equal(first.rows, again.rows)


def test_models_are_evaluated_on_the_same_examples(tiny_net):
    other = TinyNet().eval()
    result = evaluate([tiny_net, other], ["fgsm"], [0.05], n_examples=20, seed=2)
    ids = result.rows.groupby("model").example_id.apply(lambda s: tuple(sorted(set(s))))
    assert ids.nunique() == 1


def test_registry_models_run_end_to_end_through_the_cli(tmp_path, capsys):
    out = tmp_path / "cli-run"
    code = run(
        [
            "attack",
            "--model",
            "deit,deit-bsa-grc",
            "--attack",
            "fgsm",
            "--eps",
            "0.01,8/255",
            "--checkpoint",
            "none",
            "--n-examples",
            "8",
            "--out",
            str(out),
            "--json",
            "-q",
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert set(summary["models"]) == {"deit", "deit-bsa-grc"}
    assert summary["eps"] == pytest.approx([0.01, 8 / 255])
    assert (out / "manifest.json").exists() and (out / "rows.parquet").exists()


BAD = [
    (["--eps", "-0.1"], "is negative"),
    (["--eps", "nan"], "not finite"),
    (["--eps", "2"], "above 1"),
    (["--eps", "8/0"], "divides by zero"),
    (["--eps", ","], "empty item"),
    (["--steps", "0"], "--steps must be positive"),
    (["--attack", "pgdd"], "Did you mean"),
    (["--attack", "cw", "--norm", "linf"], "does not support --norm linf"),
    (["--n-examples", "5000"], "larger than the data (2000 examples)"),
    (["--n-examples", "0"], "must be positive"),
    (["--model", "deit-bogus"], "unknown model"),
    (["--device", "tpu"], "unknown --device"),
]


@pytest.mark.parametrize("args,needle", BAD)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, args, needle):
    out = tmp_path / "never"
    base = ["attack", "--model", "deit", "--attack", "pgd", "--checkpoint", "none", "-q", "--out", str(out)]
    code = run(base + args)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("error:") and len(err.splitlines()) == 1 and needle in err, err
    assert not out.exists()


def test_out_folder_with_a_different_run_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    args = [
        "attack",
        "--model",
        "deit",
        "--attack",
        "fgsm",
        "--checkpoint",
        "none",
        "--n-examples",
        "4",
        "-q",
        "--out",
        str(out),
    ]
    assert run(args) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert run(args + ["--seed", "9"]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert run(args + ["--seed", "9", "--resume"]) == 2
    assert "different run" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_unwritable_out_is_refused(tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = run(["attack", "--model", "deit", "--checkpoint", "none", "-q", "--out", str(blocker / "sub")])
    assert code == 2 and "is a file" in capsys.readouterr().err
    import robustbench_filters.runs.prepare as results

    monkeypatch.setattr(results.os, "access", lambda *a, **k: False)
    code = run(["attack", "--model", "deit", "--checkpoint", "none", "-q", "--out", str(tmp_path / "locked")])
    assert code == 2 and "not writable" in capsys.readouterr().err
    assert not (tmp_path / "locked").exists()


def test_foolbox_cross_check_on_zoo_model():
    """robfilt PGD is no more than 2 points weaker than Foolbox LinfPGD with the same settings."""
    fb = pytest.importorskip("foolbox")
    zoo = Path(__file__).resolve().parents[1] / "robustbench_filters" / "zoo" / "deit-micro" / "model.safetensors"
    if not zoo.exists():
        pytest.skip("zoo weights not built")
    from robustbench_filters import create_model

    model = create_model("deit", checkpoint="zoo")
    eps, n = 0.02, 128
    result = evaluate([model], ["pgd"], [eps], n_examples=n, seed=0, steps=20)
    ours = result.rows[result.rows.attack == "pgd"].correct.mean()
    data = load_images("fashion-mnist", split="test")
    ids = torch.tensor(sorted(result.rows.example_id.unique()))
    x, y = data.x[ids], data.y[ids]
    fmodel = fb.PyTorchModel(model, bounds=(0, 1))
    attack = fb.attacks.LinfPGD(abs_stepsize=0.15 * eps, steps=20, random_start=True)
    torch.manual_seed(0)
    _, _, success = attack(fmodel, x, y, epsilons=eps)
    with torch.no_grad():
        clean = model(x).argmax(1) == y
    theirs = (clean & ~success).float().mean().item()
    assert ours <= theirs + 0.02, (ours, theirs)


def tiny_factory() -> nn.Module:
    """A ``pkg.module:factory`` target for --model."""
    torch.manual_seed(0)
    return TinyNet().eval()


def test_python_factory_model_via_cli(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    code = run(
        [
            "attack",
            "--model",
            "test_attack_engine:tiny_factory",
            "--attack",
            "fgsm",
            "--eps",
            "0.05",
            "--n-examples",
            "8",
            "--out",
            str(tmp_path / "r"),
            "--json",
            "-q",
        ]
    )
    assert code == 0
    assert "test_attack_engine:tiny_factory" in json.loads(capsys.readouterr().out)["models"]


def test_timm_model_that_does_not_fit_the_data_is_refused(tmp_path, capsys):
    out = tmp_path / "r"
    code = run(
        [
            "attack",
            "--model",
            "timm:deit_tiny_patch16_224",
            "--checkpoint",
            "none",
            "--attack",
            "fgsm",
            "--n-examples",
            "4",
            "-q",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "cannot take fashion-mnist images" in err and len(err.splitlines()) == 1
    assert not out.exists()
