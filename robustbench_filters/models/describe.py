"""Human- and machine-readable descriptions of the model variants (``robfilt models list|show``)."""

from __future__ import annotations

import json
from typing import Any

from ..family import Family
from .checkpoint import CARD, WEIGHTS, ZOO_NOISE_SIGMAS, noise_tag, zoo_path
from .registry import MODEL_NAMES, SIZES, build_from_spec, parse_name, resolve_spec
from .timm_registry import timm_name

FORMULATION_NOTE = (
    "These BSA and GRC formulas are this project's formulation of the principles in Abdullaev, Tkachenko & "
    "Nguyen, 'Revisiting Transformers with Insights from Image Filtering and Boosting' (arXiv:2506.10371); "
    "the paper's exact equations were not available, and every choice is a config field."
)


def formulas(config: Any) -> list[str]:
    """The equations a variant actually uses, with its current settings."""
    out = []
    if config.bsa:
        if config.pos_kernel == "gaussian":
            out.append(
                "BSA: logit_ij = q_i.k_j/sqrt(d_h) - ||p_i - p_j||^2 / (2 sigma_h^2), sigma_h = softplus(theta_h), "
                f"initialised over {config.bsa_sigma}; no additive positions; prefix tokens get b = 0."
            )
        else:
            out.append(
                "BSA (untied): logit_ij = q_i.k_j/sqrt(d_h) + (p_i U_Q^h).(p_j U_K^h)/sqrt(d_h); no additive positions."
            )
    else:
        out.append("attention: softmax(q_i.k_j/sqrt(d_h)) with additive learned positions x_i = e_i + p_i.")
    if config.grc:
        where = "attention and MLP" if config.grc_sublayers == "all" else "attention only"
        kind = "learnable per block (sigmoid)" if config.grc_learnable else "fixed"
        out.append(
            f"GRC: Y <- Y + F(LN(Y)) + lambda (Y_0 - Y) on {where}; lambda = {config.grc_lambda} ({kind}); "
            "Y_0 = input of the first block."
        )
    else:
        out.append("residual: Y <- Y + F(LN(Y)) (stock pre-norm).")
    return out


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
    return rows


def show(name: str, size: str = "micro") -> dict[str, Any]:
    spec = resolve_spec(name, size)
    model = build_from_spec(spec)
    return {
        "name": name,
        "family": spec.family.value,
        "size": size,
        "config": spec.config_dict(),
        "num_params": sum(p.numel() for p in model.parameters()),
        "formulas": formulas(spec.config),
        "note": FORMULATION_NOTE,
        "zoo": zoo_entry(name, size),
        "timm": timm_name(name, size) if spec.family is Family.IMAGE else None,
        "zoo_noise": noise_zoo(name, size),
    }
