"""Model variants: timm DeiT and a GPT-style LM, each with BSA, GRC, or both; and the user's own models.

Names are imported on first use, so the light parts (model references in :mod:`.ref`) serve the command line and
the run configs without torch. The DeiT variants join timm's registry whenever timm is imported after
``import robustbench_filters`` (``timm.create_model("deit_tiny_bsa_patch16_224")``; see
:mod:`robustbench_filters.models.timm_hook`). Loading any model reference (these, timm, factories, ``hf:``) is
:func:`robustbench_filters.models.loading.load_model`, above this package and :mod:`robustbench_filters.models.hf`.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the submodule that defines it
_LAZY: dict[str, str] = {
    **dict.fromkeys(
        ("BilateralAttention", "PosKernel", "attention", "attention_probs", "attention_weights", "bsa_layer"), ".bsa"
    ),
    **dict.fromkeys(("load_checkpoint", "save_checkpoint", "zoo_path"), ".checkpoint"),
    **dict.fromkeys(("DeiTConfig", "FilterConfig", "LMConfig"), ".config"),
    "set_fused_attn": ".deit",
    "create_model": ".factory",
    **dict.fromkeys(("BlockStack", "boost"), ".grc"),
    "CausalLM": ".lm",
    "attach_normalizer": ".normalize",
    **dict.fromkeys(
        ("ModelKind", "ModelRef", "apply_model_args", "parse_model_args", "parse_model_ref", "split_model_list"),
        ".ref",
    ),
    **dict.fromkeys(("MODEL_NAMES", "SIZES", "ModelSpec", "list_models", "resolve_spec"), ".registry"),
    "model_kind": ".ref",
    "timm_name": ".timm_registry",
    **dict.fromkeys(("load_weights", "read_state_dict"), ".weights"),
}
_RENAMED: dict[str, tuple[str, str]] = {"TIMM_NAMES": (".timm_registry", "REGISTERED")}


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        module, attr = _RENAMED[name]
        return getattr(importlib.import_module(module, __name__), attr)
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY, *_RENAMED])


__all__ = sorted([*_LAZY, *_RENAMED])
