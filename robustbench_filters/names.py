"""What exists, by name: model variants, their sizes and timm names, attacks and corruptions; without torch.

The command line needs these names for its help texts and for ``robfilt models list``, which must start in a
fraction of a second; importing the modules that *build* models or attacks costs seconds (torch, timm,
torchattacks). So the names live here as plain data, and ``tests/test_cli_startup.py`` checks that they equal
what the heavy modules (:mod:`.models.registry`, :mod:`.models.timm_registry`, :mod:`.attacks.catalogue`,
:mod:`.attacks.corruption_transforms`, :mod:`.configs`) define.
"""

from __future__ import annotations

from .errors import RobfiltError, unknown
from .family import Family

#: Registry-name prefix of each family: ``deit-*`` names are image models, ``lm-*`` language models.
PREFIX: dict[Family, str] = {Family.IMAGE: "deit", Family.LM: "lm"}
MODEL_NAMES: tuple[str, ...] = tuple(
    f"{fam}{suffix}" for fam in ("deit", "lm") for suffix in ("", "-bsa", "-grc", "-bsa-grc")
)
SIZES: dict[Family, tuple[str, ...]] = {
    Family.IMAGE: ("micro", "tiny", "small", "base"),
    Family.LM: ("micro", "small"),
}
#: DeiT size -> (patch size, image size): what a timm name spells out.
DEIT_GEOMETRY: dict[str, tuple[int, int]] = {"micro": (4, 28), "tiny": (16, 224), "small": (16, 224), "base": (16, 224)}
#: robfilt DeiT name -> the infix of its timm name.
TIMM_VARIANTS: dict[str, str] = {"deit": "", "deit-bsa": "_bsa", "deit-grc": "_grc", "deit-bsa-grc": "_bsa_grc"}

#: The attack image runs use when none is named (the strongest ensemble; attacks.catalogue checks it is there).
DEFAULT_IMAGE_ATTACK = "autoattack-fast"
#: Image attacks of the catalogue, in catalogue order; the language-model ones (embedding attacks).
IMAGE_ATTACKS: tuple[str, ...] = (
    "autoattack-fast", "autoattack", "fgsm", "pgd", "pgd-l2", "apgd-ce", "apgd-t", "fab", "square", "cw",
)  # fmt: skip
LM_ATTACKS: tuple[str, ...] = ("fgsm", "pgd")
#: Contaminations: word swap for language models, common corruptions for images.
WORDSWAP = "wordswap"
CORRUPTION = "corruption"
CORRUPTIONS: tuple[str, ...] = ("gaussian_noise", "impulse_noise", "gaussian_blur", "contrast", "jpeg")


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


def attack_help() -> str:
    """The ``--attack`` help text: every attack name, per family."""
    return (
        f"Comma list. Images: {', '.join(IMAGE_ATTACKS)}, {CORRUPTION}[:<name>] ({', '.join(CORRUPTIONS)}); "
        f"language models: {', '.join(LM_ATTACKS)}, {WORDSWAP}. Default: {DEFAULT_IMAGE_ATTACK} for images (the "
        "strongest; fgsm and pgd are weaker), pgd for language models."
    )
