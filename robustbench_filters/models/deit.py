"""DeiT variants built by timm: plain, BSA, GRC and both.

No fork of ``VisionTransformer``: BSA enters through timm's ``attn_layer``; GRC replaces ``model.blocks`` with a
:class:`~robustbench_filters.models.grc.BlockStack`. The plain ``deit`` at size ``tiny`` is timm's
``deit_tiny_patch16_224`` exactly (same keys, same logits on normalised input).
"""

from __future__ import annotations

import types

import timm
import torch
from torch import nn

from ..core.errors import RobfiltError
from ..data.preprocess import InputSpec
from .bsa import BilateralAttention, PosKernel, bsa_layer
from .config import FASHION_MNIST_MEAN, FASHION_MNIST_STD, DeiTConfig
from .grc import BlockStack
from .normalize import attach_normalizer

# size -> DeiTConfig fields. micro: Fashion-MNIST (28x28 grey, 10 classes), 7x7 grid of 4x4 patches.
DEIT_SIZES: dict[str, dict] = {
    "micro": dict(
        timm_arch="deit_tiny_patch16_224",
        img_size=28,
        patch_size=4,
        in_chans=1,
        num_classes=10,
        embed_dim=64,
        depth=4,
        num_heads=4,
        mlp_ratio=4.0,
        mean=FASHION_MNIST_MEAN,
        std=FASHION_MNIST_STD,
    ),
    "tiny": dict(timm_arch="deit_tiny_patch16_224", embed_dim=192, depth=12, num_heads=3),
    "small": dict(timm_arch="deit_small_patch16_224", embed_dim=384, depth=12, num_heads=6),
    "base": dict(timm_arch="deit_base_patch16_224", embed_dim=768, depth=12, num_heads=12),
}


def _prefix_only_pos_embed(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``_pos_embed`` for untied BSA: concat prefix tokens, add no positions (they enter the attention bias)."""
    to_cat = []
    if self.cls_token is not None:
        to_cat.append(self.cls_token.expand(x.shape[0], -1, -1))
    if self.reg_token is not None:
        to_cat.append(self.reg_token.expand(x.shape[0], -1, -1))
    x = x.view(x.shape[0], -1, x.shape[-1])
    return self.pos_drop(torch.cat([*to_cat, x], dim=1))


def _grc_set_grad_checkpointing(self: nn.Module, enable: bool = True) -> None:
    """GRC models refuse timm's gradient checkpointing: ``checkpoint_seq`` iterates the blocks one by one and would
    skip :class:`BlockStack` (and with it the boosting term), silently computing the stock model."""
    if enable:
        raise RobfiltError("gradient checkpointing is not supported for GRC models (timm's would skip the boosting).")


def _grc_forward_intermediates(self: nn.Module, *args, **kwargs):
    """GRC models refuse timm's ``forward_intermediates``: it iterates the blocks and would skip the boosting."""
    raise RobfiltError("forward_intermediates is not supported for GRC models (timm's would skip the boosting).")


def input_spec(cfg: DeiTConfig) -> InputSpec:
    """The images a DeiT config takes: timm's eval crop of its arch at the arch's size, else a plain resize."""
    size = (cfg.img_size, cfg.img_size)
    timm_cfg = timm.models.get_pretrained_cfg(cfg.timm_arch)
    if timm_cfg is not None and tuple(timm_cfg.input_size[1:]) == size:
        spec = InputSpec.from_timm_cfg(timm_cfg)
        return InputSpec(cfg.in_chans, size, spec.interpolation, spec.crop_pct, spec.crop_mode)
    return InputSpec(cfg.in_chans, size, "bilinear", 1.0)


def build_deit(cfg: DeiTConfig, normalize: bool = True) -> nn.Module:
    """Build a DeiT variant from its config.

    With ``normalize`` (robfilt's convention) the model takes [0, 1] images; without it, normalised images
    (timm's convention, for the models registered in timm's registry).
    """
    kwargs = dict(
        pretrained=False,
        img_size=cfg.img_size,
        patch_size=cfg.patch_size,
        in_chans=cfg.in_chans,
        num_classes=cfg.num_classes,
        embed_dim=cfg.embed_dim,
        depth=cfg.depth,
        num_heads=cfg.num_heads,
        mlp_ratio=cfg.mlp_ratio,
        drop_path_rate=cfg.drop_path_rate,
    )
    if cfg.bsa:
        kwargs["attn_layer"] = bsa_layer(cfg.pos_kernel, cfg.bsa_sigma)
        if cfg.pos_kernel == PosKernel.GAUSSIAN.value:
            kwargs["pos_embed"] = "none"  # positions live only in the attention bias
    model = timm.create_model(cfg.timm_arch, **kwargs)
    if cfg.bsa:
        untied = cfg.pos_kernel == PosKernel.UNTIED.value
        if untied:
            model._pos_embed = types.MethodType(_prefix_only_pos_embed, model)
        for module in model.modules():
            if isinstance(module, BilateralAttention):
                module.configure(
                    grid=tuple(model.patch_embed.grid_size),
                    num_prefix_tokens=model.num_prefix_tokens,
                    pos_owner=model if untied else None,
                )
    if cfg.grc:
        model.blocks = BlockStack(
            list(model.blocks),
            grc=True,
            grc_lambda=cfg.grc_lambda,
            grc_learnable=cfg.grc_learnable,
            grc_sublayers=cfg.grc_sublayers,
        )
        # timm code paths that iterate model.blocks instead of calling it would bypass GRC: make them fail loudly.
        model.set_grad_checkpointing = types.MethodType(_grc_set_grad_checkpointing, model)
        model.forward_intermediates = types.MethodType(_grc_forward_intermediates, model)
    if normalize:
        attach_normalizer(model, cfg.mean, cfg.std)
    model.robfilt_input = input_spec(cfg)
    set_fused_attn(model, cfg.fused_attn)
    return model


def set_fused_attn(model: nn.Module, enabled: bool) -> nn.Module:
    """Switch every attention layer between fused SDPA and the manual path (needed for jvp/double backward)."""
    for module in model.modules():
        if hasattr(module, "fused_attn") and hasattr(module, "qkv"):
            module.fused_attn = bool(enabled)
    return model
