"""CLS-token attention maps per layer, for comparing softmax attention with BSA on one image.

Fused attention never materialises the attention matrix, so each block's attention input (the output of its
``norm1``) is captured with a forward hook and the matrix is recomputed from the layer's own weights by
:func:`robustbench_filters.models.attention_probs`. The CLS row, averaged over heads and restricted to the patch
tokens, is reshaped to the patch grid (7 x 7 for the micro DeiT on 28 x 28 images).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..errors import RobfiltError
from ..models import attention_probs, create_model

log = logging.getLogger(__name__)


@dataclass
class AttentionMaps:
    """``maps``: (layers, grid_h, grid_w) CLS attention to each patch (rows sum to 1 over patches + prefix)."""

    model: str
    maps: np.ndarray
    source: str  # where the weights came from, for the figure footer


def cls_attention_maps(model: nn.Module, image: torch.Tensor) -> np.ndarray:
    """CLS attention per layer for one [0, 1] image (C, H, W); returns (layers, grid_h, grid_w)."""
    blocks = getattr(model, "blocks", None)
    if blocks is None or not hasattr(model, "patch_embed"):
        raise RobfiltError("attention maps need a DeiT-style model (blocks and patch_embed).")
    inputs: list[torch.Tensor] = []
    hooks = [blk.attn.register_forward_hook(lambda m, args, out: inputs.append(args[0].detach())) for blk in blocks]
    try:
        with torch.no_grad():
            model.eval()(image.unsqueeze(0))
            grid = tuple(model.patch_embed.grid_size)
            prefix = int(getattr(model, "num_prefix_tokens", 1))
            maps = []
            for blk, x in zip(blocks, inputs, strict=True):
                probs = attention_probs(blk.attn, x)  # (1, H, N, N)
                cls = probs[0, :, 0, prefix:].mean(0)
                maps.append(cls.reshape(grid).cpu().numpy())
    finally:
        for h in hooks:
            h.remove()
    return np.stack(maps)


def load_for_maps(
    name: str, size: str = "micro", checkpoint: str | None = "zoo", seed: int = 0
) -> tuple[nn.Module, str]:
    """The model as the run used it: zoo/checkpoint weights, or untrained (seeded) with a note in ``source``."""
    if checkpoint not in (None, "none"):
        try:
            model = create_model(name, size, checkpoint=checkpoint)
            card = getattr(model, "robfilt_card", {}) or {}
            sha = str(card.get("weights_sha256", ""))[:8]
            return model, f"{name}: {checkpoint} weights{' ' + sha if sha else ''}"
        except RobfiltError as exc:
            log.warning("attention maps: %s; using untrained %s weights (seed %d)", exc, name, seed)
    torch.manual_seed(seed)
    return create_model(name, size), f"{name}: untrained (seed {seed})"


def attention_maps(
    names: list[str], image: torch.Tensor, size: str = "micro", checkpoint: str | None = "zoo", seed: int = 0
) -> list[AttentionMaps]:
    out = []
    for name in names:
        model, source = load_for_maps(name, size, checkpoint, seed)
        out.append(AttentionMaps(name, cls_attention_maps(model, image), source))
    return out
