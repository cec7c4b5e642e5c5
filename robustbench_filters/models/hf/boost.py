"""GRC for Hugging Face decoder blocks: the boosting residual, lambda per block, and Y_0 for one forward pass.

Each residual sublayer F (attention, and the MLP unless ``grc_sublayers="attn"``) of a converted block computes

    Y <- Y + F(LN(Y)) + lambda * (Y_0 - Y)          Y_0 = the input of the first block

(docs/design.md; :func:`robustbench_filters.models.grc.boost`). lambda = 0 is the stock block, bit for bit.

Hugging Face models loop over their blocks themselves, so Y_0 cannot be threaded by replacing the block list (as
:class:`~robustbench_filters.models.grc.BlockStack` does for timm). Instead the converted blocks share one
:class:`Y0` holder: block 0 stores its input, the later blocks of the same forward read it. Every forward starts at
block 0, so a stored Y_0 is always the current pass's (with a KV cache too: Y_0 is per position).
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import FilterConfig
from ..grc import GrcSublayers


class Y0:
    """Y_0 of the forward pass in progress (a plain object, so it is neither a parameter nor a submodule)."""

    def __init__(self) -> None:
        self.value: torch.Tensor | None = None


class BoostedBlock:
    """Mixin for a decoder block: its lambdas (buffer ``grc_lambda`` or parameter ``grc_logit``) and Y_0."""

    grc_index: int
    _grc_y0: Y0

    def setup_grc(self, index: int, settings: FilterConfig, y0: Y0, like: torch.Tensor) -> None:
        """Give a block (already of this class) its index, shared Y_0 holder and lambdas (dtype/device of ``like``)."""
        assert isinstance(self, nn.Module)
        self.grc_index = index
        self._grc_y0 = y0
        n_sub = 2 if GrcSublayers(settings.grc_sublayers) is GrcSublayers.ALL else 1
        init = torch.full((n_sub,), float(settings.grc_lambda), device=like.device, dtype=like.dtype)
        if settings.grc_learnable:
            init = init.clamp(1e-4, 1 - 1e-4)  # sigmoid keeps lambda in (0, 1); start away from the poles
            self.grc_logit = nn.Parameter(torch.log(init) - torch.log1p(-init))
        else:
            self.register_buffer("grc_lambda", init)

    def grc_lambdas(self) -> torch.Tensor:
        """Effective lambda per sublayer: (attention, MLP) or (attention,)."""
        if hasattr(self, "grc_logit"):
            return torch.sigmoid(self.grc_logit)
        return self.grc_lambda

    def grc_y0(self, x: torch.Tensor) -> torch.Tensor:
        """Block 0 records its input as Y_0; every block returns the current Y_0."""
        if self.grc_index == 0:
            self._grc_y0.value = x
        y0 = self._grc_y0.value
        if y0 is None or y0.shape != x.shape:
            raise RuntimeError("GRC block ran before block 0 of the same forward pass")
        return y0
