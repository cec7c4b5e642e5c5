"""The bundled zoo as data: where each checkpoint lives and what its card says, read without torch.

``robfilt models list`` shows every variant with its zoo metrics and certificates. All of that is in the JSON
cards next to the weights, so listing reads the cards and never builds a model (which would import torch and
timm, seconds before the first line of output). :mod:`.checkpoint` writes and loads the checkpoints
themselves; it takes the file names and the folder layout from here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..core.family import Family
from ..core.names import MODEL_NAMES, SIZES, ZOO_MODEL_SIZE, ZOO_MODELS, parse_name, timm_name

WEIGHTS = "model.safetensors"
CARD = "card.json"
ZOO_DIR = Path(__file__).resolve().parents[1] / "zoo"  # robustbench_filters/zoo, package data
# Noise levels of the noise-trained zoo variants (``checkpoint="zoo:sigma0.25"``): base classifiers for
# randomized smoothing, trained with Gaussian data augmentation (``robfilt train --noise-sigma``).
ZOO_NOISE_SIGMAS: tuple[float, ...] = (0.25,)


def noise_tag(noise_sigma: float) -> str:
    """``sigma0.25``: how a noise level names a zoo variant (``checkpoint="zoo:sigma0.25"``)."""
    return f"sigma{float(noise_sigma):g}"


def zoo_folder_name(name: str, size: str, noise_sigma: float | None = None) -> str:
    """``<name>-<size>``, or ``<name>-<size>-sigma<S>`` for the variant trained with Gaussian input noise of std S."""
    return f"{name}-{size}" + (f"-{noise_tag(noise_sigma)}" if noise_sigma else "")


def zoo_path(name: str, size: str, noise_sigma: float | None = None) -> Path:
    """The bundled checkpoint folder of a variant (see :func:`zoo_folder_name`)."""
    return ZOO_DIR / zoo_folder_name(name, size, noise_sigma)


def zoo_entry(name: str, size: str, noise_sigma: float | None = None) -> dict[str, Any] | None:
    """Zoo metrics for a name (and noise level), or None when no trained weights are bundled."""
    folder = zoo_path(name, size, noise_sigma)
    if not (folder / WEIGHTS).exists() or not (folder / CARD).exists():
        return None
    card = json.loads((folder / CARD).read_text())
    entry = {"path": str(folder), "metrics": card.get("metrics", {}), "recipe": card.get("recipe")}
    if noise_sigma:
        entry["checkpoint"] = f"zoo:{noise_tag(noise_sigma)}"
        entry["certification"] = card.get("certification")
    return entry


def noise_zoo(name: str, size: str) -> dict[str, dict[str, Any]]:
    """The noise-trained zoo variants of a name: ``{"sigma0.25": entry}`` for those bundled."""
    out = {}
    for sigma in ZOO_NOISE_SIGMAS:
        entry = zoo_entry(name, size, sigma)
        if entry is not None:
            out[noise_tag(sigma)] = entry
    return out


def list_table() -> list[dict[str, Any]]:
    """One row per model variant: family, BSA/GRC, sizes, zoo metrics, timm names, noise-trained certificates."""
    rows = []
    for name in MODEL_NAMES:
        family, bsa, grc = parse_name(name)
        sizes = SIZES[family]
        zoo = {s: zoo_entry(name, s) for s in sizes}
        rows.append(
            {
                "name": name,
                "family": family.value,
                "bsa": bsa,
                "grc": grc,
                "sizes": list(sizes),
                "zoo": {s: z["metrics"] for s, z in zoo.items() if z is not None},
                # timm.create_model(...) / --model timm:<name>; LMs are not timm models
                "timm": {s: timm_name(name, s) for s in sizes} if family is Family.IMAGE else {},
                "zoo_noise": {
                    f"{s}-{tag}": {"metrics": e["metrics"], "certification": e["certification"]}
                    for s in sizes
                    for tag, e in noise_zoo(name, s).items()
                },
            }
        )
    return rows + zoo_model_rows()


def zoo_model_rows() -> list[dict[str, Any]]:
    """One row per zoo model (``deit-at``: an architecture with weights from another training), as
    :func:`list_table` gives the variants, plus the architecture and the training."""
    rows = []
    for name, (arch, training) in ZOO_MODELS.items():
        family, bsa, grc = parse_name(arch)
        entry = zoo_entry(name, ZOO_MODEL_SIZE)
        rows.append(
            {
                "name": name, "family": family.value, "bsa": bsa, "grc": grc, "sizes": [ZOO_MODEL_SIZE],
                "zoo": {ZOO_MODEL_SIZE: entry["metrics"]} if entry is not None else {}, "timm": {}, "zoo_noise": {},
                "architecture": arch, "training": training,
            }
        )  # fmt: skip
    return rows
