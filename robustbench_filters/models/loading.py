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

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..core.errors import RobfiltError
from ..core.io import expand_user
from ..core.names import ZOO_MODELS
from ..core.surface import flag, given
from ..data.preprocess import InputSpec, input_spec_of
from .built import Built, built_of, tokenizer_of
from .checkpoint import CARD, is_zoo_ref
from .factory import UNTRAINED, create_model, wants_untrained
from .ref import ModelKind, ModelRef, apply_model_args, parse_model_ref
from .registry import ModelSpec, parse_name

DEFAULT_CHECKPOINTS = (None, "none", "zoo")


@dataclass
class LoadedModel:
    """A model ready to evaluate, with what robfilt knows of it beside it (never as attributes on the module)."""

    label: str  # the name shown in tables and stored in rows
    module: nn.Module
    source: str  # where the weights came from
    input: InputSpec | None = None  # how its images must be prepared (None: the model does not say)
    ref: ModelRef | None = None  # the parsed reference it was built from (None: a module given in Python)
    built: Built | None = None  # robfilt's own models: spec, checkpoint card, tokenizer

    @classmethod
    def given(cls, module: nn.Module, label: str) -> LoadedModel:
        """A module given in Python, used as it is (``module`` as its weights' source)."""
        return cls(label, module.eval(), "module", input_spec_of(module), None, built_of(module))

    @property
    def spec(self) -> ModelSpec | None:
        return self.built.spec if self.built is not None else None

    @property
    def card(self) -> dict[str, Any] | None:
        return self.built.card if self.built is not None else None

    @property
    def tokenizer(self) -> Any:
        """The tokenizer its weights were trained with (language models; None when robfilt knows of none)."""
        return tokenizer_of(self.module)


@dataclass(frozen=True)
class Loading:
    """How model references are built and where their weights come from: the model options of a run config
    (:meth:`of`), or of a direct :func:`load_model` call.

    ``checkpoint``: ``"zoo"`` (the default weights of the kind: zoo for registry names, the factory's own),
    ``"none"``/None (untrained, seeded by ``seed``) or a path. ``base_dir`` is where relative factory paths and
    dotted factory modules are looked up (default: the working directory; for a spec, the spec's folder).
    ``model_args`` (e.g. from ``--model-arg``) override every reference's own arguments. The defaults are a run
    config's (:class:`robustbench_filters.configs.RunConfig`; a test holds them equal).
    """

    size: str = "micro"
    checkpoint: str | Path | None = "zoo"
    seed: int = 0
    allow_pickle: bool = False
    base_dir: str | Path | None = None
    model_args: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, config: Any) -> Loading:
        """The model options of a run config (its ``--model-arg`` pairs parsed)."""
        return cls(config.size, config.checkpoint, int(config.seed), bool(config.allow_pickle), config.base_dir,
                   config.parsed_model_args)  # fmt: skip


def _registry(ref: ModelRef, how: Loading) -> tuple[nn.Module, str]:
    checkpoint, allow_pickle = how.checkpoint, how.allow_pickle
    overrides = dict(ref.args)
    size = str(overrides.pop("size", how.size))
    name = ref.target
    if name in ZOO_MODELS:
        return create_model(name, size, checkpoint=checkpoint, **overrides), "zoo"
    parse_name(name)  # raises with suggestions
    if wants_untrained(checkpoint):
        torch.manual_seed(how.seed)
        return create_model(name, size, checkpoint=UNTRAINED, **overrides), "untrained"
    path = expand_user(str(checkpoint))
    if not is_zoo_ref(checkpoint) and path.is_file() and not (path.parent / CARD).exists():
        # a plain state dict (e.g. trained with timm under the registered name): build from the reference, load it
        from .weights import load_weights

        model = create_model(name, size, checkpoint=UNTRAINED, **overrides)
        return load_weights(model, path, ref.label, allow_pickle).eval(), str(checkpoint)
    if allow_pickle and not is_zoo_ref(checkpoint):
        from .checkpoint import load_checkpoint

        return load_checkpoint(checkpoint, name=name, size=size, allow_pickle=True, **overrides), str(checkpoint)
    return create_model(name, size, checkpoint=checkpoint, **overrides), str(checkpoint)


def _timm(ref: ModelRef, how: Loading) -> tuple[nn.Module, str]:
    from .timm_models import build_timm
    from .timm_registry import REGISTERED

    checkpoint, seed = how.checkpoint, how.seed
    if checkpoint == "zoo":
        if ref.target not in REGISTERED:
            raise RobfiltError(
                f"timm:{ref.target} has no zoo weights; pass {given('checkpoint', 'FILE.safetensors')}, or {given('checkpoint', 'none')} "
                "for seeded random weights (robfilt never downloads timm weights)."
            )
        return build_timm(ref, seed, pretrained=True), "zoo"
    model = build_timm(ref, seed)
    if wants_untrained(checkpoint):
        return model, f"random init (seed {seed})"
    from .weights import load_weights

    return load_weights(model, checkpoint, ref.label, how.allow_pickle).eval(), str(checkpoint)


def _factory(ref: ModelRef, how: Loading) -> tuple[nn.Module, str]:
    from .user_factory import build_factory

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(how.seed)
        model = build_factory(ref, how.base_dir)
    if how.checkpoint in DEFAULT_CHECKPOINTS or wants_untrained(how.checkpoint):
        return model.eval(), "factory"  # the factory's own weights: nothing to load
    from .weights import load_weights

    return load_weights(model, how.checkpoint, ref.label, how.allow_pickle).eval(), str(how.checkpoint)


def _hf(ref: ModelRef, how: Loading) -> tuple[nn.Module, str]:
    from .hf.load import load_hf

    if how.checkpoint not in DEFAULT_CHECKPOINTS and not wants_untrained(how.checkpoint):
        raise RobfiltError(
            f"{flag('checkpoint')} does not apply to {ref.label}: the hf: folder holds its weights; drop it."
        )
    module = load_hf(ref.target, label=ref.label, base_dir=how.base_dir, conversion=ref.args)
    return module, f"hf:{ref.target}"


def load_model(ref: str | ModelRef, how: Loading | None = None, **options: Any) -> LoadedModel:
    """Load one model reference for evaluation, in eval mode.

    ``how`` holds the model options (:class:`Loading`: size, checkpoint, seed, allow_pickle, base_dir,
    model_args); keyword ``options`` set or override single ones (``load_model(ref, checkpoint="none", seed=7)``).
    ``checkpoint``: ``"zoo"`` (the default, as on the command line; None means the same: default weights of the
    kind, zoo for registry models, the factory's own), ``"none"`` (untrained, seeded by ``seed``: only on this
    explicit request) or a path.
    """
    how = dataclasses.replace(how or Loading(), **options)
    if how.checkpoint is None:
        how = dataclasses.replace(how, checkpoint="zoo")
    mref = apply_model_args(parse_model_ref(ref), how.model_args)
    build = {ModelKind.TIMM: _timm, ModelKind.FACTORY: _factory, ModelKind.HF: _hf}.get(mref.kind, _registry)
    module, source = build(mref, how)
    return LoadedModel(mref.label, module, source, input_spec_of(module), mref, built_of(module))
