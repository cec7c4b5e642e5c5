"""The single attacks (``fgsm``, ``pgd``, ``pgd-l2``, ``apgd-ce``, ``apgd-t``, ``fab``, ``square``, ``cw``) and
``autoattack``, the reduced per-example worst case of four of them: each a torchattacks call (or robfilt's
early-exit copy of its loop) at documented defaults, built per eps from :class:`~.params.AttackParams`.

The PGD defaults follow the protocol used on DeiT in this line of work: 20 steps of 0.15 eps, a random start.
``autoattack`` differs from the reference AutoAttack (fra31/auto-attack, ``version='standard'``; robfilt's
``autoattack-standard``, :mod:`.standard`): fewer iterations (APGD 50 steps instead of 100, 1 restart, Square 1000
queries instead of 5000) so it fits a CPU. Each attack's own budget is declared in its spec
(:data:`~..core.names.ATTACK_SPECS`: ``steps``, ``step_size``); tests/test_attack_budgets.py checks the two agree.
"""

from __future__ import annotations

import torchattacks
from torch import nn

from ..core.errors import RobfiltError
from ..core.surface import given
from .apgd import EarlyAPGD, EarlyAPGDT
from .early import EarlyPGD, EarlyPGDL2
from .params import AttackFn, AttackParams, Builder, Norm, within_ball

PGD_STEPS = 20
PGD_STEP = 0.15  # PGD's step, a fraction of eps
SQUARE_QUERIES = 1000
APGD_STEPS = 50


def _pgd_alpha(p: AttackParams) -> float:
    return p.step(PGD_STEP * p.eps)


def _fgsm(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    if p.norm is not Norm.LINF:
        raise RobfiltError(f"fgsm is an Linf attack; use {given('norm', 'linf')} (or pgd-l2 for L2).")
    return [("fgsm", torchattacks.FGSM(model, eps=p.eps))]


def _pgd(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    if p.norm is Norm.L2:
        return _pgd_l2(model, p)
    atk = EarlyPGD(model, p.eps, _pgd_alpha(p), p.iterations(PGD_STEPS), restarts=p.restarts(), early_stop=p.early_stop)
    return [("pgd", atk)]


def _pgd_l2(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    atk = EarlyPGDL2(
        model, p.eps, _pgd_alpha(p), p.iterations(PGD_STEPS), restarts=p.restarts(), early_stop=p.early_stop
    )
    return [("pgd-l2", atk)]


def _apgd_ce(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    atk = EarlyAPGD(
        model, norm=p.norm_name, eps=p.eps, steps=p.iterations(APGD_STEPS), n_restarts=p.restarts(), loss="ce",
        seed=p.seed, early_stop=p.early_stop,
    )  # fmt: skip
    return [("apgd-ce", atk)]


def _apgd_t(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    if p.n_classes < 4:  # the targeted DLR loss reads the 4th-largest logit
        return []
    atk = EarlyAPGDT(
        model, norm=p.norm_name, eps=p.eps, steps=p.iterations(APGD_STEPS), n_restarts=p.restarts(),
        n_classes=p.n_classes, n_targets=min(9, p.n_classes - 1), seed=p.seed, early_stop=p.early_stop,
    )  # fmt: skip
    return [("apgd-t", atk)]


def _fab(model: nn.Module, p: AttackParams, targeted: bool = False) -> list[tuple[str, AttackFn]]:
    atk = torchattacks.FAB(
        model,
        norm=p.norm_name,
        eps=p.eps,
        steps=p.iterations(20),
        n_restarts=p.restarts(),
        multi_targeted=targeted,
        n_classes=p.n_classes,
        seed=p.seed,
    )
    if targeted:
        atk.n_target_classes = min(9, p.n_classes - 1)  # AutoAttack's 9 (torchattacks: every other class)
    return [("fab-t" if targeted else "fab", within_ball(atk, p.eps, p.norm))]


def _square(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    queries = 2 if p.probe else p.iterations(SQUARE_QUERIES)
    atk = torchattacks.Square(
        model, norm=p.norm_name, eps=p.eps, n_queries=queries, n_restarts=p.restarts(), seed=p.seed
    )
    return [("square", atk)]


def _cw(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    if p.norm is not Norm.L2:
        raise RobfiltError(f"cw is an L2 attack; use {given('norm', 'l2')}.")
    cw = torchattacks.CW(model, c=1.0, kappa=0.0, steps=p.iterations(50), lr=0.01)
    return [("cw", within_ball(cw, p.eps, p.norm))]


def _autoattack(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    return _apgd_ce(model, p) + _apgd_t(model, p) + _fab(model, p, targeted=True) + _square(model, p)


#: the builders of this module's attacks, by name (the catalogue joins them to their specs)
BUILDERS: dict[str, Builder] = {
    "autoattack": _autoattack,
    "fgsm": _fgsm,
    "pgd": _pgd,
    "pgd-l2": _pgd_l2,
    "apgd-ce": _apgd_ce,
    "apgd-t": _apgd_t,
    "fab": _fab,
    "square": _square,
    "cw": _cw,
}
