"""The strong default (apgd-adaptive), the compute ledger, the convergence check and the cheap eps = 0 check."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from robustbench_filters.api.evaluate import evaluate
from robustbench_filters.attacks.cascade import Batch, CascadeSettings, cascade, convergence_sample
from robustbench_filters.attacks.catalogue import (
    ATTACK_SPECS,
    ATTACKS,
    DEFAULT_IMAGE_ATTACK,
    AttackInfo,
    AttackParams,
    Norm,
    register_attack,
)
from robustbench_filters.checks.convergence import allowed
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


def trained_net(seed: int) -> nn.Module:
    """A small MLP trained for a second on Fashion-MNIST: accurate enough that attacks have work to do."""
    torch.manual_seed(seed)
    data = load_images("fashion-mnist", split="train")
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for i in range(0, 4000, 100):
        loss = F.cross_entropy(model(data.x[i : i + 100]), data.y[i : i + 100])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def net() -> nn.Module:
    return trained_net(0)


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
    assert ImageAttackConfig(models=("deit",)).attacks == (DEFAULT_IMAGE_ATTACK,) == ("apgd-adaptive",)
    assert names.DEFAULT_IMAGE_ATTACK == DEFAULT_IMAGE_ATTACK  # the CLI's help reads it without importing torch
    assert LMAttackConfig(models=("lm",)).attacks == ("pgd",)
    assert ATTACKS[DEFAULT_IMAGE_ATTACK].strength == "strong"
    assert ATTACKS["pgd"].strength == ATTACKS["fgsm"].strength == "weak"


def test_default_run_records_strength_ledger_and_convergence(net) -> None:
    result = evaluate([net], eps=[0.02, 0.05], n_examples=40, seed=0)  # no attack named
    assert result.summary.attacks == ["apgd-adaptive"]
    rows = result.rows
    adv = rows[rows.attack == "apgd-adaptive"]
    assert set(adv.fooled_by) <= {"", "clean", "apgd-ce", "apgd-t", "rerun"} and "apgd-ce" in set(adv.fooled_by)
    assert adv.cost_exact.all() and (adv.fwd[adv.bwd > 0] > 0).all()  # no backward pass without a forward one
    assert (rows[rows.attack == "clean"].fwd == 1).all()
    # eps descending: every clean-correct example is attacked at the largest eps; at the smaller one, an example
    # that held the larger (and its check) costs nothing and stays correct, and every other one is attacked again
    first = adv[adv.eps == 0.02].set_index("example_id")
    second = adv[adv.eps == 0.05].set_index("example_id")
    assert (second.fwd[second.clean_correct] > 0).all()
    held_above = second.index[second.correct]
    assert len(held_above) and (first.loc[held_above, "fwd"] == 0).all() and first.loc[held_above, "correct"].all()
    again = first.index[first.clean_correct & ~first.index.isin(held_above)]
    assert len(again) and (first.loc[again, "fwd"] > 0).all()
    (entry, *_) = [r.to_dict() for r in result.summary.models["model0"].robust]
    assert entry["strength"] == "strong" and entry["cost"]["exact"]
    assert entry["cost"]["fwd"] == pytest.approx(float(adv[adv.eps == entry["eps"]].fwd.sum()))
    assert sum(entry["broken_by"].values()) == entry["n"] - entry["correct"]
    # the convergence check: 40 examples (fewer than 1280), so every survivor of each eps reran, recorded, judged
    # (the default escalates: what its last round broke is broken, so those were survivors when the round began),
    # at the largest eps each survived: at a smaller one it is covered
    for eps, grp in adv.groupby("eps"):
        broken = grp.convergence == "broken"
        survivors = int(grp.correct.sum()) + int(broken.sum())
        checked = int(grp.convergence.isin(["held", "broken", "covered"]).sum())
        assert checked == survivors
        assert (grp[grp.convergence.isin(["held", "covered"])].correct).all() and not grp[broken].correct.any()
        covered = grp.example_id[grp.convergence == "covered"]
        above = adv[(adv.eps > eps) & adv.example_id.isin(covered)]
        assert set(covered) == set(above.example_id[above.convergence == "held"])  # held at the largest eps
        assert (grp.conv_fwd[grp.convergence == "covered"] == 0).all()
    assert (adv.convergence == "covered").any()
    (conv,) = [c for c in result.summary.checks if c.name.startswith("attack converged")]
    assert "broke -" not in conv.detail, conv.detail  # each eps counts only its own escalation's breaks
    assert result.summary.checks_summary.passed, result.summary.checks


def test_ledger_counts_exactly_what_the_model_ran(net) -> None:
    data = load_images("fashion-mnist", split="test")
    x, y, ids = data.x[:32], data.y[:32], torch.arange(32)
    model = Counting(net).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    with torch.no_grad():
        clean = net(x)
    template = AttackParams(0.0, Norm.LINF, None, None, 0, 10)
    settings = CascadeSettings("apgd-adaptive", (0.02, 0.05), template, convergence=0.5)
    rows = cascade(model, "m", Batch(x, y, ids, clean.argmax(1) == y, clean), settings)
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


def test_convergence_sample_is_seeded_per_example_and_independent_of_the_batch() -> None:
    ids = torch.arange(100, 400)
    a = convergence_sample(ids, 0.5, ("s", 7))
    assert torch.equal(a, convergence_sample(ids, 0.5, ("s", 7)))
    assert 100 < int(a.sum()) < 200  # about half
    assert torch.equal(convergence_sample(ids[150:], 0.5, ("s", 7)), a[150:])  # a unit sees its own examples only
    assert bool(convergence_sample(ids, 1.0, ("s", 7)).all())
    assert not torch.equal(a, convergence_sample(ids, 0.5, ("s", 8)))


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
        del ATTACKS["moving-test"], ATTACK_SPECS["moving-test"]  # both: later tests compare the catalogue
    eps0 = next(c.to_dict() for c in bad.summary.checks if c.name == "eps=0 equals clean")
    assert eps0["status"] == "fail" and "moving" in eps0["detail"]


def test_the_default_escalates_until_a_round_breaks_nothing(net) -> None:
    """An escalating attack whose stages run two steps (a registered copy of the default with no declared budget,
    so two steps are its own, not a cut) leaves examples its stronger rerun breaks: those count (fooled_by
    'rerun', their points inside the ball), further rounds run on what is left, and the convergence column records
    the last round of each unit only. A non-escalating attack's rerun is a check alone: its rows keep their
    outcome."""
    kwargs = {"eps": [0.06], "n_examples": 64, "seed": 0, "steps": 2}
    weak, plain = "two-step-escalating-test", "no-escalation-test"
    register_attack(replace(ATTACKS["apgd-adaptive"], name=weak, steps=None))
    register_attack(replace(ATTACKS["apgd-adaptive"], name=plain, steps=None, escalates=False))
    try:
        result = evaluate([net], attacks=[weak], **kwargs)
        again = evaluate([net], attacks=[weak], **kwargs).rows
        # without the escalation (the check alone) the same stages leave every one of them robust
        alone = evaluate([net], attacks=[plain], **kwargs)
    finally:
        for name in (weak, plain):
            del ATTACKS[name], ATTACK_SPECS[name]  # both: later tests compare the catalogue
    adv = result.rows[result.rows.attack == weak]
    rerun = adv[adv.fooled_by == "rerun"]
    assert len(rerun) > 0 and not rerun.correct.any()
    assert (rerun.pert_norm <= 0.06 + 1e-6).all()
    assert (adv.conv_fwd[adv.fooled_by == "rerun"] > 0).all()
    alone_adv = alone.rows[alone.rows.attack == plain].set_index("example_id")
    assert "rerun" not in set(alone_adv.fooled_by)
    assert alone_adv.loc[rerun.example_id, "correct"].all()
    assert int(adv.correct.sum()) < int(alone_adv.correct.sum())
    # the rows are the run's: the same command gives the same numbers
    pd.testing.assert_frame_equal(
        result.rows.drop(columns="seconds", errors="ignore"), again.drop(columns="seconds", errors="ignore")
    )


def test_the_default_cut_by_the_user_does_not_escalate_and_its_check_fails(net) -> None:
    """The default cut to one step (below its own budget): it is labelled weaker, its rerun runs at the
    default's own settings (doubled) as a check alone, so what that breaks stays robust in the rows, and the check
    fails (issue 41: a check exists to catch a weak attack, whatever made it weak)."""
    cut = evaluate([net], eps=[0.06], n_examples=64, seed=0, steps=1)
    (entry,) = cut.summary.models["model0"].robust
    adv = cut.rows[cut.rows.attack == "apgd-adaptive"]
    assert entry.strength == "weak" and "rerun" not in set(adv.fooled_by)
    broken = adv[adv.convergence == "broken"]
    assert len(broken) > allowed(64) and broken.correct.all()
    (check,) = [c for c in cut.summary.checks if c.name.startswith("attack converged")]
    assert check.status == "fail" and "upper bound" in check.detail


def test_the_default_without_its_check_skips_the_escalation_and_is_marked_weaker(net) -> None:
    off = evaluate([net], eps=[0.06], n_examples=32, seed=0, check_convergence=False)
    (entry,) = off.summary.models["model0"].robust
    assert entry.correct > 0 and entry.strength == "weak"
    assert not off.rows.convergence.isin(["held", "broken"]).any() and "rerun" not in set(off.rows.fooled_by)
    (on,) = evaluate([net], eps=[0.06], n_examples=32, seed=0).summary.models["model0"].robust
    assert on.strength == "strong" and on.correct <= entry.correct
