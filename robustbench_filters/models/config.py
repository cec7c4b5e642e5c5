"""Model configs: one flat dataclass per family, so every field can be overridden by name.

``create_model("deit-grc", grc_lambda=0.0)`` works because BSA and GRC fields live next to the architecture
fields. Validation happens here, once, with messages that say how to fix the value.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import RobfiltError, suggest
from .bsa import PosKernel, initial_sigmas
from .grc import GrcSublayers, validate_lambda

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
FASHION_MNIST_MEAN = (0.2860,)
FASHION_MNIST_STD = (0.3530,)


@dataclass
class FilterConfig:
    """The two modifications. Defaults are the project's formulation (README, ``robfilt models show``)."""

    bsa: bool = False
    pos_kernel: str = "gaussian"  # gaussian | untied
    bsa_sigma: tuple[float, float] = (1.0, 8.0)  # initial per-head widths, spread geometrically
    grc: bool = False
    grc_lambda: float = 0.1  # in [0, 1); 0 is the stock residual
    grc_learnable: bool = False
    grc_sublayers: str = "all"  # all | attn

    def validate(self) -> None:
        try:
            self.pos_kernel = PosKernel(self.pos_kernel).value
        except ValueError:
            raise RobfiltError(f"unknown pos_kernel {self.pos_kernel!r}; use 'gaussian' or 'untied'.") from None
        try:
            self.grc_sublayers = GrcSublayers(self.grc_sublayers).value
        except ValueError:
            raise RobfiltError(f"unknown grc_sublayers {self.grc_sublayers!r}; use 'all' or 'attn'.") from None
        if len(tuple(self.bsa_sigma)) != 2:
            raise RobfiltError(f"bsa_sigma must be a (min, max) pair, got {self.bsa_sigma!r}.")
        self.bsa_sigma = tuple(float(s) for s in self.bsa_sigma)
        initial_sigmas(self.bsa_sigma, 1)
        self.grc_lambda = validate_lambda(self.grc_lambda)

    def _require_positive(self, *names: str) -> None:
        """The architecture sizes of a family (each family names its own), checked with one message shape."""
        for name in names:
            if int(getattr(self, name)) <= 0:
                raise RobfiltError(f"{name} must be a positive integer, got {getattr(self, name)}.")

    def _require_divisible(self, name: str, by: str, fix: str = "") -> None:
        """A width split evenly across heads or patches; ``fix`` says how when the field name alone does not."""
        value, divisor = getattr(self, name), getattr(self, by)
        if value % divisor:
            how = f"; {fix}." if fix else "."
            raise RobfiltError(f"{name} {value} is not divisible by {by} {divisor}{how}")


@dataclass
class DeiTConfig(FilterConfig):
    """A timm DeiT (VisionTransformer) plus BSA/GRC. ``timm_arch`` is the entrypoint the model is built from."""

    timm_arch: str = "deit_tiny_patch16_224"
    img_size: int = 224
    patch_size: int = 16
    in_chans: int = 3
    num_classes: int = 1000
    embed_dim: int = 192
    depth: int = 12
    num_heads: int = 3
    mlp_ratio: float = 4.0
    drop_path_rate: float = 0.0
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    fused_attn: bool = True

    def validate(self) -> None:
        super().validate()
        self._require_positive("img_size", "patch_size", "in_chans", "num_classes", "embed_dim", "depth", "num_heads")
        self._require_divisible("img_size", "patch_size", "pick an image size that is a multiple of the patch size")
        self._require_divisible("embed_dim", "num_heads")
        self.mean, self.std = tuple(self.mean), tuple(self.std)
        if len(self.mean) != self.in_chans or len(self.std) != self.in_chans:
            raise RobfiltError(f"mean/std need {self.in_chans} values (one per input channel).")
        if any(s <= 0 for s in self.std):
            raise RobfiltError("std values must be positive.")


@dataclass
class LMConfig(FilterConfig):
    """A GPT-style causal LM (nanoGPT layout built from timm blocks) plus BSA/GRC."""

    vocab_size: int = 128
    block_size: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    mlp_ratio: float = 4.0
    dropout: float = 0.0
    bias: bool = True
    fused_attn: bool = True
    bsa_sigma: tuple[float, float] = field(default=(2.0, 64.0))

    def validate(self) -> None:
        super().validate()
        self._require_positive("vocab_size", "block_size", "n_layer", "n_head", "n_embd")
        self._require_divisible("n_embd", "n_head")
        if not (0.0 <= self.dropout < 1.0) or math.isnan(self.dropout):
            raise RobfiltError(f"dropout must be in [0, 1), got {self.dropout}.")


def apply_overrides(config: Any, overrides: dict[str, Any]) -> Any:
    """Return a copy of ``config`` with ``overrides`` (None values ignored), validated."""
    names = {f.name for f in dataclasses.fields(config)}
    clean = {k: v for k, v in overrides.items() if v is not None}
    for key in clean:
        if key not in names:
            raise RobfiltError(f"unknown model option {key!r}.{suggest(key, names)}")
    config = dataclasses.replace(config, **clean)
    config.validate()
    return config


def config_from_dict(cls: type, data: dict[str, Any]) -> Any:
    """Rebuild a config from a card's JSON (lists back to tuples), rejecting unknown keys."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise RobfiltError(f"checkpoint card has unknown config keys {unknown}; was it written by a newer robfilt?")
    fixed = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    config = cls(**fixed)
    config.validate()
    return config
