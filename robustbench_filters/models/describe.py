"""Human- and machine-readable descriptions of the model variants (``robfilt models show``; ``models list`` is
:func:`robustbench_filters.models.zoo_index.list_table`, which never builds a model)."""

from __future__ import annotations

from typing import Any

from ..core.errors import RobfiltError
from ..core.family import Family
from ..core.names import ZOO_MODEL_SIZE, ZOO_MODELS, architecture
from ..core.surface import flag
from .registry import build_from_spec, resolve_spec
from .timm_registry import timm_name
from .zoo_index import list_table as list_table  # re-exported: `models list` reads cards only (no torch)
from .zoo_index import noise_zoo, zoo_entry

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


def show(name: str, size: str = "micro") -> dict[str, Any]:
    """A variant's (or a zoo model's: its architecture's) config, parameter count, formulas and zoo weights."""
    zoo_model = ZOO_MODELS.get(name)
    if zoo_model is not None and size != ZOO_MODEL_SIZE:
        raise RobfiltError(f"{name} exists at size {ZOO_MODEL_SIZE} only; drop {flag('size')} {size}.")
    arch = architecture(name)
    spec = resolve_spec(arch, size)
    model = build_from_spec(spec)
    info = {
        "name": name,
        "family": spec.family.value,
        "size": size,
        "config": spec.config_dict(),
        "num_params": sum(p.numel() for p in model.parameters()),
        "formulas": formulas(spec.config),
        "note": FORMULATION_NOTE,
        "zoo": zoo_entry(name, size),
        "timm": timm_name(arch, size) if spec.family is Family.IMAGE and zoo_model is None else None,
        "zoo_noise": noise_zoo(name, size) if zoo_model is None else {},
    }
    if zoo_model is not None:
        info |= {"architecture": arch, "training": zoo_model[1]}
    return info
