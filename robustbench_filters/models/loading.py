"""Resolve a model reference (``--model``) into a ready-to-evaluate module.

It sits above robfilt's own architectures, timm and factories (the rest of this package) and Hugging Face LMs
(:mod:`.hf`), and below every measurement. References (:mod:`.ref`): ``[name=]target[?key=value&...]`` with target

- a registry name (``deit-grc``): zoo weights by default, ``--checkpoint PATH`` (a robfilt checkpoint, or a plain
  state dict for the same architecture) or ``none`` (untrained); arguments are config fields plus ``size``;
- ``timm:<arch>``: any timm model, arguments to ``timm.create_model``; weights from ``--checkpoint`` (a
  safetensors state dict; torch files with ``--allow-pickle``), ``none`` for seeded random weights, or ``zoo``
  for robfilt's own registered DeiTs;
- ``path/to/file.py:factory`` or ``pkg.module:factory``: a callable returning an ``nn.Module`` that takes [0, 1]
  images, resolved against ``base_dir``; ``--checkpoint PATH`` loads a state dict into it;
- ``hf:<folder>``: a Hugging Face causal LM (``save_pretrained`` folder, or a hub id in the local cache), resolved
  against ``base_dir``, with its own weights and tokenizer (:mod:`robustbench_filters.models.hf.load`).

Every model comes back in eval mode with its :class:`~robustbench_filters.data.preprocess.InputSpec` when known.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..core.errors import RobfiltError
from ..data.preprocess import InputSpec, input_spec_of
from .checkpoint import CARD, is_zoo_ref
from .factory import UNTRAINED, create_model, wants_untrained
from .ref import ModelKind, ModelRef, apply_model_args, model_kind, parse_model_ref
from .registry import parse_name

DEFAULT_CHECKPOINTS = (None, "none", "zoo")


@dataclass
class LoadedModel:
    label: str  # the name shown in tables and stored in rows
    family: str  # image | lm (registry) | timm | custom
    module: nn.Module
    source: str  # where the weights came from
    input: InputSpec | None = None  # how its images must be prepared (None: the model does not say)
    ref: ModelRef | None = None  # the parsed reference it was built from


def validate_model_ref(ref: str | ModelRef) -> str:
    """:func:`.ref.model_kind`, with a timm architecture checked against timm's registry too."""
    kind = model_kind(ref)
    if kind == "timm":
        from .timm_models import check_timm_arch

        check_timm_arch(parse_model_ref(ref).target)
    mref = parse_model_ref(ref)
    if mref.kind is ModelKind.HF and mref.args:
        from .hf.convert import conversion_settings

        conversion_settings(mref.args, mref.label)
    return kind


def _registry(ref: ModelRef, size: str, checkpoint: Any, seed: int, allow_pickle: bool) -> tuple[nn.Module, str]:
    overrides = dict(ref.args)
    size = str(overrides.pop("size", size))
    name = ref.target
    parse_name(name)  # raises with suggestions
    if wants_untrained(checkpoint):
        torch.manual_seed(seed)
        return create_model(name, size, checkpoint=UNTRAINED, **overrides), "untrained"
    path = Path(str(checkpoint)).expanduser()
    if not is_zoo_ref(checkpoint) and path.is_file() and not (path.parent / CARD).exists():
        # a plain state dict (e.g. trained with timm under the registered name): build from the reference, load it
        from .weights import load_weights

        model = create_model(name, size, checkpoint=UNTRAINED, **overrides)
        return load_weights(model, path, ref.label, allow_pickle).eval(), str(checkpoint)
    if allow_pickle and not is_zoo_ref(checkpoint):
        from .checkpoint import load_checkpoint

        return load_checkpoint(checkpoint, name=name, size=size, allow_pickle=True, **overrides), str(checkpoint)
    return create_model(name, size, checkpoint=checkpoint, **overrides), str(checkpoint)


def _timm(ref: ModelRef, checkpoint: Any, seed: int, allow_pickle: bool) -> tuple[nn.Module, str]:
    from .timm_models import build_timm
    from .timm_registry import REGISTERED

    if checkpoint == "zoo":
        if ref.target not in REGISTERED:
            raise RobfiltError(
                f"timm:{ref.target} has no zoo weights; pass --checkpoint FILE.safetensors, or --checkpoint none "
                "for seeded random weights (robfilt never downloads timm weights)."
            )
        return build_timm(ref, seed, pretrained=True), "zoo"
    model = build_timm(ref, seed)
    if wants_untrained(checkpoint):
        return model, f"random init (seed {seed})"
    from .weights import load_weights

    return load_weights(model, checkpoint, ref.label, allow_pickle).eval(), str(checkpoint)


def _factory(
    ref: ModelRef, checkpoint: Any, seed: int, allow_pickle: bool, base_dir: str | Path | None
) -> tuple[nn.Module, str]:
    from .user_factory import build_factory

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_factory(ref, base_dir)
    if checkpoint in DEFAULT_CHECKPOINTS or wants_untrained(checkpoint):
        return model.eval(), "factory"  # the factory's own weights: nothing to load
    from .weights import load_weights

    return load_weights(model, checkpoint, ref.label, allow_pickle).eval(), str(checkpoint)


def _hf(ref: ModelRef, checkpoint: Any, base_dir: str | Path | None, **options: Any) -> tuple[nn.Module, str]:
    from .hf.load import load_hf

    if checkpoint not in DEFAULT_CHECKPOINTS and not wants_untrained(checkpoint):
        raise RobfiltError(f"--checkpoint does not apply to {ref.label}: the hf: folder holds its weights; drop it.")
    module = load_hf(ref.target, label=ref.label, base_dir=base_dir, conversion=ref.args, **options)
    return module, f"hf:{ref.target}"


def load_model(
    ref: str | ModelRef,
    size: str = "micro",
    checkpoint: str | Path | None = "zoo",
    seed: int = 0,
    allow_pickle: bool = False,
    base_dir: str | Path | None = None,
    model_args: Mapping[str, Any] | None = None,
) -> LoadedModel:
    """Load one model reference for evaluation, in eval mode.

    ``model_args`` (e.g. from ``--model-arg``) override the reference's own arguments. ``base_dir`` is where
    relative factory paths and dotted factory modules are looked up (default: the working directory; for a spec,
    pass the spec's folder). ``checkpoint``: ``"zoo"`` (the default, as on the command line; None means the same:
    default weights of the kind, zoo for registry models, the factory's own), ``"none"`` (untrained, seeded by
    ``seed``: only on this explicit request) or a path.
    """
    checkpoint = "zoo" if checkpoint is None else checkpoint
    mref = apply_model_args(parse_model_ref(ref), model_args)
    if mref.kind is ModelKind.TIMM:
        module, source = _timm(mref, checkpoint, seed, allow_pickle)
        family = "timm"
    elif mref.kind is ModelKind.FACTORY:
        module, source = _factory(mref, checkpoint, seed, allow_pickle, base_dir)
        family = "custom"
    elif mref.kind is ModelKind.HF:
        module, source = _hf(mref, checkpoint, base_dir)
        family = "lm"
    else:
        module, source = _registry(mref, size, checkpoint, seed, allow_pickle)
        family = parse_name(mref.target)[0].value
    return LoadedModel(mref.label, family, module, source, input_spec_of(module), mref)
