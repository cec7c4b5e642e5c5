"""What robfilt knows of a module it built: its spec (:class:`ModelSpec`), the card of the checkpoint it came from,
its tokenizer.

The record is kept beside the module, in a table keyed weakly by the module, not as attributes on it: a module is
the user's object (attributes added to it travel into their code, their ``state_dict`` and their pickles), and an
attribute read back with ``getattr`` hides where it was set. The builders record (:func:`remember`), and the few
places that meet a module without its :class:`~.loading.LoadedModel` ask (:func:`built_of`): a module passed
to the Python API (``evaluate(create_model("deit-grc"))`` keeps its name), or saved with :func:`.checkpoint.save_checkpoint`.

A copy of a module is another object: :func:`copied` deep-copies a module and its record together.
"""

from __future__ import annotations

import copy
import dataclasses
import weakref
from dataclasses import dataclass, replace
from typing import Any

from torch import nn

from ..core.family import Family


@dataclass(frozen=True)
class ModelSpec:
    """What a model is: its registry name, family, size and full config."""

    name: str
    family: Family
    size: str
    config: Any

    @property
    def bsa(self) -> bool:
        return bool(self.config.bsa)

    @property
    def grc(self) -> bool:
        return bool(self.config.grc)

    def config_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self.config)


@dataclass(frozen=True)
class Built:
    """A robfilt model's identity: ``spec`` (name, family, size, config), the checkpoint ``card`` it was loaded from
    (None: built untrained, or trained in this process), and, for language models, the ``tokenizer`` its weights
    were trained with."""

    spec: ModelSpec
    card: dict[str, Any] | None = None
    tokenizer: Any = None


_BUILT: weakref.WeakKeyDictionary[nn.Module, Built] = weakref.WeakKeyDictionary()


def remember(module: nn.Module, built: Built) -> nn.Module:
    """Record what ``module`` is; returns the module (for ``return remember(build(...), Built(spec))``)."""
    _BUILT[module] = built
    return module


def built_of(module: object) -> Built | None:
    """What robfilt built ``module`` as (None: a module robfilt did not build, or anything else)."""
    try:
        return _BUILT.get(module)  # type: ignore[arg-type]
    except TypeError:  # not weakly referenceable: not a module robfilt built
        return None


def with_card(module: nn.Module, card: dict[str, Any], tokenizer: Any = None) -> nn.Module:
    """Add the checkpoint ``card`` (and tokenizer) to the record of a module built from a spec."""
    built = built_of(module)
    if built is None:
        raise ValueError("with_card needs a module built by robfilt (build_from_spec)")
    return remember(module, replace(built, card=card, tokenizer=tokenizer))


def tokenizer_of(module: object) -> Any:
    """The tokenizer a language model reads text with: the one its checkpoint was saved with (robfilt's LMs), or a
    Hugging Face adapter's own; None when robfilt knows of none."""
    built = built_of(module)
    if built is not None and built.tokenizer is not None:
        return built.tokenizer
    from .hf.adapter import HFCausalLM

    return module.tokenizer if isinstance(module, HFCausalLM) else None


def copied(module: nn.Module) -> nn.Module:
    """A deep copy of ``module`` that robfilt knows as it knew the original."""
    twin = copy.deepcopy(module)
    built = built_of(module)
    if built is not None:
        remember(twin, built)
    return twin


__all__ = ["Built", "ModelSpec", "built_of", "copied", "remember", "tokenizer_of", "with_card"]
