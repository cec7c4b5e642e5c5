"""Typed run configs: what each kind of run measures, with its defaults and its validation in one place.

One frozen dataclass per kind of run: :class:`ImageAttackConfig`, :class:`LMAttackConfig`,
:class:`CorruptionConfig` and :class:`LipschitzConfig`. The command line, ``robustness.toml`` specs, the study
plan and the Python API all build these, so a default or a rule cannot drift between them. Validation runs in
``__post_init__``: a config that exists is valid, and it is checked before any model is loaded or any folder is
written. An option that does not apply to a kind of run is refused by :func:`build` (never silently dropped).

Lists refuse repeated values (eps, rates, severities, models, attacks): a repeated value would count every
example twice and make intervals too narrow, and guessing which copy was meant would hide a typo.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from torch import nn

from .attacks.catalogue import ATTACKS, Norm, get_attack, parse_norm
from .attacks.corruption_transforms import CORRUPTIONS, SEVERITIES, check_severity, get_corruption
from .attacks.embedding import EMBEDDING_ATTACKS, EPS_MODES
from .attacks.wordswap import DEFAULT_RATES, DEFAULT_REPLACEMENT, validate_rate
from .errors import RobfiltError
from .family import Family

ModelLike = str | nn.Module

WORDSWAP = "wordswap"
CORRUPTION = "corruption"
#: Contaminations are not optimised attacks: they have no eps ball, only a rate or a severity.
CONTAMINATIONS: dict[str, Family] = {WORDSWAP: Family.LM, CORRUPTION: Family.IMAGE}

# eps grids on the [0, 1] scale. Each grid's top value drives an undefended model close to 0% under PGD.
DEFAULT_EPS: dict[str, dict[Norm, tuple[float, ...]]] = {
    "fashion-mnist": {Norm.LINF: (0.005, 0.01, 0.02, 0.05, 0.1), Norm.L2: (0.1, 0.25, 0.5, 1.0, 2.0)},
    "mnist": {Norm.LINF: (0.05, 0.1, 0.2, 0.3), Norm.L2: (0.5, 1.0, 2.0, 3.0)},
    "cifar10": {Norm.LINF: (1 / 255, 2 / 255, 4 / 255, 8 / 255, 16 / 255), Norm.L2: (0.125, 0.25, 0.5, 1.0)},
    "cifar100": {Norm.LINF: (1 / 255, 2 / 255, 4 / 255, 8 / 255, 16 / 255), Norm.L2: (0.125, 0.25, 0.5, 1.0)},
    "imagenet": {Norm.LINF: (0.5 / 255, 1 / 255, 2 / 255, 4 / 255), Norm.L2: (0.25, 0.5, 1.0, 2.0)},
}
#: Relative eps grid for LM embedding attacks (a fraction of a typical token embedding; see attacks.embedding).
DEFAULT_LM_EPS: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1)
DEFAULT_LM_SEQUENCES = 64
AMP_DTYPES: tuple[str, ...] = ("bf16",)
DEVICES = ("cpu", "cuda")


def default_eps(data: str, norm: Norm) -> tuple[float, ...]:
    """The default eps grid of a dataset spec under ``norm``."""
    key = data.split(":", 1)[0].replace("-full", "")
    if key == "imagefolder":
        key = "imagenet"
    if key not in DEFAULT_EPS:
        raise RobfiltError(f"no default eps grid for data {data!r}; pass --eps, e.g. --eps 1/255,2/255,4/255.")
    return DEFAULT_EPS[key][norm]


def model_label(model: ModelLike, index: int) -> str:
    """The name a model has in rows and tables: its display name or reference, its registry name, or ``model<i>``."""
    if isinstance(model, str):
        from .models.ref import parse_model_ref

        return parse_model_ref(model).label
    return getattr(getattr(model, "robfilt_spec", None), "name", f"model{index}")


def model_family(model: ModelLike) -> Family:
    """A reference's or module's family, checked without loading anything."""
    if isinstance(model, str):
        from .models.resolve import validate_model_ref

        return Family.LM if validate_model_ref(model) == "lm" else Family.IMAGE
    spec = getattr(model, "robfilt_spec", None)
    if spec is not None:
        return spec.family
    return Family.LM if hasattr(model, "forward_embeddings") else Family.IMAGE


def _unique(values: Iterable[Any], what: str) -> tuple[Any, ...]:
    seen: list[Any] = []
    for v in values:
        if v in seen:
            shown = f"{v:g}" if isinstance(v, float) else str(v)
            raise RobfiltError(f"{what} lists {shown} twice; list each value once.")
        seen.append(v)
    return tuple(seen)


def _positive(value: int | None, what: str) -> None:
    if value is not None and (isinstance(value, bool) or int(value) != value or int(value) <= 0):
        raise RobfiltError(f"{what} must be positive (a whole number), got {value}.")


def _check_device(device: str) -> None:
    if device not in DEVICES and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise RobfiltError(f"unknown --device {device!r}; use cpu or cuda.")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise RobfiltError("--device cuda was requested but no CUDA device is available; use --device cpu.")


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """What every kind of run shares: the models, the data, the seed and where the models come from."""

    KIND: ClassVar[str] = ""
    FAMILY: ClassVar[Family | None] = None
    DESCRIPTION: ClassVar[str] = ""

    models: tuple[ModelLike, ...]
    data: str | None = None
    n_examples: int | None = None
    batch_size: int | None = None
    seed: int = 0
    size: str = "micro"
    checkpoint: str | None = "zoo"
    device: str = "cpu"
    allow_pickle: bool = False
    model_args: tuple[str, ...] = ()
    base_dir: str | None = None

    def __post_init__(self) -> None:
        models = (self.models,) if isinstance(self.models, str | nn.Module) else tuple(self.models)
        if not models:
            raise RobfiltError("no model given; pass --model NAME[,NAME...].")
        self._set("models", models)
        _unique(self.labels, "--model")
        families = [model_family(m) for m in models]  # also checks every reference's syntax and registry name
        if self.FAMILY is not None:
            for m, fam in zip(models, families, strict=True):
                if fam is not self.FAMILY:
                    raise RobfiltError(
                        f"model {model_label(m, 0)!r} is a {fam.value} model; {self.DESCRIPTION} runs need "
                        f"{self.FAMILY.value} models (run the two families separately)."
                    )
        _positive(self.n_examples, "--n-examples")
        _positive(self.batch_size, "--batch-size")
        self._set("model_args", tuple(self.model_args))
        self.parsed_model_args  # noqa: B018 - validates key=value syntax before any model is built
        if isinstance(self.seed, bool) or int(self.seed) != self.seed:
            raise RobfiltError(f"--seed must be an integer, got {self.seed}.")
        _check_device(str(self.device))

    @property
    def parsed_model_args(self) -> dict[str, Any]:
        """``--model-arg key=value`` pairs as typed values (they apply to every model given by reference)."""
        from .models.ref import parse_model_args

        return parse_model_args(self.model_args)

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    @property
    def labels(self) -> list[str]:
        return [model_label(m, i) for i, m in enumerate(self.models)]

    @classmethod
    def options(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))


@dataclass(frozen=True, kw_only=True)
class ImageAttackConfig(RunConfig):
    """Adversarial attacks on image models, over an ascending eps grid (see :mod:`.attacks.image`)."""

    KIND: ClassVar[str] = "attack"
    FAMILY: ClassVar[Family | None] = Family.IMAGE
    DESCRIPTION: ClassVar[str] = "image attack"

    attacks: tuple[str, ...] = ("pgd",)
    eps: tuple[float, ...] | None = None
    norm: Norm | None = None
    steps: int = 20
    step_size: float | None = None
    check_masking: bool = False
    amp: str | None = None
    amp_attacks: bool = False
    data: Any = "fashion-mnist"
    data_root: str | None = None
    img_size: int | None = None
    num_workers: int | None = None
    image_column: str | None = None
    label_column: str | None = None
    n_examples: int = 256
    batch_size: int = 128

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_image_data(self)
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
        if self.amp is not None and self.amp not in AMP_DTYPES:
            raise RobfiltError(f"unknown --amp {self.amp!r}; use {', '.join(AMP_DTYPES)} (or leave it off for fp32).")
        if self.amp_attacks and self.amp is None:
            raise RobfiltError("--amp-attacks needs --amp bf16 (it runs the attacks in that precision too).")


@dataclass(frozen=True, kw_only=True)
class LMAttackConfig(RunConfig):
    """Embedding-space FGSM/PGD and word-swap contamination on language models (see :mod:`.attacks.lm`)."""

    KIND: ClassVar[str] = "attack"
    FAMILY: ClassVar[Family | None] = Family.LM
    DESCRIPTION: ClassVar[str] = "language-model attack"

    attacks: tuple[str, ...] = ("pgd",)
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
class CorruptionConfig(RunConfig):
    """Common corruptions at severities 1-5 on image models, with mCE (see :mod:`.attacks.corruption`)."""

    KIND: ClassVar[str] = "corruption"
    FAMILY: ClassVar[Family | None] = Family.IMAGE
    DESCRIPTION: ClassVar[str] = "corruption"

    attacks: tuple[str, ...] = (CORRUPTION,)
    severities: tuple[int, ...] = SEVERITIES
    baseline: str | None = "deit"
    data: Any = "fashion-mnist"
    data_root: str | None = None
    img_size: int | None = None
    num_workers: int | None = None
    image_column: str | None = None
    label_column: str | None = None
    n_examples: int = 256
    batch_size: int = 128

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_image_data(self)
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


@dataclass(frozen=True, kw_only=True)
class LipschitzConfig(RunConfig):
    """Lower and certified upper Lipschitz bounds per example (see :mod:`.lipschitz.run`)."""

    KIND: ClassVar[str] = "lipschitz"
    FAMILY: ClassVar[Family | None] = None
    DESCRIPTION: ClassVar[str] = "Lipschitz"

    method: str = "exact"
    bounds: bool = True
    per_layer: bool = False
    gap: bool = False
    gap_rhos: tuple[float, ...] = (1e-3,)
    gap_taylor: bool = True
    rho: float = 0.1
    power_iters: int = 50
    tol: float = 1e-5
    ratio_steps: int = 20
    seq_len: int = 64
    dtype: str | None = None
    inputs: Any = field(default=None, compare=False)
    input_labels: Any = field(default=None, compare=False)
    n_examples: int = 16
    batch_size: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()
        from .lipschitz.methods import parse_method

        self._set("method", parse_method(self.method).value)
        _positive(self.power_iters, "power iterations")
        _positive(self.seq_len, "--seq-len")
        if isinstance(self.ratio_steps, bool) or int(self.ratio_steps) < 0:
            raise RobfiltError(f"ratio steps must be >= 0, got {self.ratio_steps}.")
        if not (math.isfinite(self.rho) and self.rho > 0):
            raise RobfiltError(f"--rho must be a positive finite l2 radius, got {self.rho}; pass e.g. 0.1.")
        if not (math.isfinite(self.tol) and self.tol >= 0):
            raise RobfiltError(f"tolerance must be >= 0, got {self.tol}.")
        if self.dtype not in (None, "float32", "float64"):
            raise RobfiltError("dtype must be 'float32' or 'float64' (never half precision for certificates).")
        if self.inputs is not None and len(self.inputs) < self.n_examples:
            raise RobfiltError(f"inputs hold {len(self.inputs)} examples but n_examples is {self.n_examples}.")


@dataclass(frozen=True, kw_only=True)
class CertifyConfig(RunConfig):
    """Randomized-smoothing certificates (Cohen et al. 2019) of image models (see :mod:`.smoothing.run`).

    The default checkpoint is the noise-trained zoo (``zoo:sigma0.25``): a smoothed classifier is only as good as
    its base model is at classifying noisy inputs. Every run also attacks the smoothed classifier (SmoothAdv PGD)
    on its first ``attack_examples`` examples to check that no certificate claims more than an attack can refute.
    """

    KIND: ClassVar[str] = "certify"
    FAMILY: ClassVar[Family | None] = Family.IMAGE
    DESCRIPTION: ClassVar[str] = "certify"

    sigmas: tuple[float, ...] = (0.25,)
    n0: int = 100
    n: int = 1000
    alpha: float = 0.001
    radii: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    attack_examples: int = 8
    attack_radii: tuple[float, ...] = (0.25, 0.5)
    attack_steps: int = 20
    attack_draws: int = 16
    checkpoint: str | None = "zoo:sigma0.25"
    data: Any = "fashion-mnist"
    data_root: str | None = None
    img_size: int | None = None
    num_workers: int | None = None
    image_column: str | None = None
    label_column: str | None = None
    n_examples: int = 64
    batch_size: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_image_data(self)
        sigmas = _unique(map(float, self.sigmas), "--sigma")
        if not sigmas or any(not (s > 0 and math.isfinite(s)) for s in sigmas):
            raise RobfiltError(f"--sigma needs positive noise levels, got {list(sigmas)}; e.g. --sigma 0.12,0.25,0.5.")
        self._set("sigmas", tuple(sorted(sigmas)))
        _positive(self.n0, "--n0")
        _positive(self.n, "--n")
        if not (0.0 < self.alpha < 0.5):
            raise RobfiltError(
                f"--alpha must be in (0, 0.5), got {self.alpha}; it is the failure probability of a certificate."
            )
        for what, values in (("--radii", self.radii), ("--attack-radii", self.attack_radii)):
            if any(not (r >= 0 and math.isfinite(r)) for r in values):
                raise RobfiltError(f"{what} must be L2 radii >= 0, got {list(values)}.")
        self._set("radii", tuple(sorted(_unique(map(float, self.radii), "--radii"))))
        self._set("attack_radii", tuple(sorted(_unique(map(float, self.attack_radii), "--attack-radii"))))
        if isinstance(self.attack_examples, bool) or int(self.attack_examples) < 0:
            raise RobfiltError(f"--attack-examples must be 0 or more, got {self.attack_examples}.")
        _positive(self.attack_steps, "--attack-steps")
        _positive(self.attack_draws, "--attack-draws")


def _check_image_data(config: Any) -> None:
    """Image data options: a positive image size and worker count (0 workers decodes in this process)."""
    _positive(config.img_size, "--img-size")
    if config.num_workers is not None and (isinstance(config.num_workers, bool) or int(config.num_workers) < 0):
        raise RobfiltError(f"--num-workers must be 0 or more, got {config.num_workers}.")


def data_label(data: Any) -> str:
    """How a run's data is named in records: its spec string, or the kind of in-memory data."""
    return data if isinstance(data, str) else f"<{type(data).__name__}>"


def _names(values: str | Sequence[str]) -> list[str]:
    return [values] if isinstance(values, str) else [str(v) for v in values]


CONFIGS: tuple[type[RunConfig], ...] = (
    ImageAttackConfig,
    LMAttackConfig,
    CorruptionConfig,
    LipschitzConfig,
    CertifyConfig,
)
#: How an option is spelt on the command line, where that differs from the field name.
FLAGS: dict[str, str] = {
    "rates": "--rate",
    "models": "--model",
    "attacks": "--attack",
    "input_labels": "labels",
    "model_args": "--model-arg",
    "severities": "--severity",
    "sigmas": "--sigma",
}


def flag(name: str) -> str:
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def build(cls: type[RunConfig], options: Mapping[str, Any]) -> RunConfig:
    """Build a config from the options a user actually gave; one that does not apply to this kind is refused."""
    fields = set(cls.options())
    for name in options:
        if name not in fields:
            raise RobfiltError(f"{flag(name)} does not apply to {cls.DESCRIPTION} runs; drop it.")
    return cls(**options)


def attack_config_class(models: Sequence[ModelLike], attacks: Sequence[str]) -> type[RunConfig]:
    """Which kind of attack run ``models`` x ``attacks`` is: image, language model or corruption."""
    families = {model_family(m) for m in models} or {Family.IMAGE}
    if len(families) > 1:
        raise RobfiltError("cannot mix image and language models in one run; run them separately.")
    if families == {Family.LM}:
        return LMAttackConfig
    if any(a == CORRUPTION or str(a).startswith(f"{CORRUPTION}:") for a in attacks):
        return CorruptionConfig
    return ImageAttackConfig


__all__ = [
    "CONFIGS",
    "CertifyConfig",
    "CONTAMINATIONS",
    "DEFAULT_EPS",
    "DEFAULT_LM_EPS",
    "CorruptionConfig",
    "ImageAttackConfig",
    "LMAttackConfig",
    "LipschitzConfig",
    "RunConfig",
    "attack_config_class",
    "build",
    "default_eps",
    "flag",
    "model_family",
    "model_label",
]
