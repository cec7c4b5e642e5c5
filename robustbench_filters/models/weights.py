"""Plain weight files for timm and factory models: read a state dict, fit its keys, load it, or say why not.

A robfilt checkpoint (folder + card) knows its architecture; a user's ``resnet18_cifar.safetensors`` does not, so
the model is built from the reference's arguments and the file must fit it exactly. Formats: safetensors
(always), and torch files (``.pt/.pth/.bin/.ckpt``) only with ``allow_pickle``, read with
``torch.load(weights_only=True)`` (no code runs). Training scripts wrap state dicts in ``{"state_dict": ...}``
and prefix keys with ``module.`` (DataParallel/DDP), ``model.`` (Lightning) or ``_orig_mod.`` (torch.compile);
those wrappers are removed when the model itself has no such keys. A mismatch is one line with the first
missing, unexpected and wrongly shaped keys, and a hint at the argument that fixes it (``num_classes=10``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..core.errors import CheckpointError
from ..core.io import expand_user
from ..core.surface import switched
from .checkpoint import WEIGHTS, _is_pickle, refuse_non_utf8

log = logging.getLogger(__name__)

NESTING_KEYS = ("state_dict", "model_state_dict", "model", "module", "net", "weights")
PREFIXES = ("module.", "model.", "_orig_mod.", "net.")
SHOWN = 3  # mismatches named per kind


def weights_file(path: str | Path) -> Path:
    """The weights file of ``path``: the file itself, or ``model.safetensors`` inside a folder."""
    p = expand_user(path)
    refuse_non_utf8(p)
    if not p.exists():
        raise CheckpointError(
            f"checkpoint {p} does not exist; pass a .safetensors file (or a torch file with {switched('allow_pickle')})."
        )
    if p.is_dir():
        if not (p / WEIGHTS).is_file():
            raise CheckpointError(f"checkpoint folder {p} has no {WEIGHTS}; pass the weights file itself.")
        return p / WEIGHTS
    return p


def read_state_dict(path: str | Path, allow_pickle: bool = False) -> dict[str, torch.Tensor]:
    """The tensors of a weights file (safetensors, or a torch file with ``allow_pickle``), unwrapped."""
    import safetensors
    import safetensors.torch

    p = weights_file(path)
    if _is_pickle(p):
        if not allow_pickle:
            raise CheckpointError(
                f"{p} is a pickle/torch file; robfilt loads only safetensors (pickles can run code). Convert it "
                f"(safetensors.torch.save_file(state_dict, 'w.safetensors')) or opt in with {switched('allow_pickle')} (read weights_only)."
            )
        try:
            raw: Any = torch.load(p, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - torch raises many types for bad or unsafe files
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
            raise CheckpointError(f"cannot read torch file {p} with weights_only=True ({first}).") from None
    else:
        try:
            raw = safetensors.torch.load_file(str(p))
        except (safetensors.SafetensorError, OSError, RuntimeError, ValueError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
            raise CheckpointError(
                f"cannot read {p} as safetensors ({first}); it may be truncated or not a weights file."
            ) from None
    return unwrap_state_dict(raw, p)


def unwrap_state_dict(raw: Any, where: str | Path = "checkpoint") -> dict[str, torch.Tensor]:
    """A flat ``{key: tensor}`` from a state dict or a training checkpoint that nests one (``{"state_dict": ...}``)."""
    for _ in range(3):  # e.g. {"model": {"state_dict": {...}}}
        if not isinstance(raw, Mapping):
            break
        if raw and all(isinstance(v, torch.Tensor) for v in raw.values()):
            return {str(k): v for k, v in raw.items()}
        nested = next((raw[k] for k in NESTING_KEYS if isinstance(raw.get(k), Mapping)), None)
        if nested is None:
            tensors = {str(k): v for k, v in raw.items() if isinstance(v, torch.Tensor)}
            if tensors:  # tensors next to metadata such as {"epoch": 3}
                return tensors
            break
        raw = nested
    keys = sorted(map(str, raw))[:5] if isinstance(raw, Mapping) else type(raw).__name__
    raise CheckpointError(f"{where} holds no state dict of tensors (found {keys}); save model.state_dict().")


def strip_prefixes(state: dict[str, torch.Tensor], model_keys: set[str]) -> dict[str, torch.Tensor]:
    """Remove wrapper prefixes (``module.``, ``model.``, ...) shared by every key, unless the model uses them."""
    changed = True
    while changed and state:
        changed = False
        for prefix in PREFIXES:
            if all(k.startswith(prefix) for k in state) and not any(k.startswith(prefix) for k in model_keys):
                state = {k[len(prefix) :]: v for k, v in state.items()}
                log.info("stripped the %r prefix from the checkpoint's keys", prefix)
                changed = True
    return state


def _shape(t: torch.Tensor) -> str:
    return "x".join(map(str, t.shape)) or "scalar"


def _hints(model: nn.Module, shapes: list[tuple[str, torch.Tensor, torch.Tensor]]) -> list[str]:
    """Model arguments that would make the wrongly shaped keys fit (timm's classifier/first conv/positions)."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    classifier = cfg.get("classifier") or "head"
    classifiers = classifier if isinstance(classifier, list | tuple) else [classifier]
    first_conv = cfg.get("first_conv")
    hints: list[str] = []
    for key, got, want in shapes:
        if any(key.startswith(c + ".") for c in classifiers) and got.dim() >= 1 and got.shape[0] != want.shape[0]:
            hints.append(f"num_classes={got.shape[0]}")
        elif first_conv and key == f"{first_conv}.weight" and got.dim() == 4 and got.shape[1] != want.shape[1]:
            hints.append(f"in_chans={got.shape[1]}")
        elif key.endswith("pos_embed"):
            hints.append("img_size=<its training size>")
    return list(dict.fromkeys(hints))


def mismatch(model: nn.Module, state: Mapping[str, torch.Tensor]) -> str | None:
    """One line naming the first missing, unexpected and wrongly shaped keys, or None when ``state`` fits."""
    own = model.state_dict()
    missing = [k for k in own if k not in state and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in state if k not in own]
    shapes = [(k, state[k], own[k]) for k in own if k in state and state[k].shape != own[k].shape]
    if not (missing or unexpected or shapes):
        return None
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing ({', '.join(missing[:SHOWN])}{', ...' if len(missing) > SHOWN else ''})")
    if unexpected:
        more = ", ..." if len(unexpected) > SHOWN else ""
        parts.append(f"{len(unexpected)} unexpected ({', '.join(unexpected[:SHOWN])}{more})")
    if shapes:
        shown = ", ".join(f"{k}: file {_shape(g)} vs model {_shape(w)}" for k, g, w in shapes[:SHOWN])
        parts.append(f"{len(shapes)} of another shape ({shown}{', ...' if len(shapes) > SHOWN else ''})")
    hints = _hints(model, shapes)
    fix = (
        f"; the file looks like a model built with {' and '.join(hints)} (for timm: ?{'&'.join(hints)})"
        if hints
        else "; build the model the file was saved from"
    )
    return "; ".join(parts) + fix


def load_weights(model: nn.Module, path: str | Path, label: str, allow_pickle: bool = False) -> nn.Module:
    """Load a plain weights file into ``model`` (strict: every key and shape must fit), or one-line error."""
    p = weights_file(path)
    state = strip_prefixes(read_state_dict(p, allow_pickle), set(model.state_dict()))
    problem = mismatch(model, state)
    if problem:
        raise CheckpointError(f"{p} does not fit {label}: {problem}.")
    own = model.state_dict()
    for key in own:  # old checkpoints lack BatchNorm's counters: keep the model's
        if key.endswith("num_batches_tracked") and key not in state:
            state[key] = own[key]
    model.load_state_dict(state, strict=True)
    log.info("loaded %d tensors from %s into %s", len(state), p, label)
    return model
