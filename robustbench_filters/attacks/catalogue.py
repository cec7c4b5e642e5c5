"""The attack catalogue: one registry shared by the library and the CLI.

Image attacks are torchattacks calls with documented defaults; nothing is re-implemented. Each entry says
which model family it fits, its threat model (norm), and how it is built for a given eps. The PGD defaults
follow the protocol used on DeiT in this line of work: 20 steps, step size 0.15 * eps, a random start.

``autoattack`` is composed here as a per-example worst case of APGD-CE, APGD-T, FAB-T and Square, all from
torchattacks. It differs from the reference AutoAttack (fra31/auto-attack, ``version='standard'``): it uses
torchattacks' ports (not the reference code), fewer iterations by default (APGD 50 steps instead of 100, 1
restart, Square 1000 queries instead of 5000) so it fits a CPU, and it runs inside robfilt's eps cascade.
Treat its numbers as an upper bound on what the reference would report, not as a RobustBench entry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torchattacks
from torch import nn

from ..errors import RobfiltError
from ..family import Family
from ..names import ATTACK_SPECS, AttackSpec, Norm, attack_spec
from ..surface import given

AttackFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class AttackParams:
    """Everything an attack needs besides the model and the data."""

    eps: float
    norm: Norm
    steps: int
    step_size: float | None  # None: the attack's documented default (PGD: 0.15 * eps)
    seed: int
    n_classes: int


Builder = Callable[[nn.Module, "AttackParams"], list[tuple[str, AttackFn]]]


@dataclass(frozen=True, kw_only=True)
class AttackInfo(AttackSpec):
    """An attack of the vocabulary (:class:`~robustbench_filters.names.AttackSpec`) with the builder that runs it:
    ``build(model, params)`` returns its components, each a ``(name, attack(x, y) -> x_adv)`` pair."""

    build: Builder


def _pgd_alpha(p: AttackParams) -> float:
    return p.step_size if p.step_size is not None else 0.15 * p.eps


def _fgsm(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    if p.norm is not Norm.LINF:
        raise RobfiltError(f"fgsm is an Linf attack; use {given('norm', 'linf')} (or pgd-l2 for L2).")
    return [("fgsm", torchattacks.FGSM(model, eps=p.eps))]


def _pgd(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    if p.norm is Norm.L2:
        return _pgd_l2(model, p)
    return [("pgd", torchattacks.PGD(model, eps=p.eps, alpha=_pgd_alpha(p), steps=p.steps, random_start=True))]


class _PGDL2(torchattacks.PGDL2):
    """torchattacks' PGDL2 with a defined eps = 0.

    Its projection scales the perturbation by ``eps / ||delta||``: at eps = 0 the first step leaves delta = 0, so
    that is 0 / 0 = NaN and every "adversarial" example becomes NaN (for eps > 0 a zero delta gives inf, clipped
    to 1, which is fine). The eps = 0 ball is the single point x, so the exact projection returns x.
    """

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.eps == 0:
            return images.clone().detach().to(self.device)
        return super().forward(images, labels)


def _pgd_l2(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    return [("pgd-l2", _PGDL2(model, eps=p.eps, alpha=_pgd_alpha(p), steps=p.steps, random_start=True))]


def _norm_name(p: AttackParams) -> str:
    return "Linf" if p.norm is Norm.LINF else "L2"


def _apgd_ce(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    return [
        (
            "apgd-ce",
            torchattacks.APGD(
                model, norm=_norm_name(p), eps=p.eps, steps=max(p.steps, 50), n_restarts=1, loss="ce", seed=p.seed
            ),
        )
    ]


def _apgd_t(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    n_target = max(1, min(9, p.n_classes - 1))
    return (
        [
            (
                "apgd-t",
                torchattacks.APGDT(
                    model,
                    norm=_norm_name(p),
                    eps=p.eps,
                    steps=max(p.steps, 50),
                    n_restarts=1,
                    n_classes=p.n_classes,
                    seed=p.seed,
                ),
            )
        ]
        if n_target
        else []
    )


def _fab(model: nn.Module, p: AttackParams, targeted: bool = False) -> list[tuple[str, AttackFn]]:
    atk = torchattacks.FAB(
        model,
        norm=_norm_name(p),
        eps=p.eps,
        steps=max(p.steps, 20),
        n_restarts=1,
        multi_targeted=targeted,
        n_classes=p.n_classes,
        seed=p.seed,
    )
    return [("fab-t" if targeted else "fab", _within_ball(atk, p.eps, p.norm))]


def _square(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    return [
        ("square", torchattacks.Square(model, norm=_norm_name(p), eps=p.eps, n_queries=1000, n_restarts=1, seed=p.seed))
    ]


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
        raise RobfiltError(f"cw is an L2 attack; use {given('norm', 'l2')}.")
    cw = torchattacks.CW(model, c=1.0, kappa=0.0, steps=max(p.steps, 50), lr=0.01)
    return [("cw", _within_ball(cw, p.eps, p.norm))]


def _autoattack(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    return _apgd_ce(model, p) + _apgd_t(model, p) + _fab(model, p, targeted=True) + _square(model, p)


#: the builder of every attack of the vocabulary, by name
BUILDERS: dict[str, Builder] = {
    "fgsm": _fgsm,
    "pgd": _pgd,
    "pgd-l2": _pgd_l2,
    "apgd-ce": _apgd_ce,
    "apgd-t": _apgd_t,
    "fab": _fab,
    "square": _square,
    "cw": _cw,
    "autoattack": _autoattack,
}


def _with_builder(spec: AttackSpec, build: Builder) -> AttackInfo:
    return AttackInfo(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(AttackSpec)}, build=build)


ATTACKS: dict[str, AttackInfo] = {name: _with_builder(ATTACK_SPECS[name], build) for name, build in BUILDERS.items()}


def register_attack(info: AttackInfo) -> None:
    """Add an attack to the catalogue and the vocabulary (e.g. a user's own torchattacks wrapper)."""
    ATTACKS[info.name] = info
    ATTACK_SPECS[info.name] = info


def get_attack(name: str, family: Family | None = None) -> AttackInfo:
    """The catalogue entry of ``name``; with ``family``, it must fit that family's models."""
    attack_spec(name, family)
    return ATTACKS[name]
