"""How a robfilt-built model reaches a worker process: as its spec and its weights, rebuilt there.

Runs that hold models as Python objects (the study's checkpoints, a model given to the API) are sent to worker
processes by pickling (:mod:`..core.workers`). A robfilt model does not pickle as it is: BSA's attention class is
made per configuration (:func:`.bsa.bsa_layer`), and GRC models carry bound methods that refuse timm's block-wise
code paths. robfilt records what every model it built is (:mod:`.built`: spec, card, tokenizer), so such a model
travels as that record, its state dict and its plain attributes, and the worker builds the same network (tied
weights tied), copies the same values into it and records it as the original was. The run's fingerprint hashes every parameter and buffer on every rank, so a
model that came out different would be refused by name, never measured.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import torch
from torch import nn

from .built import Built, built_of, remember
from .registry import build_from_spec

_SKIP = (types.MethodType, types.FunctionType, functools.partial)


def reduce_module(obj: Any) -> tuple[Any, tuple[Any, ...]] | None:
    """A pickle reduction of a robfilt-built model (None for anything else, which pickles as usual)."""
    record = built_of(obj) if isinstance(obj, nn.Module) else None
    if record is None:
        return None
    with torch.device("meta"):  # the network the spec builds, without its memory: is it this one?
        twin = build_from_spec(record.spec)
    if type(twin) is not type(obj) or twin.state_dict().keys() != obj.state_dict().keys():
        return None  # built another way (timm's registry takes normalised images): it pickles as it is, or not
    frozen = tuple(name for name, p in obj.named_parameters() if not p.requires_grad)
    extras = {k: v for k, v in vars(obj).items() if not k.startswith("_") and k != "training"
              and not isinstance(v, _SKIP)}  # fmt: skip
    return rebuild_module, (record, obj.state_dict(keep_vars=False), obj.training, frozen, extras)


def rebuild_module(
    built: Built, state: dict[str, Any], training: bool, frozen: tuple[str, ...], extras: dict[str, Any]
) -> nn.Module:
    """The model :func:`reduce_module` described: built from its spec, with its very tensors and attributes, and
    known as the original was (its card and tokenizer too)."""
    model = build_from_spec(built.spec)
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
    return remember(model, built)


__all__ = ["rebuild_module", "reduce_module"]
