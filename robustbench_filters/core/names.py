"""The shared vocabulary, by name and without torch: model variants, sizes and timm names; norms; attacks with the
families and norms they fit; contaminations (word swap, corruptions and their severities); precisions; Lipschitz
methods.

Everything above this module speaks these names: configs validate against them, the catalogue attaches a builder
to each attack, the CLI prints them in its help. The command line must start in a fraction of a second, and
importing the modules that *build* models or attacks costs seconds (torch, timm, torchattacks), so the names live
here as plain data. ``tests/test_cli_startup.py`` checks them against the heavy modules (:mod:`..models.registry`,
:mod:`..models.timm_registry`, :mod:`..attacks.catalogue`, :mod:`..attacks.corruption_transforms`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from .errors import RobfiltError, unknown
from .family import Family
from .io import expand_user

#: Registry-name prefix of each family: ``deit-*`` names are image models, ``lm-*`` language models.
PREFIX: dict[Family, str] = {Family.IMAGE: "deit", Family.LM: "lm"}
MODEL_NAMES: tuple[str, ...] = tuple(
    f"{fam}{suffix}" for fam in ("deit", "lm") for suffix in ("", "-bsa", "-grc", "-bsa-grc")
)
SIZES: dict[Family, tuple[str, ...]] = {
    Family.IMAGE: ("micro", "tiny", "small", "base"),
    Family.LM: ("micro", "small"),
}
#: Zoo models: bundled weights of a registry architecture from another training, under a name of their own
#: (``--model deit-at``): name -> (architecture, the training). Only their zoo weights exist (size micro).
ZOO_MODELS: dict[str, tuple[str, str]] = {
    "deit-at": ("deit", "PGD adversarial training at Linf 0.05, fine-tuned from the zoo deit"),
    "deit-grc-at": ("deit-grc", "PGD adversarial training at Linf 0.05, fine-tuned from the zoo deit-grc"),
}
ZOO_MODEL_SIZE = "micro"


def architecture(name: str) -> str:
    """The registry architecture a model name builds: itself, or a zoo model's (``deit-at`` -> ``deit``)."""
    return ZOO_MODELS[name][0] if name in ZOO_MODELS else name


#: DeiT size -> (patch size, image size): what a timm name spells out.
DEIT_GEOMETRY: dict[str, tuple[int, int]] = {"micro": (4, 28), "tiny": (16, 224), "small": (16, 224), "base": (16, 224)}
#: robfilt DeiT name -> the infix of its timm name.
TIMM_VARIANTS: dict[str, str] = {"deit": "", "deit-bsa": "_bsa", "deit-grc": "_grc", "deit-bsa-grc": "_bsa_grc"}


# --------------------------------------------------------------------------------------------------- norms
class Norm(str, Enum):
    LINF = "linf"
    L2 = "l2"


def parse_norm(value: str | Norm | None) -> Norm | None:
    """'linf' / 'l2' (case-insensitive) to a Norm; anything else is a one-line usage error."""
    from .surface import flag

    if value is None or isinstance(value, Norm):
        return value
    try:
        return Norm(str(value).strip().lower())
    except ValueError:
        raise RobfiltError(f"unknown {flag('norm')} {value!r}; use linf or l2.") from None


# --------------------------------------------------------------------------------------------------- attacks
@dataclass(frozen=True)
class AttackSpec:
    """What an attack is, by name: the model families and norms it fits and what it does. The catalogue
    (:mod:`..attacks.catalogue`) attaches the builder that runs it."""

    name: str
    families: tuple[Family, ...]
    norms: tuple[Norm, ...]
    default_norm: Norm
    description: str
    #: ``build(model, params) -> [(component, attack(x, y) -> x_adv), ...]``; set by the catalogue (None here)
    build: Callable[..., Any] | None = None
    minimum_norm: bool = False  # returns unbounded perturbations; success counts only inside the eps-ball
    gradient_free: bool = False
    strength: str = "single"  # STRONG: an ensemble robfilt stands behind; WEAK: known to overstate robustness
    converges: bool = False  # has a stronger rerun (the field ``rerun`` says how) for the convergence check
    #: how its convergence rerun is stronger (the check's detail says it)
    rerun: str = "2x steps, +1 restart"
    #: the stronger rerun's breaks count (escalation, :mod:`..attacks.cascade`): part of the attack, not only a check
    escalates: bool = False
    #: the most iterations (steps; Square's queries) any component runs at the attack's own settings: ``--steps``
    #: below it cuts the attack's budget. 1: a single-step attack (fgsm: a run of such attacks alone refuses any
    #: other ``--steps``); None: not declared (a registered attack: ``--steps`` passes through, never judged)
    steps: int | None = None
    #: its fixed step as a fraction of eps (pgd: 0.15): ``--step-size`` below it cuts the budget. 0: the attack sets
    #: its own step sizes (APGD's schedule, FGSM's eps, FAB, Square, CW: ``--step-size`` is refused); None: not
    #: declared (passes through)
    step_size: float | None = None

    def cut_by(self, steps: int | None, step_size: float | None, eps: Sequence[float]) -> bool:
        """Whether ``--steps`` / ``--step-size`` lower this attack's budget below its own (at some eps of the grid):
        the attack is then weaker than its name, whatever its ``strength``."""
        if steps is not None and self.steps and steps < self.steps:
            return True
        fixed = self.step_size
        return step_size is not None and bool(fixed) and any(step_size < fixed * e * (1 - 1e-9) for e in eps)


_IMAGE, _LM, _BOTH = (Family.IMAGE,), (Family.LM,), (Family.IMAGE, Family.LM)
_NORMS = (Norm.LINF, Norm.L2)
#: every attack robfilt knows, in catalogue order (``register_attack`` adds a user's)
STRONG, SINGLE, WEAK = "strong", "single", "weak"
#: The attack image runs use when none is named: the strongest robfilt has (attacks/adaptive.py builds it).
DEFAULT_IMAGE_ATTACK = "apgd-adaptive"
#: ... and language-model runs the strongest attack robfilt has for them: PGD in embedding space.
DEFAULT_LM_ATTACK = "pgd"
_WEAKER = f"Weaker than {DEFAULT_IMAGE_ATTACK}: an upper bound."
#: every attack robfilt knows, in catalogue order (``register_attack`` adds a user's)
ATTACK_SPECS: dict[str, AttackSpec] = {
    a.name: a
    for a in [
        AttackSpec(
            DEFAULT_IMAGE_ATTACK, _IMAGE, _NORMS, Norm.LINF,
            "The default: APGD-CE, then APGD-T on its survivors with targets chosen per example and long runs on "
            "the closest ones, then its stronger rerun on what is left until a round breaks nothing more; "
            "built to reach AutoAttack's reference strength at a fraction of its cost (B9, docs/attacks.md).",
            strength=STRONG, converges=True, escalates=True, steps=100, step_size=0,
            rerun="its targeted stage at 2x steps, every target",
        ),
        AttackSpec(
            "autoattack-standard", _IMAGE, _NORMS, Norm.LINF,
            "The yardstick: AutoAttack's standard version at the reference settings (APGD-CE 100 steps, APGD-T and "
            "FAB-T 9 targets x 100 steps, Square 5000 queries; torchattacks ports). Slow: about 10,000 model passes "
            "per robust example.",
            strength=STRONG, steps=5000, step_size=0,
        ),
        AttackSpec(
            "autoattack", _IMAGE, _NORMS, Norm.LINF,
            "Per-example worst case of APGD-CE, APGD-T, FAB-T and Square (torchattacks ports; see docs); several "
            f"times the time of {DEFAULT_IMAGE_ATTACK}.",
            strength=STRONG, steps=1000, step_size=0,
        ),
        AttackSpec(
            "autoattack-fast", _IMAGE, _NORMS, Norm.LINF,
            "The default before apgd-adaptive: APGD-CE (25 steps), then APGD-T (3 targets x 12 steps). Misses "
            f"examples on adversarially trained models. {_WEAKER}",
            strength=WEAK, converges=True, steps=25, step_size=0,
        ),
        AttackSpec("fgsm", _BOTH, (Norm.LINF,), Norm.LINF, f"FGSM, one signed-gradient step of size eps. {_WEAKER}",
                   strength=WEAK, steps=1, step_size=0),
        AttackSpec("pgd", _BOTH, _NORMS, Norm.LINF,
                   f"PGD: 20 steps, step 0.15*eps, random start (L2 with --norm l2). {_WEAKER}", strength=WEAK,
                   converges=True, steps=20, step_size=0.15),
        AttackSpec("pgd-l2", _IMAGE, (Norm.L2,), Norm.L2,
                   f"PGD under L2: 20 steps, step 0.15*eps, random start. {_WEAKER}", strength=WEAK, converges=True,
                   steps=20, step_size=0.15),
        AttackSpec("apgd-ce", _IMAGE, _NORMS, Norm.LINF, "APGD with cross-entropy, 50 steps, 1 restart.",
                   converges=True, steps=50, step_size=0),
        AttackSpec("apgd-t", _IMAGE, _NORMS, Norm.LINF, "Targeted APGD (DLR), 9 targets, 50 steps.", converges=True,
                   steps=50, step_size=0),
        AttackSpec("fab", _IMAGE, _NORMS, Norm.LINF, "FAB minimum-norm attack, 20 steps, counted inside eps.",
                   minimum_norm=True, steps=20, step_size=0),
        AttackSpec("square", _IMAGE, _NORMS, Norm.LINF, "Square: gradient-free, 1000 queries (--steps sets them).",
                   gradient_free=True, steps=1000, step_size=0),
        AttackSpec("cw", _IMAGE, (Norm.L2,), Norm.L2, "Carlini-Wagner L2 (c=1, 50 steps), counted inside eps.",
                   minimum_norm=True, steps=50, step_size=0),
    ]
}  # fmt: skip


def attack_spec(name: str, family: Family | None = None) -> AttackSpec:
    """The vocabulary entry of attack ``name``; with ``family``, it must fit that family's models."""
    if name not in ATTACK_SPECS:
        raise unknown("attack", name, [*ATTACK_SPECS, WORDSWAP, CORRUPTION])
    spec = ATTACK_SPECS[name]
    if family is not None and family not in spec.families:
        contamination = {Family.LM: WORDSWAP, Family.IMAGE: CORRUPTION}[family]  # also named by --attack
        fits = sorted([*(n for n, a in ATTACK_SPECS.items() if family in a.families), contamination])
        raise RobfiltError(
            f"attack {name!r} does not fit {family.value} models; for {family.value} use one of: {', '.join(fits)}."
        )
    return spec


def attacks_for(family: Family) -> tuple[str, ...]:
    return tuple(n for n, a in ATTACK_SPECS.items() if family in a.families)


#: The language-model attacks of the catalogue (embedding attacks), in catalogue order.
LM_ATTACKS: tuple[str, ...] = attacks_for(Family.LM)
EMBEDDING_ATTACKS: tuple[str, ...] = LM_ATTACKS
#: How an LM eps is read: relative to the mean token-embedding norm, or as an absolute embedding radius.
EPS_MODES: tuple[str, ...] = ("relative", "absolute")
#: Lower precisions a run may evaluate in (fp32 is the default and needs no name).
AMP_DTYPES: tuple[str, ...] = ("bf16",)
#: Weights' precision of LM runs (``--precision``): bf16 casts the models, attacks included.
PRECISIONS: tuple[str, ...] = ("fp32", "bf16")

# ------------------------------------------------------------------------------------------- contaminations
#: Contaminations: word swap for language models, common corruptions for images.
WORDSWAP = "wordswap"
CORRUPTION = "corruption"
CORRUPTIONS: tuple[str, ...] = ("gaussian_noise", "impulse_noise", "gaussian_blur", "contrast", "jpeg")
SEVERITIES: tuple[int, ...] = (1, 2, 3, 4, 5)
DEFAULT_REPLACEMENT = "AAA"
DEFAULT_RATES: tuple[float, ...] = (0.0, 0.015, 0.05, 0.1)


def check_severity(severity: int) -> int:
    if severity not in (0, *SEVERITIES):
        raise RobfiltError(f"corruption severity {severity} is not one of 0-5 (0 is the identity).")
    return int(severity)


def check_corruption(name: str) -> str:
    if name not in CORRUPTIONS:
        raise unknown("corruption", name, CORRUPTIONS)
    return name


def validate_rate(rate: float) -> float:
    if not (0.0 <= rate <= 1.0) or math.isnan(rate):
        raise RobfiltError(f"word-swap rate {rate:g} is outside [0, 1]; a rate is the fraction of eligible words.")
    return float(rate)


# --------------------------------------------------------------------------------------------------- data
BUNDLED_IMAGES = "fashion-mnist"
BUNDLED_TEXT = "austen"
TORCHVISION_SETS: tuple[str, ...] = ("cifar10", "cifar100", "mnist", "fashion-mnist-full")
SYNTHETIC = "synthetic"  # Lipschitz runs only: random inputs of the model's shape
IMAGEFOLDER, HF_DISK, TEXT_PREFIX = "imagefolder:", "hf-disk:", "text:"
#: data-spec prefix -> (the families it serves, what the path must be)
DATA_PREFIXES: dict[str, tuple[tuple[Family, ...], str]] = {
    IMAGEFOLDER: ((Family.IMAGE,), "folder"),
    HF_DISK: ((Family.IMAGE, Family.LM), "folder"),
    TEXT_PREFIX: ((Family.LM,), "file or folder"),
}
#: What ``--split`` takes for text (``val`` is stored as ``valid``, the name of the split files), and its default:
#: the held-out documents, the ones a model trained by robfilt never saw.
TEXT_SPLIT_CHOICES: tuple[str, ...] = ("all", "train", "val", "test")
DEFAULT_TEXT_SPLIT = "test"
_SPLIT_ALIASES = {"val": "valid", "validation": "valid", "dev": "valid"}


def normalise_split(split: str, allow_all: bool = True) -> str:
    """``all``/``train``/``valid``/``test`` (``val``, ``validation`` and ``dev`` mean ``valid``), else one line."""
    from .errors import suggest

    s = str(split).strip().lower()
    s = _SPLIT_ALIASES.get(s, s)
    known = ("all", "train", "valid", "test") if allow_all else ("train", "valid", "test")
    if s not in known:
        shown = TEXT_SPLIT_CHOICES if allow_all else TEXT_SPLIT_CHOICES[1:]
        raise RobfiltError(f"unknown split {split!r}.{suggest(s, shown)} Use one of: {', '.join(shown)}.")
    return s


DATA_NAMES: dict[Family, tuple[str, ...]] = {
    Family.IMAGE: (BUNDLED_IMAGES, *TORCHVISION_SETS),
    Family.LM: (BUNDLED_TEXT,),
}


def check_data_spec(spec: str, families: set[Family], *, synthetic: bool = False) -> None:
    """Refuse a data spec that no loader knows, or whose path does not exist, before anything heavy is imported."""

    for prefix, (serves, kind) in DATA_PREFIXES.items():
        if spec.startswith(prefix):
            if not families <= set(serves):
                wanted = " or ".join(f.value for f in serves)
                raise RobfiltError(f"data {spec!r} is {wanted} data; it does not fit these models.")
            path = expand_user(spec[len(prefix) :])
            exists = path.is_dir() if kind == "folder" else path.exists()
            if not exists:
                raise RobfiltError(f"data {spec!r}: {path} is not an existing {kind}; check the path.")
            return
    if synthetic and spec == SYNTHETIC:
        return
    known = [n for fam in sorted(families) for n in DATA_NAMES[fam]] + ([SYNTHETIC] if synthetic else [])
    key = spec.strip().lower().replace("_", "-")
    if key in known:
        return
    prefixes = [p for p, (serves, _) in DATA_PREFIXES.items() if families <= set(serves)]
    path = expand_user(spec) if spec else None
    if path is not None and path.exists() and prefixes:
        raise _own_data(spec, path.is_dir(), prefixes)
    raise unknown("data", spec, [*known, *(f"{p}<path>" for p in prefixes)])


#: what each data prefix reads, for messages that suggest one
DATA_READS: dict[str, str] = {
    IMAGEFOLDER: "one sub-folder of images per class",
    HF_DISK: "a Hugging Face datasets save_to_disk folder",
    TEXT_PREFIX: "plain text",
}


def _own_data(spec: str, is_dir: bool, prefixes: list[str]) -> RobfiltError:
    """The refusal of an existing path given without a prefix: the prefixes that read that kind of path."""
    what = "folder" if is_dir else "file"
    fitting = [p for p in prefixes if what in DATA_PREFIXES[p][1]]
    if not fitting:
        wanted = " or ".join(f"'{p}<folder>' ({DATA_READS[p]})" for p in prefixes)
        return RobfiltError(f"unknown data {spec!r}: it is a file, and these models read folders: {wanted}.")
    options = " or ".join(f"'{p}{spec}' ({DATA_READS[p]})" for p in fitting)
    return RobfiltError(f"unknown data {spec!r}; to read your own {what} use {options}.")


# -------------------------------------------------------------------------------------------- Lipschitz
class Method(str, Enum):
    """How the per-example Lipschitz lower bound is computed (all are rigorous lower bounds)."""

    EXACT = "exact"  # dense per-example Jacobian + float64 SVD (small outputs)
    POWER = "power"  # batched jvp/vjp power iteration on J^T J
    RATIO = "ratio"  # pair-ratio ascent ||f(x) - f(x')|| / ||x - x'|| on the ball B(x, rho)


def parse_method(value: str | Method) -> Method:
    """'power' -> Method.POWER; an unknown name raises with close-match suggestions."""
    if isinstance(value, Method):
        return value
    try:
        return Method(str(value).strip().lower())
    except ValueError:
        raise unknown("method", str(value), [m.value for m in Method]) from None


def parse_name(name: str) -> tuple[Family, bool, bool]:
    """'deit-bsa-grc' -> (Family.IMAGE, bsa=True, grc=True)."""
    if name not in MODEL_NAMES:
        raise unknown("model", name, MODEL_NAMES)
    prefix, *mods = name.split("-")
    family = next(f for f, p in PREFIX.items() if p == prefix)
    return family, "bsa" in mods, "grc" in mods


def timm_name(name: str, size: str) -> str:
    """timm's name of a robfilt DeiT: ('deit-bsa-grc', 'tiny') -> 'deit_tiny_bsa_grc_patch16_224'."""
    if name not in TIMM_VARIANTS or size not in DEIT_GEOMETRY:
        raise RobfiltError(f"no timm name for {name!r} at size {size!r}; DeiT variants are {', '.join(TIMM_VARIANTS)}.")
    patch, img = DEIT_GEOMETRY[size]
    return f"deit_{size}{TIMM_VARIANTS[name]}_patch{patch}_{img}"


#: timm name -> (robfilt name, size) of every DeiT variant robfilt registers with timm (the plain deit at
#: tiny/small/base is timm's own deit_{size}_patch16_224)
TIMM_REGISTERED: dict[str, tuple[str, str]] = {
    timm_name(n, s): (n, s) for n in TIMM_VARIANTS for s in DEIT_GEOMETRY if not (n == "deit" and s != "micro")
}
#: what a registered variant's timm pretrained_cfg says about its input, per size (models.timm_registry builds the
#: same values from the model configs; tests/test_cli_startup.py checks they agree)
_IMAGENET = {"num_classes": 1000, "in_chans": 3, "crop_pct": 0.9, "interpolation": "bicubic",
             "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}  # fmt: skip
TIMM_INPUTS: dict[str, dict] = {
    "micro": {
        "num_classes": 10,
        "in_chans": 1,
        "crop_pct": 1.0,
        "interpolation": "bilinear",
        "mean": (0.2860,),
        "std": (0.3530,),
    },  # fmt: skip
    "tiny": _IMAGENET,
    "small": _IMAGENET,
    "base": _IMAGENET,
}


def timm_pretrained_cfg(arch: str) -> dict:
    """The timm ``pretrained_cfg`` of a registered variant: no URL (nothing downloads), its input and classifier."""
    _, size = TIMM_REGISTERED[arch]
    inputs, (_, img) = TIMM_INPUTS[size], DEIT_GEOMETRY[size]
    return {
        "url": "", "num_classes": inputs["num_classes"], "input_size": (inputs["in_chans"], img, img),
        "pool_size": None, "crop_pct": inputs["crop_pct"], "interpolation": inputs["interpolation"],
        "fixed_input_size": True, "mean": inputs["mean"], "std": inputs["std"], "first_conv": "patch_embed.proj",
        "classifier": "head", "architecture": arch, "license": "mit",
    }  # fmt: skip


def attack_help() -> str:
    """The ``--attack`` help text: every attack name, per family."""
    return (
        f"Comma list. Images: {', '.join(attacks_for(Family.IMAGE))}, {CORRUPTION}[:<name>] "
        f"({', '.join(CORRUPTIONS)}); language models: {', '.join(attacks_for(Family.LM))}, {WORDSWAP}. Default: "
        f"{DEFAULT_IMAGE_ATTACK} for images (the strongest; fgsm and pgd are weaker), pgd for language models."
    )


#: how to install the Hugging Face extra (hf: models), for every message that needs it
HF_INSTALL = "pip install robustbench-filters[hf]"

#: How ``robfilt certify`` certifies: randomized smoothing (L2 radii, a statistical certificate of the smoothed
#: classifier) or a bound propagation through the model itself (Linf eps, an exact verification):
#: interval bounds, CROWN on interval relaxations, or CROWN with forward linear relaxations (robustbench_filters/crown).
SMOOTHING = "smoothing"
BOUND_METHODS: tuple[str, ...] = ("ibp", "crown-ibp", "crown")
CERTIFY_METHODS: tuple[str, ...] = (SMOOTHING, *BOUND_METHODS)
#: CROWN's re-tightening of intermediate bounds (crown/propagate.py), cheapest last
BOUND_REFRESH: tuple[str, ...] = ("all", "full", "deep", "inner", "residual", "none")
