"""The strong default (autoattack-fast), the compute ledger, the convergence check and the cheap eps = 0 check."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from robustbench_filters.api.evaluate import evaluate
from robustbench_filters.attacks.cascade import cascade, convergence_subset
from robustbench_filters.attacks.catalogue import (
    ATTACK_SPECS,
    ATTACKS,
    DEFAULT_IMAGE_ATTACK,
    AttackInfo,
    Norm,
    register_attack,
)
from robustbench_filters.attacks.image import CONVERGENCE_SHARE
from robustbench_filters.checks import image as IC
from robustbench_filters.cli import run
from robustbench_filters.configs import ImageAttackConfig, LMAttackConfig
from robustbench_filters.core import names
from robustbench_filters.data import load_images


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - 0.286) / 0.353)


@pytest.fixture(scope="module")
def net() -> nn.Module:
    """A small MLP trained for a second on Fashion-MNIST: accurate enough that attacks have work to do."""
    torch.manual_seed(0)
    data = load_images("fashion-mnist", split="train")
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for i in range(0, 4000, 100):
        loss = F.cross_entropy(model(data.x[i : i + 100]), data.y[i : i + 100])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


class Counting(nn.Module):
    """The model, counting the rows of every forward pass and of every backward pass through its output."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.fwd, self.bwd = inner, 0, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.inner(x)
        self.fwd += len(x)
        if out.requires_grad:
            out.register_hook(lambda g, n=len(x): setattr(self, "bwd", self.bwd + n))
        return out


def test_the_default_is_the_strong_ensemble_for_images_and_pgd_for_lms() -> None:
    assert ImageAttackConfig(models=("deit",)).attacks == (DEFAULT_IMAGE_ATTACK,) == ("autoattack-fast",)
    assert names.DEFAULT_IMAGE_ATTACK == DEFAULT_IMAGE_ATTACK  # the CLI's help reads it without importing torch
    assert LMAttackConfig(models=("lm",)).attacks == ("pgd",)
    assert ATTACKS[DEFAULT_IMAGE_ATTACK].strength == "strong"
    assert ATTACKS["pgd"].strength == ATTACKS["fgsm"].strength == "weak"


def test_default_run_records_strength_ledger_and_convergence(net) -> None:
    result = evaluate([net], eps=[0.02, 0.05], n_examples=40, seed=0)  # no attack named
    assert result.summary.attacks == ["autoattack-fast"]
    rows = result.rows
    adv = rows[rows.attack == "autoattack-fast"]
    assert set(adv.fooled_by) <= {"", "clean", "apgd-ce", "apgd-t"} and "apgd-ce" in set(adv.fooled_by)
    assert adv.cost_exact.all() and (adv.fwd >= adv.bwd).all()
    assert (rows[rows.attack == "clean"].fwd == 1).all()
    # an example costs nothing at an eps once it is broken at a smaller one
    first = adv[adv.eps == 0.02].set_index("example_id")
    second = adv[adv.eps == 0.05].set_index("example_id")
    broken_before = first.index[~first.correct]
    assert (second.loc[broken_before, "fwd"] == 0).all()
    assert (second.loc[first.index[first.correct], "fwd"] > 0).all()
    (entry, *_) = [r.to_dict() for r in result.summary.models["model0"].robust]
    assert entry["strength"] == "strong" and entry["cost"]["exact"]
    assert entry["cost"]["fwd"] == pytest.approx(float(adv[adv.eps == entry["eps"]].fwd.sum()))
    assert sum(entry["broken_by"].values()) == entry["n"] - entry["correct"]
    # the convergence check: a seeded share of each eps's survivors (at least one) reran, recorded, judged
    for _, grp in adv.groupby("eps"):
        survivors = int(grp.correct.sum())
        checked = int(grp.convergence.isin(["held", "broken"]).sum())
        assert checked == (min(survivors, max(1, math.ceil(survivors * CONVERGENCE_SHARE))) if survivors else 0)
        assert (grp[grp.convergence != ""].correct).all()  # only survivors are rechecked
    assert any(c.name.startswith("attack converged") for c in result.summary.checks)
    assert result.summary.checks_summary.passed, result.summary.checks


def test_ledger_counts_exactly_what_the_model_ran(net) -> None:
    data = load_images("fashion-mnist", split="test")
    x, y, ids = data.x[:32], data.y[:32], torch.arange(32)
    model = Counting(net).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    with torch.no_grad():
        clean = net(x)
    rows = cascade(model, "m", "autoattack-fast", [0.02, 0.05], Norm.LINF, x, y, ids, clean.argmax(1) == y, None,
                   None, 10, 0, clean_logits=clean, convergence=1 / 8)  # fmt: skip
    assert model.fwd == rows.fwd.sum() + rows.conv_fwd.sum()
    assert model.bwd == rows.bwd.sum() + rows.conv_bwd.sum()
    assert not model.training  # torchattacks restores the mode it found: the engine's wrapper must not be "train"


def test_weak_attacks_are_marked_in_the_summary_and_the_table(net, tmp_path, capsys) -> None:
    result = evaluate([net], ["pgd", "fgsm"], [0.05], n_examples=16, seed=0)
    assert {r.strength for r in result.summary.models["model0"].robust} == {"weak"}
    assert not any(c.name.startswith("attack converged") for c in result.summary.checks)  # auto: strong only
    code = run(["attack", "--model", "deit", "--checkpoint", "none", "--attack", "pgd", "--eps", "0.05",
                "--n-examples", "4", "--out", str(tmp_path / "r"), "-q"])  # fmt: skip
    out = capsys.readouterr().out
    assert code in (0, 3) and "pgd (weaker)" in out and "upper bound" in out and "compute ledger" in out


def test_early_stop_off_and_convergence_on_demand(net) -> None:
    common = {"models": (net,), "eps": (0.1,), "n_examples": 16, "seed": 0, "steps": 10}
    on = evaluate(config=ImageAttackConfig(attacks=("pgd",), check_convergence=True, **common))
    off = evaluate(config=ImageAttackConfig(attacks=("pgd",), early_stop=False, check_convergence=False, **common))
    assert (on.rows.convergence != "").any() and (off.rows.convergence == "").all()
    attacked_on, attacked_off = on.rows[on.rows.attack == "pgd"], off.rows[off.rows.attack == "pgd"]
    assert attacked_on.fwd.sum() < attacked_off.fwd.sum()  # early exit spends less
    assert attacked_on.correct.sum() <= attacked_off.correct.sum()  # and keeps every point that fooled


def test_convergence_subset_is_seeded_and_sized() -> None:
    survivors = torch.arange(100, 140)
    a, b = convergence_subset(survivors, 1 / 16, 7), convergence_subset(survivors, 1 / 16, 7)
    assert torch.equal(a, b) and len(a) == 3 and set(a.tolist()) <= set(survivors.tolist())
    assert len(convergence_subset(survivors[:1], 1 / 16, 7)) == 1
    assert len(convergence_subset(survivors[:0], 1 / 16, 7)) == 0


def _rows(broken: int, checked: int, eps: float = 0.05) -> pd.DataFrame:
    status = ["broken"] * broken + ["held"] * (checked - broken) + [""] * 10
    return pd.DataFrame({"model": "m", "kind": "adversarial", "attack": "a", "eps": eps, "convergence": status})


@pytest.mark.parametrize(("broken", "checked", "status"), [(0, 4, "pass"), (1, 4, "pass"), (2, 4, "fail"),
                                                           (2, 100, "pass"), (3, 100, "fail")])  # fmt: skip
def test_convergence_check_tolerates_one_extra_example_or_two_percent(broken, checked, status) -> None:
    (check,) = IC.check_convergence(_rows(broken, checked), "m")
    assert check.status == status
    assert ("upper bound" in check.detail) == (status == "fail")


def test_convergence_check_is_per_eps_and_skips_old_rows() -> None:
    rows = pd.concat([_rows(1, 4, 0.02), _rows(1, 4, 0.05)])
    assert [c.status for c in IC.check_convergence(rows, "m")] == ["pass"]
    assert IC.check_convergence(rows.drop(columns="convergence"), "m") == []


def test_eps0_check_is_cheap_and_catches_an_attack_that_moves_x(net) -> None:
    result = evaluate([net], eps=[0.05], n_examples=16, seed=0)
    eps0 = next(c.to_dict() for c in result.summary.checks if c.name == "eps=0 equals clean")
    assert eps0["status"] == "pass" and "1 examples" in eps0["detail"]  # 16 examples: 1 probed

    def moving(model: nn.Module, p) -> list:
        return [("moving", lambda x, y: (x + 1e-3).clamp(0, 1))]

    register_attack(AttackInfo("moving-test", ATTACKS["pgd"].families, (Norm.LINF,), Norm.LINF, "test", moving))
    try:
        bad = evaluate([net], ["moving-test"], [0.05], n_examples=16, seed=0)
    finally:
        del ATTACKS["moving-test"], ATTACK_SPECS["moving-test"]  # both: later tests list the catalogue
    eps0 = next(c.to_dict() for c in bad.summary.checks if c.name == "eps=0 equals clean")
    assert eps0["status"] == "fail" and "moving" in eps0["detail"]
