"""Typed run configs: what each kind of run measures, with its defaults and its validation in one place.

One frozen dataclass per kind of run: :class:`ImageAttackConfig`, :class:`LMAttackConfig`,
:class:`CorruptionConfig`, :class:`LipschitzConfig`, :class:`CertifyConfig` and :class:`VerifiedConfig`. The command line, ``robustness.toml`` specs, the study
plan and the Python API all build these, so a default or a rule cannot drift between them. Validation runs in
``__post_init__``: a config that exists is valid, and it is checked before any model is loaded or any folder is
written. An option that does not apply to a kind of run is refused by :func:`build` (never silently dropped).

Lists refuse repeated values (eps, rates, severities, models, attacks): a repeated value would count every
example twice and make intervals too narrow, and guessing which copy was meant would hide a typo.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.errors import RobfiltError
from ..core.family import Family
from ..core.names import AMP_DTYPES, BOUND_METHODS, CERTIFY_METHODS, CORRUPTION, SMOOTHING, WORDSWAP
from ..core.surface import Surface, current_surface, flag, given
from .attacks import CorruptionConfig, ImageAttackConfig, LMAttackConfig
from .base import (
    CONTAMINATIONS,
    DEFAULT_EPS,
    DEFAULT_LM_EPS,
    DEFAULT_LM_SEQUENCES,
    DEVICES,
    ModelLike,
    RunConfig,
    check_model_object,
    data_label,
    default_eps,
    model_family,
    model_label,
)
from .bounds import CertifyConfig, LipschitzConfig
from .options import REGISTRY, Option, declared_fields, internal_reason, read
from .verified import CertifyMethod, VerifiedConfig


def build(cls: type[RunConfig], options: Mapping[str, Any]) -> RunConfig:
    """Build a config from the options a user actually gave (already :func:`read`); one that does not apply to this
    kind of run is refused in one line, named as the current surface spells it, never silently dropped."""
    fields = set(cls.options())
    for name in options:
        if name not in fields:
            fix = "remove the key" if current_surface() is Surface.SPEC else "drop it"
            raise RobfiltError(f"{flag(name)} does not apply to {cls.DESCRIPTION} runs; {fix}.")
    return cls(**options)


def attack_config_class(
    models: Sequence[ModelLike], attacks: Sequence[str], base_dir: str | None = None
) -> type[RunConfig]:
    """Which kind of attack run ``models`` x ``attacks`` is: image, language model or corruption (factory files
    relative to ``base_dir`` too, a spec's folder)."""
    for i, m in enumerate(models):  # a function or a class is named as such, not looked up as a model name
        check_model_object(m, i)
    families = {model_family(m, base_dir) for m in models} or {Family.IMAGE}
    if len(families) > 1:
        raise RobfiltError("cannot mix image and language models in one run; run them separately.")
    if families == {Family.LM}:
        return LMAttackConfig
    if any(a == CORRUPTION or str(a).startswith(f"{CORRUPTION}:") for a in attacks):
        return CorruptionConfig
    return ImageAttackConfig


def certify_config_class(options: Mapping[str, Any]) -> type[CertifyMethod]:
    """Which kind of certify run the options ask for (``method``; default smoothing), with an option of the other
    kind refused in one line (before the config is built)."""
    method = options.get("method") or SMOOTHING
    if not isinstance(method, str) or method not in CERTIFY_METHODS:
        raise RobfiltError(
            f"{flag('method')} must be one of {', '.join(CERTIFY_METHODS)}, got {method!r}; e.g. {given('method', 'crown')}."
        )
    cls, other = (CertifyConfig, VerifiedConfig) if method == SMOOTHING else (VerifiedConfig, CertifyConfig)
    own = set(cls.options())
    for name in options:
        if name not in own and name in set(other.options()):
            m = flag("method")
            what = (
                f"randomized smoothing ({m} smoothing)" if other is CertifyConfig else f"{m} {'/'.join(BOUND_METHODS)}"
            )
            raise RobfiltError(f"{flag(name)} is an option of {what}, not of {m} {method}; drop it.")
    return cls


__all__ = [
    "AMP_DTYPES",
    "CONTAMINATIONS",
    "CORRUPTION",
    "CertifyConfig",
    "CertifyMethod",
    "CorruptionConfig",
    "DEFAULT_EPS",
    "DEFAULT_LM_EPS",
    "DEFAULT_LM_SEQUENCES",
    "DEVICES",
    "Option",
    "REGISTRY",
    "ImageAttackConfig",
    "LMAttackConfig",
    "LipschitzConfig",
    "ModelLike",
    "RunConfig",
    "VerifiedConfig",
    "WORDSWAP",
    "attack_config_class",
    "build",
    "certify_config_class",
    "data_label",
    "declared_fields",
    "default_eps",
    "internal_reason",
    "model_family",
    "model_label",
    "read",
]
