"""robustbench_filters: does an architectural idea really make a transformer more robust?

Public API (stable): ``create_model``, ``list_models``, ``evaluate``, ``benchmark``, ``attack`` (adversarial
examples from tensors), ``load_adversarial`` (those a run saved), ``certify``, ``estimate_lipschitz``, the error
every bad input raises (``RobfiltError``; it and its subclasses also in ``robustbench_filters.errors``) and the run
configs (``ImageAttackConfig``, ``LMAttackConfig``, ``CorruptionConfig``, ``LipschitzConfig``, ``CertifyConfig``).
Names are imported on first use, so ``import robustbench_filters`` (and ``robfilt --help``) does not load torch; the
BSA/GRC DeiTs are registered with timm when timm is imported.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from .core.versions import __version__
from .models.timm_hook import install as _register_with_timm

logging.getLogger(__name__).addHandler(logging.NullHandler())
_register_with_timm()  # the BSA/GRC DeiTs join timm's registry as soon as timm is imported (see timm_hook)

_LAZY: dict[str, str] = {
    "create_model": ".models",
    "list_models": ".models",
    "load_checkpoint": ".models",
    "load_model": ".models.loading",
    "save_checkpoint": ".models",
    "evaluate": ".api.evaluate",
    "attack": ".api.attack",
    "load_adversarial": ".runs.folder",
    "benchmark": ".api.benchmark",
    "BenchmarkResult": ".api.benchmark",
    "LMBenchmarkResult": ".api.benchmark",
    "evaluate_perplexity": ".models.hf.perplexity",
    "estimate_lipschitz": ".api.evaluate",
    "certify": ".api.evaluate",
    "CertifyConfig": ".configs",
    "RunResult": ".api.evaluate",
    "LipschitzResult": ".api.evaluate",
    "ImageAttackConfig": ".configs",
    "LMAttackConfig": ".configs",
    "CorruptionConfig": ".configs",
    "LipschitzConfig": ".configs",
    "Family": ".core.family",
    "RobfiltError": ".errors",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = ["__version__", *_LAZY]
