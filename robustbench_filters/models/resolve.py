"""Resolve a ``--model`` reference into a ready-to-evaluate module.

Three kinds of references:
- a registry name (``deit-grc``): zoo weights by default, or ``--checkpoint PATH`` / ``none`` (untrained);
- ``timm:<arch>`` (e.g. ``timm:deit_small_patch16_224``): built by timm, normalisation from its pretrained
  config, weights from ``--checkpoint`` (safetensors state dict);
- ``pkg.module:factory``: a Python callable returning an ``nn.Module`` that takes [0, 1] images.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from ..errors import CheckpointError, RobfiltError
from .checkpoint import is_zoo_ref
from .factory import create_model
from .registry import MODEL_NAMES, parse_name


@dataclass
class LoadedModel:
    label: str  # the name shown in tables and stored in rows
    family: str  # deit | lm | timm | custom
    module: nn.Module
    source: str  # where the weights came from


def _load_timm(arch: str, checkpoint: str | None) -> nn.Module:
    import safetensors.torch
    import timm

    from .normalize import attach_normalizer

    if arch not in timm.list_models():
        raise RobfiltError(f"unknown timm model {arch!r}; see timm.list_models() for names.")
    model = timm.create_model(arch, pretrained=False)
    cfg = model.pretrained_cfg
    attach_normalizer(model, cfg.get("mean", (0.485, 0.456, 0.406)), cfg.get("std", (0.229, 0.224, 0.225)))
    if checkpoint in (None, "none"):
        return model.eval()
    path = Path(checkpoint)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist.")
    if path.suffix != ".safetensors":
        raise CheckpointError(f"{path}: timm weights must be a .safetensors state dict (pickles are refused).")
    state = safetensors.torch.load_file(str(path))
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise CheckpointError(
            f"{path} does not fit timm:{arch}: missing {result.missing_keys[:5]}, unexpected {result.unexpected_keys[:5]}."
        )
    return model.eval()


def _load_factory(ref: str) -> nn.Module:
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RobfiltError(f"cannot import {module_name!r} for --model {ref!r} ({exc}); check PYTHONPATH.") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise RobfiltError(f"{module_name} has no callable {attr!r}; --model takes 'pkg.module:factory'.")
    model = factory()
    if not isinstance(model, nn.Module):
        raise RobfiltError(f"{ref} returned {type(model).__name__}, not an nn.Module.")
    return model.eval()


def validate_model_ref(ref: str) -> str:
    """Check a reference's syntax (and registry name) without loading anything; returns its family."""
    if ref.startswith("timm:"):
        return "timm"
    if ":" in ref:
        return "custom"
    family, _, _ = parse_name(ref)
    return family.value


def load_model(
    ref: str, size: str = "micro", checkpoint: str | None = "zoo", seed: int = 0, allow_pickle: bool = False
) -> LoadedModel:
    """Load one model reference for evaluation, in eval mode."""
    if ref.startswith("timm:"):
        return LoadedModel(ref, "timm", _load_timm(ref[5:], checkpoint), str(checkpoint))
    if ":" in ref:
        return LoadedModel(ref, "custom", _load_factory(ref), ref)
    if ref not in MODEL_NAMES:
        parse_name(ref)  # raises with suggestions
    if checkpoint in (None, "none"):
        import torch

        torch.manual_seed(seed)
        return LoadedModel(ref, parse_name(ref)[0].value, create_model(ref, size), "untrained")
    if allow_pickle and not is_zoo_ref(checkpoint):
        from .checkpoint import load_checkpoint

        module = load_checkpoint(checkpoint, name=ref, size=size, allow_pickle=True)
    else:
        module = create_model(ref, size, checkpoint=checkpoint)
    return LoadedModel(ref, parse_name(ref)[0].value, module, str(checkpoint))
