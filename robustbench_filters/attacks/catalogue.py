"""The attack catalogue: one registry shared by the library and the CLI.

Image attacks are torchattacks calls with documented defaults; nothing is re-implemented. Each entry says
which model family it fits, its threat model (norm), and how it is built for a given eps. The PGD defaults
follow the protocol used on DeiT in this line of work: 20 steps, step size 0.15 * eps, a random start.

The default, ``autoattack-fast`` (:mod:`.strong`), is APGD-CE then APGD-T with early exit. ``autoattack`` is composed
here as a per-example worst case of APGD-CE, APGD-T, FAB-T and Square, all from torchattacks. It differs from the reference AutoAttack (fra31/auto-attack, ``version='standard'``): it uses
torchattacks' ports (not the reference code), fewer iterations by default (APGD 50 steps instead of 100, 1
restart, Square 1000 queries instead of 5000) so it fits a CPU, and it runs inside robfilt's eps cascade.
Treat its numbers as an upper bound on what the reference would report, not as a RobustBench entry.
Every entry has a ``strength``: ``strong`` (the ensembles), ``weak`` (``fgsm``, ``pgd``: they overstate robustness)
or ``single``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torchattacks
from torch import nn

from ..errors import RobfiltError, unknown
from ..family import Family
from . import strong
from .apgd import EarlyAPGD, EarlyAPGDT
from .early import EarlyPGD, EarlyPGDL2
from .params import AttackFn, AttackParams, Norm, parse_norm  # noqa: F401 - the catalogue re-exports them

STRONG, SINGLE, WEAK = "strong", "single", "weak"
PGD_STEPS = 20
APGD_STEPS = 50


@dataclass(frozen=True)
class AttackInfo:
    name: str
    families: tuple[Family, ...]
    norms: tuple[Norm, ...]
    default_norm: Norm
    description: str
    build: Callable[[nn.Module, AttackParams], list[tuple[str, AttackFn]]]
    minimum_norm: bool = False  # returns unbounded perturbations; success counts only inside the eps-ball
    gradient_free: bool = False
    strength: str = SINGLE  # STRONG: an ensemble robfilt stands behind; WEAK: known to overstate robustness
    converges: bool = False  # has a stronger rerun (twice the steps, one more restart) for the convergence check


def _pgd_alpha(p: AttackParams) -> float:
    return p.step_size if p.step_size is not None else 0.15 * p.eps


def _fgsm(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    if p.norm is not Norm.LINF:
        raise RobfiltError("fgsm is an Linf attack; use --norm linf (or pgd-l2 for L2).")
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


def norm_name(p: AttackParams) -> str:
    return "Linf" if p.norm is Norm.LINF else "L2"


def _apgd_ce(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    atk = EarlyAPGD(
        model, norm=norm_name(p), eps=p.eps, steps=p.iterations(APGD_STEPS), n_restarts=p.restarts(), loss="ce",
        seed=p.seed, early_stop=p.early_stop,
    )  # fmt: skip
    return [("apgd-ce", atk)]


def _apgd_t(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    if p.n_classes < 4:  # the targeted DLR loss reads the 4th-largest logit
        return []
    atk = EarlyAPGDT(
        model, norm=norm_name(p), eps=p.eps, steps=p.iterations(APGD_STEPS), n_restarts=p.restarts(),
        n_classes=p.n_classes, n_targets=min(9, p.n_classes - 1), seed=p.seed, early_stop=p.early_stop,
    )  # fmt: skip
    return [("apgd-t", atk)]


def _fab(model: nn.Module, p: AttackParams, targeted: bool = False) -> list[tuple[str, AttackFn]]:
    atk = torchattacks.FAB(
        model,
        norm=norm_name(p),
        eps=p.eps,
        steps=p.iterations(20),
        n_restarts=p.restarts(),
        multi_targeted=targeted,
        n_classes=p.n_classes,
        seed=p.seed,
    )
    if targeted:
        atk.n_target_classes = min(9, p.n_classes - 1)  # AutoAttack's 9 (torchattacks: every other class)
    return [("fab-t" if targeted else "fab", _within_ball(atk, p.eps, p.norm))]


def _square(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    queries = 2 if p.probe else 2000 if p.converge else 1000
    atk = torchattacks.Square(
        model, norm=norm_name(p), eps=p.eps, n_queries=queries, n_restarts=p.restarts(), seed=p.seed
    )
    return [("square", atk)]


def _within_ball(attack: AttackFn, eps: float, norm: Norm) -> AttackFn:
    """A minimum-norm attack that returns x itself wherever its result lies outside the eps-ball.

    CW ignores eps altogether (and FAB may overshoot it), so without this its points at eps = 0 move and the
    "eps = 0 equals clean" check fails. Success only counts inside the ball anyway; this makes the attack
    function say so, for every caller. The slack matches the engine's float32 tolerance.
    """

    def run(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x_adv = attack(x, y)
        flat = (x_adv - x).flatten(1)
        size = flat.abs().amax(1) if norm is Norm.LINF else flat.norm(dim=1)
        inside = size <= eps * (1 + 1e-5) + 1e-6
        return torch.where(inside.view(-1, *[1] * (x.dim() - 1)), x_adv, x)

    return run


def _cw(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    if p.norm is not Norm.L2:
        raise RobfiltError("cw is an L2 attack; use --norm l2.")
    cw = torchattacks.CW(model, c=1.0, kappa=0.0, steps=p.iterations(50), lr=0.01)
    return [("cw", _within_ball(cw, p.eps, p.norm))]


def _autoattack(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    return _apgd_ce(model, p) + _apgd_t(model, p) + _fab(model, p, targeted=True) + _square(model, p)


IMAGE = (Family.IMAGE,)
LM = (Family.LM,)

ATTACKS: dict[str, AttackInfo] = {
    a.name: a
    for a in [
        AttackInfo(
            strong.NAME,
            IMAGE,
            (Norm.LINF, Norm.L2),
            Norm.LINF,
            f"The default: per-example worst case of APGD-CE ({strong.CE_STEPS} steps) and APGD-T "
            f"({strong.N_TARGETS} targets x {strong.T_STEPS} steps) on its survivors, early exit (see docs/attacks.md).",
            strong.build,
            strength=STRONG,
            converges=True,
        ),
        AttackInfo(
            "autoattack",
            IMAGE,
            (Norm.LINF, Norm.L2),
            Norm.LINF,
            "Per-example worst case of APGD-CE, APGD-T, FAB-T and Square (torchattacks ports; see docs); several times "
            f"the time of {strong.NAME}.",
            _autoattack,
            strength=STRONG,
        ),
        AttackInfo(
            "fgsm",
            IMAGE + LM,
            (Norm.LINF,),
            Norm.LINF,
            f"FGSM, one signed-gradient step of size eps. Weaker than {strong.NAME}: an upper bound.",
            _fgsm,
            strength=WEAK,
        ),
        AttackInfo(
            "pgd",
            IMAGE + LM,
            (Norm.LINF, Norm.L2),
            Norm.LINF,
            f"PGD: {PGD_STEPS} steps, step 0.15*eps, random start (L2 with --norm l2). Weaker than {strong.NAME}: "
            "an upper bound.",
            _pgd,
            strength=WEAK,
            converges=True,
        ),
        AttackInfo(
            "pgd-l2",
            IMAGE,
            (Norm.L2,),
            Norm.L2,
            f"PGD under L2: {PGD_STEPS} steps, step 0.15*eps, random start. Weaker than {strong.NAME}.",
            _pgd_l2,
            strength=WEAK,
            converges=True,
        ),
        AttackInfo(
            "apgd-ce",
            IMAGE,
            (Norm.LINF, Norm.L2),
            Norm.LINF,
            f"APGD with cross-entropy, {APGD_STEPS} steps, 1 restart.",
            _apgd_ce,
            converges=True,
        ),
        AttackInfo(
            "apgd-t",
            IMAGE,
            (Norm.LINF, Norm.L2),
            Norm.LINF,
            f"Targeted APGD (DLR), 9 targets, {APGD_STEPS} steps.",
            _apgd_t,
            converges=True,
        ),
        AttackInfo(
            "fab",
            IMAGE,
            (Norm.LINF, Norm.L2),
            Norm.LINF,
            "FAB minimum-norm attack, counted inside eps.",
            _fab,
            minimum_norm=True,
        ),
        AttackInfo(
            "square",
            IMAGE,
            (Norm.LINF, Norm.L2),
            Norm.LINF,
            "Square: gradient-free, 1000 queries.",
            _square,
            gradient_free=True,
        ),
        AttackInfo(
            "cw",
            IMAGE,
            (Norm.L2,),
            Norm.L2,
            "Carlini-Wagner L2 (c=1, 50 steps), counted inside eps.",
            _cw,
            minimum_norm=True,
        ),
    ]
}
#: What runs when no attack is named: image runs take the strongest ensemble; language models the strongest
#: attack robfilt has for them, PGD in embedding space (see attacks.embedding).
DEFAULT_IMAGE_ATTACK = strong.NAME  # names.DEFAULT_IMAGE_ATTACK spells it for the CLI's help (tested to agree)
DEFAULT_LM_ATTACK = "pgd"


def register_attack(info: AttackInfo) -> None:
    """Add an attack to the catalogue (e.g. a user's own torchattacks wrapper)."""
    ATTACKS[info.name] = info


def get_attack(name: str, family: Family | None = None) -> AttackInfo:
    """The catalogue entry of ``name``; with ``family``, it must fit that family's models."""
    if name not in ATTACKS:
        raise unknown("attack", name, [*ATTACKS, "wordswap", "corruption"])
    info = ATTACKS[name]
    if family is not None and family not in info.families:
        fits = sorted(n for n, a in ATTACKS.items() if family in a.families)
        raise RobfiltError(
            f"attack {name!r} does not fit {family.value} models; for {family.value} use one of: {', '.join(fits)}."
        )
    return info
