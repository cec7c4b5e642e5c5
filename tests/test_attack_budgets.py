"""A budget the user cut is never called strong, the convergence check reruns at the attack's own settings (so it
fails a crippled attack), and an option an attack would ignore is refused in one line (issue 41, class 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torchattacks
from torch import nn

from robustbench_filters.api.evaluate import evaluate
from robustbench_filters.attacks import adaptive
from robustbench_filters.attacks.apgd import EarlyAPGD, EarlyAPGDT
from robustbench_filters.attacks.catalogue import ATTACKS, AttackParams, Norm
from robustbench_filters.attacks.early import EarlyPGD, EarlyPGDL2
from robustbench_filters.attacks.targeted import RankedAPGDT
from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.core.names import ATTACK_SPECS


def _iterations(fn: object) -> int:
    """The iterations one built component runs (steps; Square's queries; a ranked APGD-T's longest run)."""
    if not isinstance(fn, torchattacks.attack.Attack):
        fn = fn.attack  # within_ball's wrapped attack
    if isinstance(fn, RankedAPGDT):
        return max(fn.plan.sweep_steps, fn.plan.escalate_steps)
    if isinstance(fn, torchattacks.Square):
        return fn.n_queries
    if isinstance(fn, torchattacks.FGSM):
        return 1
    assert isinstance(fn, EarlyAPGD | EarlyAPGDT | EarlyPGD | EarlyPGDL2 | torchattacks.FAB | torchattacks.CW), fn
    return fn.steps


def _named(name: str, **kwargs) -> list:
    norm = kwargs.pop("norm", ATTACK_SPECS[name].default_norm)
    given = {"steps": None, "step_size": None, "n_classes": 10, **kwargs}
    params = AttackParams(eps=0.1, norm=norm, seed=0, **given)
    return ATTACKS[name].build(nn.Sequential(nn.Flatten(), nn.Linear(784, given["n_classes"])), params)


def _built(name: str, **kwargs) -> list:
    return [fn for _, fn in _named(name, **kwargs)]


@pytest.mark.parametrize("name", list(ATTACK_SPECS))
def test_each_specs_own_budget_is_what_its_builder_runs(name: str) -> None:
    """The torch-free vocabulary (core/names.py) declares each attack's own budget; the catalogue's builder runs
    exactly it, and --steps N gives every iterative component N iterations."""
    spec = ATTACK_SPECS[name]
    assert spec.steps is not None and spec.step_size is not None, f"{name}: declare its own budget"
    assert max(_iterations(fn) for fn in _built(name)) == spec.steps
    if spec.steps > 1:
        assert {_iterations(fn) for fn in _built(name, steps=7)} == {7}
    if spec.step_size:
        (pgd,) = _built(name)
        assert pgd.alpha == pytest.approx(spec.step_size * 0.1)


@pytest.mark.parametrize("name", [n for n, s in ATTACK_SPECS.items() if s.converges])
def test_the_rerun_never_runs_below_the_attacks_own_budget(name: str) -> None:
    """The convergence rerun (level 1) of an attack the user cut to one step runs the attack's own budget doubled,
    not the user's: every component at least twice its own iterations."""
    own = {c: _iterations(fn) for c, fn in _named(name)}
    cut = {c: _iterations(fn) for c, fn in _named(name, steps=1, converge=1)}
    assert cut and all(cut[c] >= 2 * own[c] for c in cut), (own, cut)
    raised = [_iterations(fn) for fn in _built(name, steps=400, converge=1)]
    assert min(raised) == 800  # a budget the user raised is doubled as given


def test_the_rerun_keeps_pgds_own_step_when_the_user_took_a_smaller_one() -> None:
    (small,) = _built("pgd", steps=2, step_size=0.0005, converge=1)
    assert small.alpha == pytest.approx(0.015) and small.steps == 40
    (large,) = _built("pgd", step_size=0.05, converge=1)
    assert large.alpha == 0.05  # a larger step than its own is the user's: kept
    plan = adaptive.plan_for(AttackParams(0.1, Norm.LINF, 1, None, 0, 10, converge=1))
    assert (plan.sweep_steps, plan.escalate_steps) == (2 * adaptive.PLAN.sweep_steps, 2 * adaptive.PLAN.escalate_steps)


def test_cut_by_compares_with_the_attacks_own_budget() -> None:
    default, standard, pgd = ATTACK_SPECS["apgd-adaptive"], ATTACK_SPECS["autoattack-standard"], ATTACK_SPECS["pgd"]
    assert standard.cut_by(1, None, [0.02]) and not standard.cut_by(None, None, [0.02])
    assert not standard.cut_by(standard.steps, None, [0.02]) and not standard.cut_by(10_000, None, [0.02])
    assert default.cut_by(default.steps - 1, None, [0.1]) and not default.cut_by(default.steps, None, [0.1])
    assert pgd.cut_by(None, 0.0005, [0.02]) and not pgd.cut_by(None, 0.003, [0.02])  # own: 0.15 x 0.02
    assert pgd.cut_by(None, 0.003, [0.02, 0.05])  # below its own at the larger eps


def _tiny() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 10)).eval()


def test_a_cut_budget_is_labelled_weaker_from_the_api() -> None:
    common = {"eps": [0.05], "n_examples": 8, "seed": 0}
    cut = evaluate([_tiny()], ["autoattack-standard"], steps=1, **common).summary.models["model0"].robust[0]
    assert cut.strength == "weak"
    single = evaluate([_tiny()], ["apgd-ce"], steps=10, **common).summary.models["model0"].robust[0]
    more = evaluate([_tiny()], ["apgd-ce"], steps=60, **common).summary.models["model0"].robust[0]
    assert (single.strength, more.strength) == ("weak", "single")


def test_cli_labels_a_cut_reference_weaker(tmp_path: Path, capsys) -> None:
    """issue 41: `--attack autoattack-standard --steps 1` reported `strength: strong`."""
    argv = ["attack", "--model", "deit", "--attack", "autoattack-standard", "--steps", "1", "--eps", "0.02", "-n", "4",
            "--out", str(tmp_path / "r")]  # fmt: skip
    assert run(argv) in (0, 3)
    assert "autoattack-standard (weaker)" in capsys.readouterr().out
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["models"]["deit"]["robust"][0]["strength"] == "weak"


def test_cli_check_fails_pgd_with_a_tiny_step(tmp_path: Path) -> None:
    """issue 41: `--attack pgd --steps 2 --step-size 0.0005 --check-convergence` at eps 0.02 passed with robust =
    clean, because the rerun kept the tiny step; the rerun at PGD's own step breaks what it left, and the run
    exits 3."""
    argv = ["attack", "--model", "deit", "--attack", "pgd", "--steps", "2", "--step-size", "0.0005",
            "--check-convergence", "--eps", "0.02", "-n", "8", "-q", "--out", str(tmp_path / "r")]  # fmt: skip
    assert run(argv) == 3
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    (check,) = [c for c in summary["checks"] if c["name"] == "attack converged (pgd)"]
    assert check["status"] == "fail" and "upper bound" in check["detail"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--attack", "apgd-adaptive", "--step-size", "0.01"], "apgd-adaptive sets its own step sizes"),
        (["--step-size", "0.01"], "apgd-adaptive sets its own step sizes"),  # the default attack
        (["--attack", "autoattack-standard,pgd", "--step-size", "0.01"], "autoattack-standard sets its own"),
        (["--attack", "fgsm", "--steps", "3"], "fgsm takes no steps"),
        (["--attack", "fab", "--step-size", "0.01"], "fab sets its own step sizes"),
        (["--model", "lm", "--attack", "fgsm,pgd", "--step-size", "0.01"], "fgsm takes none"),
        (["--attack", "fab,square", "--check-convergence"], "fab, square have no stronger rerun"),
    ],
)
def test_an_option_the_attack_would_ignore_is_refused_in_one_line(argv: list[str], message: str, capsys) -> None:
    assert run(["attack", "--model", "deit", "--eps", "0.02", "-n", "2", *argv]) == 2  # a later --model wins
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_the_api_refuses_the_same_options() -> None:
    with pytest.raises(RobfiltError, match="sets its own step sizes"):
        evaluate(["deit"], ["apgd-ce"], [0.02], step_size=0.01, n_examples=2)
    with pytest.raises(RobfiltError, match="takes no steps"):
        evaluate(["deit"], ["fgsm"], [0.02], steps=2, n_examples=2)


def test_options_every_attack_honours_are_accepted() -> None:
    """--steps beside fgsm sets the iterative attacks' steps (fgsm is one step by definition, and takes --steps 1
    alone); --step-size with pgd alone; square's queries follow --steps."""
    res = evaluate([_tiny()], ["fgsm", "pgd"], [0.05], steps=3, n_examples=4, seed=0)
    assert set(res.rows.attack) == {"clean", "fgsm", "pgd"}
    evaluate([_tiny()], ["pgd"], [0.05], step_size=0.01, n_examples=4, seed=0)
    evaluate([_tiny()], ["fgsm"], [0.05], steps=1, n_examples=4, seed=0)
    (square,) = _built("square", steps=9)
    assert square.n_queries == 9


def test_the_defaults_rerun_is_its_targeted_stage_at_twice_the_steps() -> None:
    """The default's convergence rerun: no APGD-CE (the targeted sweep attacks every other class), every step
    count of the targeted stage doubled per level, no restart more, its near misses judged on its own sweep."""
    own = dict(_named("apgd-adaptive"))
    rerun = dict(_named("apgd-adaptive", converge=1))
    assert list(own) == ["apgd-ce", "apgd-t"] and list(rerun) == ["apgd-t"]
    plan, stronger = own["apgd-t"].plan, rerun["apgd-t"].plan
    assert (stronger.sweep_steps, stronger.escalate_steps) == (2 * plan.sweep_steps, 2 * plan.escalate_steps)
    assert (stronger.restarts, stronger.escalate_restarts) == (plan.restarts, plan.escalate_restarts)
    assert stronger.near == plan.rerun_near and stronger.max_targets == 9
    assert [c for c, _ in _named("apgd-adaptive", converge=1, n_classes=3)] == ["apgd-ce"]  # no targeted stage


def test_the_closest_misses_get_a_second_long_run_in_the_attack_not_in_its_rerun() -> None:
    plan = adaptive.plan_for(AttackParams(0.1, Norm.LINF, None, None, 0, 10))
    rerun = adaptive.plan_for(AttackParams(0.1, Norm.LINF, None, None, 0, 10, converge=1))
    assert plan.retry > 0 and rerun.retry == 0  # the rerun's one run of twice the steps is the stronger form
