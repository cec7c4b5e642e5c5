"""The attack catalogue: one registry shared by the library and the CLI.

Image attacks are torchattacks calls with documented defaults; nothing is re-implemented. Each entry says
which model family it fits, its threat model (norm), and how it is built for a given eps. The PGD defaults
follow the protocol used on DeiT in this line of work: 20 steps, step size 0.15 * eps, a random start.

The default, ``apgd-adaptive`` (:mod:`.adaptive`), is APGD-CE then APGD-T on targets chosen per example, with early
exit; ``autoattack-standard`` (:mod:`.standard`) is AutoAttack's standard version at the reference settings, the
yardstick; ``autoattack-fast`` (:mod:`.strong`) is the default before them, kept. ``autoattack`` is composed
here as a per-example worst case of APGD-CE, APGD-T, FAB-T and Square, all from torchattacks. It differs from the reference AutoAttack (fra31/auto-attack, ``version='standard'``): it uses
torchattacks' ports (not the reference code), fewer iterations by default (APGD 50 steps instead of 100, 1
restart, Square 1000 queries instead of 5000) so it fits a CPU, and it runs inside robfilt's eps cascade.
Treat its numbers as an upper bound on what the reference would report, not as a RobustBench entry.
Every entry has a ``strength``: ``strong`` (the ensembles), ``weak`` (``fgsm``, ``pgd``: they overstate robustness)
or ``single``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torchattacks
from torch import nn

from ..core import names
from ..core.errors import RobfiltError
from ..core.family import Family
from ..core.names import ATTACK_SPECS, SINGLE, STRONG, WEAK, AttackSpec, Norm, attack_spec  # noqa: F401 - re-exported
from ..core.surface import given
from . import adaptive, standard, strong
from .apgd import EarlyAPGD, EarlyAPGDT
from .early import EarlyPGD, EarlyPGDL2
from .params import AttackFn, AttackParams, parse_norm, within_ball  # noqa: F401 - the catalogue re-exports them

PGD_STEPS = 20
PGD_STEP = 0.15  # PGD's step, a fraction of eps
SQUARE_QUERIES = 1000
APGD_STEPS = 50

Builder = Callable[[nn.Module, AttackParams], list[tuple[str, AttackFn]]]


@dataclass(frozen=True)
class AttackInfo(AttackSpec):
    """An attack of the vocabulary (:class:`~robustbench_filters.core.names.AttackSpec`) with the builder that runs it:
    ``build(model, params)`` returns its components, each a ``(name, attack(x, y) -> x_adv)`` pair. Positional
    construction works as before: ``AttackInfo(name, families, norms, default_norm, description, build)``."""

    def __post_init__(self) -> None:
        if not callable(self.build):
            raise TypeError(f"attack {self.name!r} needs a builder: build(model, params) -> components")


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
    return [("fab-t" if targeted else "fab", within_ball(atk, p.eps, p.norm))]


def _square(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    queries = 2 if p.probe else p.iterations(SQUARE_QUERIES)
    atk = torchattacks.Square(
        model, norm=norm_name(p), eps=p.eps, n_queries=queries, n_restarts=p.restarts(), seed=p.seed
    )
    return [("square", atk)]


def _cw(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    if p.norm is not Norm.L2:
        raise RobfiltError(f"cw is an L2 attack; use {given('norm', 'l2')}.")
    cw = torchattacks.CW(model, c=1.0, kappa=0.0, steps=p.iterations(50), lr=0.01)
    return [("cw", within_ball(cw, p.eps, p.norm))]


def _autoattack(model: nn.Module, p: AttackParams) -> list[tuple[str, AttackFn]]:
    return _apgd_ce(model, p) + _apgd_t(model, p) + _fab(model, p, targeted=True) + _square(model, p)


#: the builder of every attack of the vocabulary, by name
BUILDERS: dict[str, Builder] = {
    adaptive.NAME: adaptive.build,
    standard.NAME: standard.build,
    "autoattack": _autoattack,
    strong.NAME: strong.build,
    "fgsm": _fgsm,
    "pgd": _pgd,
    "pgd-l2": _pgd_l2,
    "apgd-ce": _apgd_ce,
    "apgd-t": _apgd_t,
    "fab": _fab,
    "square": _square,
    "cw": _cw,
}
#: What runs when no attack is named: image runs take the strongest ensemble; language models the strongest
#: attack robfilt has for them, PGD in embedding space (see attacks.embedding).
DEFAULT_IMAGE_ATTACK, DEFAULT_LM_ATTACK = names.DEFAULT_IMAGE_ATTACK, names.DEFAULT_LM_ATTACK


def _with_builder(spec: AttackSpec, build: Builder) -> AttackInfo:
    return AttackInfo(**{**{f.name: getattr(spec, f.name) for f in dataclasses.fields(AttackSpec)}, "build": build})


ATTACKS: dict[str, AttackInfo] = {name: _with_builder(ATTACK_SPECS[name], build) for name, build in BUILDERS.items()}


def register_attack(info: AttackInfo) -> None:
    """Add an attack to the catalogue and the vocabulary (e.g. a user's own torchattacks wrapper)."""
    ATTACKS[info.name] = info
    ATTACK_SPECS[info.name] = info


def get_attack(name: str, family: Family | None = None) -> AttackInfo:
    """The catalogue entry of ``name``; with ``family``, it must fit that family's models."""
    attack_spec(name, family)
    return ATTACKS[name]
