"""Configs of attack runs: image attacks, language-model attacks and image corruptions."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.counts import UpTo
from ..core.errors import RobfiltError
from ..core.family import Family
from ..core.names import (
    AMP_DTYPES,
    ATTACK_SPECS,
    CORRUPTION,
    CORRUPTIONS,
    DEFAULT_IMAGE_ATTACK,
    DEFAULT_LM_ATTACK,
    DEFAULT_RATES,
    DEFAULT_REPLACEMENT,
    DEFAULT_TEXT_SPLIT,
    EMBEDDING_ATTACKS,
    EPS_MODES,
    PRECISIONS,
    SEVERITIES,
    WORDSWAP,
    Norm,
    attack_help,
    attack_spec,
    check_corruption,
    check_severity,
    normalise_split,
    parse_norm,
    validate_rate,
)
from ..core.surface import flag, given
from ..summaries.kinds import ATTACK
from ..summaries.kinds import CORRUPTION as CORRUPTION_RUN
from .base import (
    DEFAULT_LM_EPS,
    ImageDataConfig,
    RunConfig,
    _names,
    _positive,
    _unique,
    check_data_options,
    default_eps,
)
from .options import Bool, Int, Many, Number, Text, Tokenizer, option


def _attack_names(values: Any) -> tuple[str, ...]:
    """The attacks of a run: at least one, none twice."""
    attacks = _unique(_names(values), "attacks")
    if not attacks:
        raise RobfiltError(f"no attack given; pass {given('attacks', 'NAME[,NAME...]')}.")
    return attacks


def _check_steps(steps: int | None, step_size: float | None) -> None:
    """Iterations and step size of iterative attacks: positive when given."""
    _positive(steps, "steps")
    if step_size is not None and not (step_size > 0 and math.isfinite(step_size)):
        raise RobfiltError(f"{flag('step_size')} must be a positive number, got {step_size}.")


def _budget_options(attacks: tuple[str, ...], steps: int | None, step_size: float | None) -> None:
    """``--steps`` and ``--step-size`` mean something for the attacks named, or are refused: an option an attack
    would ignore must not look applied. ``--steps`` sets the iterations of every iterative attack of the run; fgsm,
    one step of size eps by definition (``AttackSpec.steps`` 1), refuses any other count only alone. A fixed step
    is PGD's alone (``AttackSpec.step_size`` 0: the attack sets its own), so ``--step-size`` is refused beside any
    other attack."""
    specs = [ATTACK_SPECS[a] for a in attacks]
    if steps is not None and steps != 1 and all(s.steps == 1 for s in specs):
        raise RobfiltError(
            f"{', '.join(attacks)} takes no steps (one step of size eps); {flag('steps')} sets the iterations of "
            "iterative attacks such as pgd: leave it out."
        )
    own = [s.name for s in specs if s.step_size == 0]
    if step_size is not None and own:
        fixed = [n for n, s in ATTACK_SPECS.items() if s.step_size]
        raise RobfiltError(
            f"{flag('step_size')} sets the fixed step of {', '.join(fixed)}; {', '.join(own)} "
            f"{'sets its' if len(own) == 1 else 'set their'} own step sizes: leave it out, or run "
            f"{' or '.join(fixed)} in a run of its own."
        )


@dataclass(frozen=True, kw_only=True)
class ImageAttackConfig(ImageDataConfig):
    """Adversarial attacks on image models, over an ascending eps grid (see :mod:`..attacks.image`).

    With no attack named, the strongest attack robfilt has (``apgd-adaptive``) runs. ``steps`` None gives every
    attack its own documented default (pgd 20; each stage of apgd-adaptive its own). ``early_stop``: an example leaves an
    attack once fooled (off: robfilt's PGD/APGD compute exactly what torchattacks' do). ``check_convergence``:
    rerun a seeded share of the survivors with twice the steps (None: for the strong
    ensembles only; True: for every attack that has such a rerun; False: never). ``save_adversarial``: store the
    points the attacks reached in the run folder (:mod:`..runs.adversarial`); it is part of the run's fingerprint,
    so ``--resume`` with the other setting is refused (the rows are the same either way).
    """

    FAMILY: ClassVar[Family | None] = Family.IMAGE
    DESCRIPTION: ClassVar[str] = "image attack"
    KIND: ClassVar[str] = ATTACK

    attacks: tuple[str, ...] = option(
        (DEFAULT_IMAGE_ATTACK,), help=attack_help(), value=Many(Text()), flag="--attack", short="-a", panel="Attack"
    )
    eps: tuple[float, ...] | None = option(
        None,
        help="Budgets: images on the [0, 1] scale (fractions like 8/255 work; default: the data's grid); "
        "language models: embedding radii (see --eps-mode).",
        value=Many(Number()),
        panel="Attack",
    )
    norm: Norm | None = option(None, help="linf or l2 (default: the attack's own; l2 for LM attacks).", panel="Attack")
    steps: int | None = option(
        None,
        help="Iterations of every iterative attack (Square: queries; default: each attack's own). Fewer than an "
        "attack's own mark it weaker; its convergence check still runs its own.",
        value=Int(),
        panel="Attack",
    )
    step_size: float | None = option(
        None, help="Fixed step of pgd and pgd-l2 (default 0.15*eps); attacks that set their own refuse it.",
        value=Number(), panel="Attack",
    )  # fmt: skip
    early_stop: bool = option(
        True,
        help="An example leaves an attack once it is fooled (same broken examples, less compute).",
        value=Bool(),
        negatable=True,
        panel="Attack",
    )
    check_convergence: bool | None = option(
        None,
        help="Rerun a seeded share of the survivors with twice the steps (default: for the "
        "strong ensembles; off, the default attack skips its escalation and is marked weaker).",
        value=Bool(),
        negatable=True,
        panel="Attack",
    )
    check_masking: bool = option(
        False, help="Also run the gradient-masking checks (large eps, more steps, black-box).", value=Bool(),
        panel="Attack",
    )  # fmt: skip
    amp: str | None = option(
        None, help="bf16: clean evaluation under autocast (attacks stay fp32 unless --amp-attacks).", panel="Attack"
    )
    amp_attacks: bool = option(
        False, help="Run the attacks under --amp too (the summary records it).", value=Bool(), panel="Attack"
    )
    save_adversarial: bool = option(
        False,
        help="Store every example's adversarial point at each eps in the run folder (safetensors under "
        "adversarial/, hashed in the manifest).",
        value=Bool(),
        panel="Output",
    )
    n_examples: int | None = UpTo(256)
    batch_size: int = 128

    def __post_init__(self) -> None:
        super().__post_init__()
        attacks = _attack_names(self.attacks)
        for a in attacks:
            if a == WORDSWAP:
                raise RobfiltError(
                    "attack 'wordswap' does not fit image models (it swaps words of text); use "
                    f"{given('attacks', 'corruption')} for image contamination."
                )
            if a == CORRUPTION or a.startswith(f"{CORRUPTION}:"):
                raise RobfiltError(
                    f"{a!r} cannot share a run with adversarial attacks; run corruptions in their own run."
                )
            attack_spec(a, Family.IMAGE)
        self._set("attacks", attacks)
        norm = parse_norm(self.norm) or ATTACK_SPECS[attacks[0]].default_norm
        for a in attacks:
            if norm not in ATTACK_SPECS[a].norms:
                raise RobfiltError(
                    f"attack {a!r} does not support {given('norm', norm.value)}; use {ATTACK_SPECS[a].norms[0].value}."
                )
        self._set("norm", norm)
        if self.eps is None and not isinstance(self.data, str):
            raise RobfiltError(
                f"data given as arrays or a Dataset has no default eps grid; pass {given('eps', '8/255')}."
            )
        eps = default_eps(self.data, norm) if self.eps is None else _unique(map(float, self.eps), "eps")
        if not eps:
            raise RobfiltError(f"{flag('eps')} is empty; give values like {given('eps', '0.01,8/255')}.")
        for e in eps:
            if not (e >= 0.0) or math.isnan(e) or math.isinf(e):
                raise RobfiltError(f"eps {e} is negative or not finite; eps is a budget on the [0, 1] input scale.")
            if norm is Norm.LINF and e > 1.0:
                raise RobfiltError(f"eps {e:g} is above 1 on the [0, 1] input scale; did you mean {e:g}/255?")
        self._set("eps", tuple(sorted(eps)))
        _check_steps(self.steps, self.step_size)
        _budget_options(attacks, self.steps, self.step_size)
        if not isinstance(self.early_stop, bool):
            raise RobfiltError(f"{flag('early_stop')} must be true or false, got {self.early_stop!r}.")
        if self.check_convergence is not None and not isinstance(self.check_convergence, bool):
            raise RobfiltError(
                f"{flag('check_convergence')} must be true, false or left out (auto), got {self.check_convergence!r}."
            )
        if self.check_convergence and not any(ATTACK_SPECS[a].converges for a in attacks):
            rerun = [n for n, spec in ATTACK_SPECS.items() if spec.converges]
            raise RobfiltError(
                f"{', '.join(attacks)} {'has' if len(attacks) == 1 else 'have'} no stronger rerun to check with; "
                f"{flag('check_convergence')} applies to {', '.join(rerun)}."
            )
        if self.amp is not None and self.amp not in AMP_DTYPES:
            raise RobfiltError(
                f"unknown {flag('amp')} {self.amp!r}; use {', '.join(AMP_DTYPES)} (or leave it out for fp32)."
            )
        if self.amp_attacks and self.amp is None:
            raise RobfiltError(
                f"{flag('amp_attacks')} needs {given('amp', 'bf16')} (it runs the attacks in that precision too)."
            )
        if not isinstance(self.save_adversarial, bool):
            raise RobfiltError(f"{flag('save_adversarial')} must be true or false, got {self.save_adversarial!r}.")


@dataclass(frozen=True, kw_only=True)
class LMAttackConfig(RunConfig):
    """Embedding-space FGSM/PGD and word-swap contamination on language models (see :mod:`..attacks.lm`).

    With no attack named, embedding-space PGD runs: the strongest attack robfilt has for language models.
    """

    FAMILY: ClassVar[Family | None] = Family.LM
    DESCRIPTION: ClassVar[str] = "language-model attack"
    KIND: ClassVar[str] = ATTACK

    attacks: tuple[str, ...] = (DEFAULT_LM_ATTACK,)
    eps: tuple[float, ...] | None = None
    rates: tuple[float, ...] | None = option(
        None,
        help="Word-swap contamination rates in [0, 1] (language models).",
        value=Many(Number()),
        flag="--rate",
        panel="Attack",
    )
    norm: Norm | None = None
    eps_mode: str = option(
        "relative",
        help="LM eps: relative (a fraction of the mean token-embedding norm) or absolute.",
        panel="Attack",
    )
    steps: int = 20
    step_size: float | None = None
    replacement: str = option(
        DEFAULT_REPLACEMENT, help="Word-swap replacement token (language models).", panel="Attack"
    )
    check_masking: bool = False
    tokenizer: Any = option(
        None,
        help="Language models' tokenizer: char or bpe when training an own LM; a tokenizer folder for hf: models "
        "(default: the model's own); in Python, a tokenizer object too.",
        value=Tokenizer(),
        compare=False,
        panel="Model",
    )
    text_column: str | None = option(None, help="hf-disk data: the text column (language models).", panel="Data")
    split: str = option(
        DEFAULT_TEXT_SPLIT,
        help="Language models: the documents of --data to score: all, train, val or test (default test: the held-out "
        "documents; a source without splits is cut 90/5/5 by characters at document boundaries).",
        panel="Data",
    )
    max_length: int | None = option(
        None,
        help="Language models: lm-eval's rolling window in tokens (default: the block size; hf: models: their "
        "positions, at most 1024).",
        value=Int(),
        panel="Data",
    )
    stride: int | None = option(
        None, help="Language models: tokens newly predicted per rolling window (default: max length, lm-eval's "
        "disjoint windows).", value=Int(), panel="Data",
    )  # fmt: skip
    precision: str = option(
        "fp32", help="Language models' weights: fp32 or bf16 (attacks run in it too).", panel="Model"
    )
    data: str = "austen"
    n_examples: int | None = UpTo(64)
    batch_size: int = 32

    def __post_init__(self) -> None:
        super().__post_init__()
        attacks = _attack_names(self.attacks)
        for a in attacks:
            if a == WORDSWAP:
                continue
            if a == CORRUPTION or a.startswith(f"{CORRUPTION}:"):
                raise RobfiltError(
                    f"corruptions are image contaminations; language models take {given('attacks', 'wordswap')}."
                )
            attack_spec(a, Family.LM)
            if a not in EMBEDDING_ATTACKS:
                raise RobfiltError(
                    f"attack {a!r} has no LM implementation; use one of: {', '.join(EMBEDDING_ATTACKS)}."
                )
        self._set("attacks", attacks)
        adversarial = [a for a in attacks if a in EMBEDDING_ATTACKS]
        if self.eps is not None:
            if not adversarial:
                raise RobfiltError(
                    f"{flag('eps')} applies to the embedding attacks fgsm and pgd; word swap takes {flag('rates')}."
                )
            eps = _unique(map(float, self.eps), "eps")
            if not eps:
                raise RobfiltError(f"{flag('eps')} is empty; give values like {given('eps', '0.01,0.05')}.")
            for e in eps:
                if not (e >= 0.0) or not math.isfinite(e):
                    raise RobfiltError(f"eps {e} is negative or not finite; LM eps is a (relative) embedding radius.")
        else:
            eps = DEFAULT_LM_EPS if adversarial else ()
        self._set("eps", tuple(sorted(eps)))
        if self.rates is not None:
            if WORDSWAP not in attacks:
                raise RobfiltError(
                    f"{flag('rates')} applies to the text attack wordswap; add wordswap to {flag('attacks')}."
                )
            rates = _unique(map(float, self.rates), "rates")
            if not rates:
                raise RobfiltError(f"{flag('rates')} is empty; give fractions like {given('rates', '0,0.05,0.1')}.")
            for r in rates:
                validate_rate(r)
        else:
            rates = DEFAULT_RATES if WORDSWAP in attacks else ()
        self._set("rates", tuple(sorted(rates)))
        self._check_attack_options(attacks)
        try:
            self._set("norm", parse_norm(self.norm) or Norm.L2)
        except RobfiltError:
            raise RobfiltError(f"unknown {flag('norm')} {self.norm!r}; use linf or l2.") from None
        if self.eps_mode not in EPS_MODES:
            raise RobfiltError(f"unknown {flag('eps_mode')} {self.eps_mode!r}; use relative or absolute.")
        _check_steps(self.steps, self.step_size)
        if self.step_size is not None and attacks != ("pgd",):
            raise RobfiltError(
                f"{flag('step_size')} sets the fixed step of embedding pgd; {', '.join(a for a in attacks if a != 'pgd')} "
                "takes none (fgsm steps eps, wordswap swaps words): leave it out, or run pgd in a run of its own."
            )
        if not self.replacement:
            raise RobfiltError(f"{flag('replacement')} is empty; give a token such as AAA.")
        try:
            self._set("split", normalise_split(self.split))
        except RobfiltError:
            raise RobfiltError(f"unknown {flag('split')} {self.split!r}; use all, train, val or test.") from None
        _positive(self.max_length, "max_length")
        _positive(self.stride, "stride")
        if self.max_length is not None and self.stride is not None and self.stride > self.max_length:
            raise RobfiltError(
                f"{given('stride', str(self.stride))} is longer than {given('max_length', str(self.max_length))}; "
                "pass less."
            )
        if self.precision not in PRECISIONS:
            raise RobfiltError(f"unknown {flag('precision')} {self.precision!r}; use {' or '.join(PRECISIONS)}.")
        if self.precision == "bf16":
            from ..models.hf.load import precision_dtype

            precision_dtype(self.precision, self.device)
        check_data_options(self, {"text_column": ("hf-disk",)})

    def _check_attack_options(self, attacks: tuple[str, ...]) -> None:
        """Attack settings that no attack of the run reads are refused (set away from their defaults): PGD's steps
        mean nothing to FGSM (one step) or word swap, the embedding ball to word swap, and the replacement token to
        the embedding attacks (``--step-size`` has its own rule, above)."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        readers = {
            "steps": ("pgd",), "norm": EMBEDDING_ATTACKS, "eps_mode": EMBEDDING_ATTACKS,
            "replacement": (WORDSWAP,),
        }  # fmt: skip
        for name, read_by in readers.items():
            if getattr(self, name) != defaults[name] and not set(read_by) & set(attacks):
                raise RobfiltError(
                    f"{flag(name)} is a setting of {' and '.join(read_by)}, and this run attacks with "
                    f"{', '.join(attacks)} only; add {read_by[0]} to {flag('attacks')}, or drop it."
                )


@dataclass(frozen=True, kw_only=True)
class CorruptionConfig(ImageDataConfig):
    """Common corruptions at severities 1-5 on image models, with mCE (see :mod:`..attacks.corruption`)."""

    FAMILY: ClassVar[Family | None] = Family.IMAGE
    DESCRIPTION: ClassVar[str] = "corruption"
    KIND: ClassVar[str] = CORRUPTION_RUN

    attacks: tuple[str, ...] = (CORRUPTION,)
    severities: tuple[int, ...] = option(
        SEVERITIES, help="Corruption severities, a comma list of 1-5.", value=Many(Int()), flag="--severity",
        panel="Attack",
    )  # fmt: skip
    baseline: str | None = option(
        "deit", help="Corruptions: the model whose errors normalise mCE (one of the run's models).", panel="Attack"
    )
    n_examples: int | None = UpTo(256)
    batch_size: int = 128

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set("attacks", _unique(_names(self.attacks), "attacks"))
        self.corruptions  # noqa: B018 - validates the names
        sev = _unique((int(s) for s in self.severities), "severities")
        if not sev:
            raise RobfiltError(f"no severities given; use some of 1-5, e.g. {given('severities', '1,3,5')}.")
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
                check_corruption(n)
                if n not in names:
                    names.append(n)
        return names
