"""CLS-token attention maps per layer, for comparing softmax attention with BSA on one image.

Fused attention never materialises the attention matrix, so each block's attention input (the output of its
``norm1``) is captured with a forward hook and the matrix is recomputed from the layer's own weights by
:func:`.bsa.attention_probs`. The CLS row, averaged over heads and restricted to the patch tokens, is reshaped to
the patch grid (7 x 7 for the micro DeiT on 28 x 28 images). Image attack runs record these maps in their summary,
so reports draw them from the run folder without loading a model.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .bsa import attention_probs


def supports_attention_maps(model: nn.Module) -> bool:
    """DeiT-style models (a patch embedding and blocks with an attention layer) have CLS attention maps."""
    blocks = getattr(model, "blocks", None)
    return (
        blocks is not None
        and hasattr(model, "patch_embed")
        and hasattr(getattr(model, "patch_embed", None), "grid_size")
        and all(hasattr(b, "attn") for b in blocks)
    )


def cls_attention_maps(model: nn.Module, image: torch.Tensor) -> np.ndarray:
    """CLS attention per layer for one [0, 1] image (C, H, W); returns (layers, grid_h, grid_w)."""
    blocks = model.blocks
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
                maps.append(cls.reshape(grid).float().cpu().numpy())
    finally:
        for h in hooks:
            h.remove()
    return np.stack(maps)
