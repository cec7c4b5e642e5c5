"""Checks on image attack runs: the eps-ball and [0, 1], monotone accuracy, PGD vs FGSM, step budget, eps = 0, and
the optional gradient-masking checks (huge eps reaches chance, more steps not weaker, black box not better). The
convergence check has its own module (:mod:`.convergence`); it is re-exported here."""

from __future__ import annotations

import pandas as pd
import torch
from torch import nn

from ..core.surface import flag
from .base import FAIL, PASS, WARN, Check, ball_tolerance, model_rows
from .convergence import (
    allowed,
    check_convergence,  # noqa: F401 - re-exported (the image checks, in one place)
)
from .logits import predictions


def _adversarial(rows: pd.DataFrame, model: str) -> pd.DataFrame:
    """One model's attacked rows (its clean pseudo-attack rows left out): what the ball and monotone checks read."""
    adv = model_rows(rows, model, "adversarial")
    return adv[adv.attack != "clean"]


def check_in_ball(rows: pd.DataFrame, model: str) -> Check:
    """Every adversarial example lies inside its eps-ball and in [0, 1] (and is finite)."""
    adv = _adversarial(rows, model)
    if adv.empty:
        return Check("inside eps-ball and [0,1]", model, PASS, "no adversarial rows")
    over = adv.pert_norm > adv.eps + adv.eps.map(ball_tolerance)
    bad_box = ~adv.in_box
    if over.any() or bad_box.any():
        worst = (adv.pert_norm - adv.eps).max()
        return Check(
            "inside eps-ball and [0,1]",
            model,
            FAIL,
            f"{int(over.sum())} outside the ball (worst excess {worst:.2e}), {int(bad_box.sum())} outside [0,1] or non-finite",
        )
    return Check("inside eps-ball and [0,1]", model, PASS, f"{len(adv)} perturbations checked")


def check_monotone(rows: pd.DataFrame, model: str) -> Check:
    """Accuracy never increases with eps, per attack (and per example: once fooled, always fooled)."""
    adv = _adversarial(rows, model)
    bad = []
    for attack, grp in adv.groupby("attack"):
        acc = grp.groupby("eps").correct.mean().sort_index()
        if (acc.diff().dropna() > 0).any():
            bad.append(attack)
        per_ex = grp.sort_values("eps").groupby("example_id").correct.apply(lambda s: (s.astype(int).diff() > 0).any())
        if per_ex.any():
            bad.append(f"{attack} (per example)")
    if bad:
        return Check("accuracy non-increasing in eps", model, FAIL, f"increases for {', '.join(sorted(set(bad)))}")
    return Check("accuracy non-increasing in eps", model, PASS, "monotone for every attack")


def check_pgd_vs_fgsm(rows: pd.DataFrame, model: str) -> Check | None:
    """Iterative beats single-step: PGD accuracy <= FGSM accuracy at every shared eps."""
    sub = rows[(rows.model == model) & rows.attack.isin(["pgd", "fgsm"])]
    if set(sub.attack.unique()) != {"pgd", "fgsm"}:
        return None
    acc = sub.groupby(["attack", "eps"]).correct.mean().unstack(0).dropna()
    n = sub[sub.attack == "pgd"].groupby("eps").size().max()
    excess = (acc["pgd"] - acc["fgsm"]).max()
    if excess <= 0:
        return Check("PGD at least as strong as FGSM", model, PASS, f"at {len(acc)} eps values")
    status = WARN if excess <= 1.0 / max(n, 1) + 1e-9 else FAIL
    return Check(
        "PGD at least as strong as FGSM", model, status, f"PGD accuracy exceeds FGSM by up to {100 * excess:.1f} pts"
    )


def check_step_budget(steps: int, step_size: float | None, eps: list[float], model: str) -> Check:
    """PGD needs steps * step_size >= eps to reach the ball's boundary from the centre."""
    smallest = min((step_size / e for e in eps if e > 0), default=0.15) if step_size is not None else 0.15
    reach = steps * smallest
    if reach < 1.0:
        return Check(
            "PGD step budget reaches the ball",
            model,
            WARN,
            f"steps x step size = {reach:.2f} eps < eps; add {flag('steps')}",
        )
    return Check("PGD step budget reaches the ball", model, PASS, f"steps x step size = {reach:.2f} eps")


def check_eps0(model: nn.Module, label: str, x: torch.Tensor, y: torch.Tensor, attacks: dict[str, list]) -> Check:
    """eps = 0 gives clean accuracy exactly: no component of any attack (name -> built components) moves an input.

    Run structurally (one step, every fixed budget at its minimum; see ``AttackParams.probe``): a projection that
    fails to return x, a random start or step not scaled by eps, a clip that moves x all show after one step. An
    input returned bit for bit has the clean prediction by construction (the determinism check covers the model),
    so predictions are compared only when something moved.
    """
    for attack, components in attacks.items():
        for component, fn in components:
            x_adv = fn(x, y).detach()
            if torch.equal(x_adv, x):
                continue
            with torch.no_grad():
                changed = int((predictions(model(x_adv)) != predictions(model(x))).sum())
            moved = (x_adv - x).abs().amax().item() if x_adv.shape == x.shape else float("nan")
            where = attack if component == attack else f"{attack} ({component})"
            return Check(
                "eps=0 equals clean",
                label,
                FAIL,
                f"{where} moved inputs by up to {moved:.2e}, {changed} predictions changed",
            )
    return Check("eps=0 equals clean", label, PASS, f"{len(y)} examples unchanged by {', '.join(attacks)} (one step)")


def check_chance(acc: float, n_classes: int, label: str, eps: float) -> Check:
    """A very large eps must drive accuracy to chance level or below."""
    chance = 1.0 / n_classes
    status = PASS if acc <= chance + 0.05 else FAIL
    return Check(
        "large eps reaches chance",
        label,
        status,
        f"PGD at eps={eps:g}: accuracy {100 * acc:.1f}% (chance {100 * chance:.0f}%)",
    )


def check_more_steps(acc: float, acc_more: float, n: int, label: str, factor: int) -> Check:
    """Running 5x more steps must not raise accuracy beyond noise (one example)."""
    status = PASS if acc_more <= acc + 1.0 / max(n, 1) + 1e-9 else FAIL
    return Check(
        f"{factor}x steps not weaker",
        label,
        status,
        f"accuracy {100 * acc:.1f}% -> {100 * acc_more:.1f}% with {factor}x steps",
    )


def check_blackbox(broken: int, checked: int, first: int, n: int, eps: float, queries: int, label: str) -> Check:
    """Per example, the gradient-free Square attack must not break what the white-box attacks left robust among the
    run's ``first`` examples (else gradients are masked and robust accuracy is overstated): fails when it breaks
    more than the convergence check's allowance on ``first`` examples (one at 256). ``n``: the run's examples."""
    status = PASS if broken <= allowed(first) else FAIL
    over = f": robust accuracy overstated by at least {100 * broken / max(n, 1):.2f} pts" if broken else ""
    return Check(
        "white-box beats black-box",
        label,
        status,
        f"Square ({queries} queries) broke {broken} of the {checked} examples the attacks left robust at eps {eps:g} "
        f"(of the first {first}){over}",
    )
