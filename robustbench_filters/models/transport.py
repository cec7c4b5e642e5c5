"""How a robfilt-built model reaches a worker process: as its spec and its weights, rebuilt there.

Runs that hold models as Python objects (the study's checkpoints, a model given to the API) are sent to worker
processes by pickling (:mod:`..core.workers`). A robfilt model does not pickle as it is: BSA's attention class is
made per configuration (:func:`.bsa.bsa_layer`), and GRC models carry bound methods that refuse timm's block-wise
code paths. Every such model records what it is (``robfilt_spec``), so it travels as that spec, its state dict
and its plain attributes (the card, the tokenizer), and the worker builds the same network (tied weights tied)
and copies the same values into it. The run's fingerprint hashes every parameter and buffer on every rank, so a
model that came out different would be refused by name, never measured.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import torch
from torch import nn

from .registry import ModelSpec, build_from_spec

_SKIP = (types.MethodType, types.FunctionType, functools.partial)


def reduce_module(obj: Any) -> tuple[Any, tuple[Any, ...]] | None:
    """A pickle reduction of a robfilt-built model (None for anything else, which pickles as usual)."""
    spec = getattr(obj, "robfilt_spec", None) if isinstance(obj, nn.Module) else None
    if not isinstance(spec, ModelSpec):
        return None
    with torch.device("meta"):  # the network the spec builds, without its memory: is it this one?
        built = build_from_spec(spec)
    if type(built) is not type(obj) or built.state_dict().keys() != obj.state_dict().keys():
        return None  # built another way (timm's registry takes normalised images): it pickles as it is, or not
    frozen = tuple(name for name, p in obj.named_parameters() if not p.requires_grad)
    extras = {k: v for k, v in vars(obj).items() if not k.startswith("_") and k not in ("training", "robfilt_spec")
              and not isinstance(v, _SKIP)}  # fmt: skip
    return rebuild_module, (spec, obj.state_dict(keep_vars=False), obj.training, frozen, extras)


def rebuild_module(
    spec: ModelSpec, state: dict[str, Any], training: bool, frozen: tuple[str, ...], extras: dict[str, Any]
) -> nn.Module:
    """The model :func:`reduce_module` described: built from its spec, with its very tensors and attributes."""
    model = build_from_spec(spec)
    dtypes = {t.dtype for t in state.values() if torch.is_tensor(t) and t.is_floating_point()}
    if len(dtypes) == 1:  # a model converted as a whole (bf16 weights): convert the build the same way
        model.to(dtype=dtypes.pop())
    model.load_state_dict(state, strict=True)  # copies into the build's tensors: tied weights stay tied
    model.train(training)
    for name, p in model.named_parameters():
        p.requires_grad_(name not in frozen)
    for key, value in extras.items():
        if key not in vars(model):  # what the build sets (its input spec, its guards) stays the build's
            setattr(model, key, value)
    return model


__all__ = ["rebuild_module", "reduce_module"]
