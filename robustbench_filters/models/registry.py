"""Model names, sizes and the one factory every command uses.

Names are ``<family>[-bsa][-grc]`` with family ``deit`` (timm DeiT) or ``lm`` (GPT-style LM). Sizes: ``micro``
for the bundled data, plus timm's ``tiny``/``small``/``base`` for DeiT and ``small`` for the LM.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ..core.errors import RobfiltError, unknown
from ..core.family import Family
from ..core.names import MODEL_NAMES as MODEL_NAMES  # re-exported: the registry's names are the vocabulary's
from ..core.names import PREFIX as PREFIX
from ..core.names import parse_name as parse_name
from .built import Built, remember
from .built import ModelSpec as ModelSpec  # re-exported: what a registry name resolves to
from .config import DeiTConfig, LMConfig, apply_overrides
from .deit import DEIT_SIZES, build_deit
from .lm import LM_SIZES, CausalLM

SIZES: dict[Family, tuple[str, ...]] = {Family.IMAGE: tuple(DEIT_SIZES), Family.LM: tuple(LM_SIZES)}


def resolve_spec(name: str, size: str = "micro", **overrides: Any) -> ModelSpec:
    """Validate name, size and overrides into a :class:`ModelSpec` without building anything."""
    family, bsa, grc = parse_name(name)
    if size not in SIZES[family]:
        raise unknown(f"size for {name}", size, SIZES[family])
    if family is Family.IMAGE:
        base = DeiTConfig(**DEIT_SIZES[size], bsa=bsa, grc=grc)
    else:
        base = LMConfig(**LM_SIZES[size], bsa=bsa, grc=grc)
    if "bsa" in overrides or "grc" in overrides:
        raise RobfiltError("bsa/grc are set by the model name; pick e.g. 'deit-bsa-grc' instead of overriding them.")
    return ModelSpec(name=name, family=family, size=size, config=apply_overrides(base, overrides))


def build_from_spec(spec: ModelSpec) -> nn.Module:
    """Construct an untrained model for ``spec`` (recorded beside it: :mod:`.built`)."""
    model = build_deit(spec.config) if spec.family is Family.IMAGE else CausalLM(spec.config)
    return remember(model, Built(spec))


def list_models() -> list[str]:
    """All registered model names."""
    return list(MODEL_NAMES)
