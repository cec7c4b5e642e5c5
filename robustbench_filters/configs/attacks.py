"""Configs of attack runs: image attacks, language-model attacks and image corruptions."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..attacks.catalogue import (
    ATTACKS,
    DEFAULT_IMAGE_ATTACK,
    DEFAULT_LM_ATTACK,
    Norm,
    get_attack,
    parse_norm,
)
from ..attacks.corruption_transforms import CORRUPTIONS, SEVERITIES, check_severity, get_corruption
from ..attacks.embedding import EMBEDDING_ATTACKS, EPS_MODES
from ..attacks.wordswap import DEFAULT_RATES, DEFAULT_REPLACEMENT, validate_rate
from ..errors import RobfiltError
from ..family import Family
from .base import (
    AMP_DTYPES,
    CORRUPTION,
    DEFAULT_LM_EPS,
    WORDSWAP,
    ImageDataConfig,
    RunConfig,
    _names,
    _positive,
    _unique,
    default_eps,
)


@dataclass(frozen=True, kw_only=True)
class ImageAttackConfig(ImageDataConfig):
    """Adversarial attacks on image models, over an ascending eps grid (see :mod:`.attacks.image`).

    With no attack named, the strongest ensemble (``autoattack-fast``) runs. ``steps`` None gives every attack its
    own documented default (pgd 20; each stage of autoattack-fast its own). ``early_stop``: an example leaves an
    attack once fooled (off: robfilt's PGD/APGD compute exactly what torchattacks' do). ``check_convergence``:
    rerun a seeded share of the survivors with twice the steps and one more restart (None: for the strong
    ensembles only; True: for every attack that has such a rerun; False: never).
    """

    KIND: ClassVar[str] = "attack"
    FAMILY: ClassVar[Family | None] = Family.IMAGE
    DESCRIPTION: ClassVar[str] = "image attack"

    attacks: tuple[str, ...] = (DEFAULT_IMAGE_ATTACK,)
    eps: tuple[float, ...] | None = None
    norm: Norm | None = None
    steps: int | None = None
    step_size: float | None = None
    early_stop: bool = True
    check_convergence: bool | None = None
    check_masking: bool = False
    amp: str | None = None
    amp_attacks: bool = False
    n_examples: int = 256
    batch_size: int = 128

    def __post_init__(self) -> None:
        super().__post_init__()
        attacks = _unique(_names(self.attacks), "--attack")
        if not attacks:
            raise RobfiltError("no attack given; pass --attack NAME[,NAME...].")
        for a in attacks:
            if a == WORDSWAP:
                raise RobfiltError(
                    "attack 'wordswap' does not fit image models (it swaps words of text); use --attack corruption for image contamination."
                )
            if a == CORRUPTION or a.startswith(f"{CORRUPTION}:"):
                raise RobfiltError(
                    f"{a!r} cannot share a run with adversarial attacks; run corruptions in their own command."
                )
            get_attack(a, Family.IMAGE)
        self._set("attacks", attacks)
        norm = parse_norm(self.norm) or ATTACKS[attacks[0]].default_norm
        for a in attacks:
            if norm not in ATTACKS[a].norms:
                raise RobfiltError(
                    f"attack {a!r} does not support --norm {norm.value}; use {ATTACKS[a].norms[0].value}."
                )
        self._set("norm", norm)
        if self.eps is None and not isinstance(self.data, str):
            raise RobfiltError("data given as arrays or a Dataset has no default eps grid; pass eps, e.g. eps=[8/255].")
        eps = default_eps(self.data, norm) if self.eps is None else _unique(map(float, self.eps), "--eps")
        if not eps:
            raise RobfiltError("--eps is empty; give values like 0.01,0.02 or 8/255.")
        for e in eps:
            if not (e >= 0.0) or math.isnan(e) or math.isinf(e):
                raise RobfiltError(f"eps {e} is negative or not finite; eps is a budget on the [0, 1] input scale.")
            if norm is Norm.LINF and e > 1.0:
                raise RobfiltError(f"eps {e:g} is above 1 on the [0, 1] input scale; did you mean {e:g}/255?")
        self._set("eps", tuple(sorted(eps)))
        _positive(self.steps, "--steps")
        if self.step_size is not None and not (self.step_size > 0 and math.isfinite(self.step_size)):
            raise RobfiltError(f"--step-size must be a positive number, got {self.step_size}.")
        if not isinstance(self.early_stop, bool):
            raise RobfiltError(f"--early-stop must be true or false, got {self.early_stop!r}.")
        if self.check_convergence is not None and not isinstance(self.check_convergence, bool):
            raise RobfiltError(
                f"--check-convergence must be true, false or left out (auto), got {self.check_convergence!r}."
            )
        if self.amp is not None and self.amp not in AMP_DTYPES:
            raise RobfiltError(f"unknown --amp {self.amp!r}; use {', '.join(AMP_DTYPES)} (or leave it off for fp32).")
        if self.amp_attacks and self.amp is None:
            raise RobfiltError("--amp-attacks needs --amp bf16 (it runs the attacks in that precision too).")


@dataclass(frozen=True, kw_only=True)
class LMAttackConfig(RunConfig):
    """Embedding-space FGSM/PGD and word-swap contamination on language models (see :mod:`.attacks.lm`).

    With no attack named, embedding-space PGD runs: the strongest attack robfilt has for language models.
    """

    KIND: ClassVar[str] = "attack"
    FAMILY: ClassVar[Family | None] = Family.LM
    DESCRIPTION: ClassVar[str] = "language-model attack"

    attacks: tuple[str, ...] = (DEFAULT_LM_ATTACK,)
    eps: tuple[float, ...] | None = None
    rates: tuple[float, ...] | None = None
    norm: Norm | None = None
    eps_mode: str = "relative"
    steps: int = 20
    step_size: float | None = None
    replacement: str = DEFAULT_REPLACEMENT
    check_masking: bool = False
    tokenizer: Any = field(default=None, compare=False)
    text_column: str | None = None
    data: str = "austen"
    batch_size: int = 32

    def __post_init__(self) -> None:
        super().__post_init__()
        attacks = _unique(_names(self.attacks), "--attack")
        if not attacks:
            raise RobfiltError("no attack given; pass --attack NAME[,NAME...].")
        for a in attacks:
            if a == WORDSWAP:
                continue
            if a == CORRUPTION or a.startswith(f"{CORRUPTION}:"):
                raise RobfiltError("corruptions are image contaminations; language models take --attack wordswap.")
            get_attack(a, Family.LM)
            if a not in EMBEDDING_ATTACKS:
                raise RobfiltError(
                    f"attack {a!r} has no LM implementation; use one of: {', '.join(EMBEDDING_ATTACKS)}."
                )
        self._set("attacks", attacks)
        adversarial = [a for a in attacks if a in EMBEDDING_ATTACKS]
        if self.eps is not None:
            if not adversarial:
                raise RobfiltError("--eps applies to the embedding attacks fgsm and pgd; word swap takes --rate.")
            eps = _unique(map(float, self.eps), "--eps")
            if not eps:
                raise RobfiltError("--eps is empty; give values like 0.01,0.05.")
            for e in eps:
                if not (e >= 0.0) or not math.isfinite(e):
                    raise RobfiltError(f"eps {e} is negative or not finite; LM eps is a (relative) embedding radius.")
        else:
            eps = DEFAULT_LM_EPS if adversarial else ()
        self._set("eps", tuple(sorted(eps)))
        if self.rates is not None:
            if WORDSWAP not in attacks:
                raise RobfiltError("--rate applies to the text attack wordswap; add --attack wordswap.")
            rates = _unique(map(float, self.rates), "--rate")
            if not rates:
                raise RobfiltError("--rate is empty; give fractions like 0,0.05,0.1.")
            for r in rates:
                validate_rate(r)
        else:
            rates = DEFAULT_RATES if WORDSWAP in attacks else ()
        self._set("rates", tuple(sorted(rates)))
        try:
            self._set("norm", parse_norm(self.norm) or Norm.L2)
        except RobfiltError:
            raise RobfiltError(f"unknown --norm {self.norm!r}; use linf or l2.") from None
        if self.eps_mode not in EPS_MODES:
            raise RobfiltError(f"unknown eps mode {self.eps_mode!r}; use relative or absolute.")
        _positive(self.steps, "--steps")
        if self.step_size is not None and not (self.step_size > 0 and math.isfinite(self.step_size)):
            raise RobfiltError(f"--step-size must be a positive number, got {self.step_size}.")
        if not self.replacement:
            raise RobfiltError("the word-swap replacement is empty; give a token such as AAA.")


@dataclass(frozen=True, kw_only=True)
class CorruptionConfig(ImageDataConfig):
    """Common corruptions at severities 1-5 on image models, with mCE (see :mod:`.attacks.corruption`)."""

    KIND: ClassVar[str] = "corruption"
    FAMILY: ClassVar[Family | None] = Family.IMAGE
    DESCRIPTION: ClassVar[str] = "corruption"

    attacks: tuple[str, ...] = (CORRUPTION,)
    severities: tuple[int, ...] = SEVERITIES
    baseline: str | None = "deit"
    n_examples: int = 256
    batch_size: int = 128

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set("attacks", _unique(_names(self.attacks), "--attack"))
        self.corruptions  # noqa: B018 - validates the names
        sev = _unique((int(s) for s in self.severities), "severities")
        if not sev:
            raise RobfiltError("no severities given; use some of 1-5.")
        for s in sev:
            check_severity(s)
        self._set("severities", tuple(sorted(sev)))

    @property
    def corruptions(self) -> list[str]:
        """``corruption`` means all of them; ``corruption:<name>`` picks one."""
        names: list[str] = []
        for a in self.attacks:
            head, _, tail = a.partition(":")
            if head != CORRUPTION:
                raise RobfiltError(
                    f"attack {a!r} cannot run in a corruption evaluation; run adversarial attacks in a separate command."
                )
            for n in [tail] if tail else list(CORRUPTIONS):
                get_corruption(n)
                if n not in names:
                    names.append(n)
        return names
