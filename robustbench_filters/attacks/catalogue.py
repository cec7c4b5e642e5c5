"""The attack catalogue: one registry shared by the library and the CLI.

Every attack of the vocabulary (:data:`~..core.names.ATTACK_SPECS`: the torch-free specs the CLI starts with) is
joined here to its builder, which sits in the module of its kind: the default ``apgd-adaptive``
(:mod:`.adaptive`), the yardstick ``autoattack-standard`` (:mod:`.standard`), ``autoattack-fast`` (:mod:`.strong`,
the default before them, kept) and the single attacks with the reduced ``autoattack`` (:mod:`.single`). A name
with a spec but no builder, or a builder but no spec, stops the import; each spec's own budget (``steps``,
``step_size``) is checked against what its builder runs by tests/test_attack_budgets.py. Every entry has a
``strength``: ``strong`` (the ensembles), ``weak`` (``fgsm``, ``pgd``, ``autoattack-fast``: they overstate
robustness) or ``single``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..core import names
from ..core.family import Family
from ..core.names import ATTACK_SPECS, SINGLE, STRONG, WEAK, AttackSpec, Norm, attack_spec  # noqa: F401 - re-exported
from . import adaptive, single, standard, strong
from .params import AttackFn, AttackParams, Builder, parse_norm, within_ball  # noqa: F401 - the catalogue re-exports them
from .single import PGD_STEPS  # noqa: F401 - re-exported


@dataclass(frozen=True)
class AttackInfo(AttackSpec):
    """An attack of the vocabulary (:class:`~robustbench_filters.core.names.AttackSpec`) with the builder that runs it:
    ``build(model, params)`` returns its components, each a ``(name, attack(x, y) -> x_adv)`` pair. Positional
    construction works as before: ``AttackInfo(name, families, norms, default_norm, description, build)``."""

    def __post_init__(self) -> None:
        if not callable(self.build):
            raise TypeError(f"attack {self.name!r} needs a builder: build(model, params) -> components")


#: the builder of every attack of the vocabulary, by name
BUILDERS: dict[str, Builder] = {**adaptive.BUILDERS, **standard.BUILDERS, **strong.BUILDERS, **single.BUILDERS}
_unpaired = sorted(set(BUILDERS) ^ set(ATTACK_SPECS))
if _unpaired:  # a spec without a builder (or the reverse) would fail only when someone names it
    raise ImportError(f"attacks without both a spec (core/names.py) and a builder: {', '.join(_unpaired)}")

#: What runs when no attack is named: image runs take the strongest ensemble; language models the strongest
#: attack robfilt has for them, PGD in embedding space (see attacks.embedding).
DEFAULT_IMAGE_ATTACK, DEFAULT_LM_ATTACK = names.DEFAULT_IMAGE_ATTACK, names.DEFAULT_LM_ATTACK


def _with_builder(spec: AttackSpec, build: Builder) -> AttackInfo:
    return AttackInfo(**{**{f.name: getattr(spec, f.name) for f in dataclasses.fields(AttackSpec)}, "build": build})


ATTACKS: dict[str, AttackInfo] = {name: _with_builder(spec, BUILDERS[name]) for name, spec in ATTACK_SPECS.items()}


def register_attack(info: AttackInfo) -> None:
    """Add an attack to the catalogue and the vocabulary (e.g. a user's own torchattacks wrapper)."""
    ATTACKS[info.name] = info
    ATTACK_SPECS[info.name] = info


def get_attack(name: str, family: Family | None = None) -> AttackInfo:
    """The catalogue entry of ``name``; with ``family``, it must fit that family's models."""
    attack_spec(name, family)
    return ATTACKS[name]
