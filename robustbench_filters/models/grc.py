"""Boosting residual connection (GRC).

Iterative image boosting feeds the original signal back at every step. For every residual sublayer F
(attention, and the MLP unless ``sublayers="attn"``) the stack computes

    Y <- Y + F(LN(Y)) + lambda * (Y_0 - Y)          Y_0 = the input of the first block

so each step maps Y to (1 - lambda) Y + F(LN(Y)) + lambda Y_0, with Lipschitz constant (1 - lambda) + L_F
instead of 1 + L_F. lambda = 0 is exactly the stock pre-norm block.

:class:`BlockStack` replaces a model's ``blocks`` (an ``nn.Sequential`` of timm ``Block``) and threads Y_0.
It subclasses ``nn.Sequential`` so the block keys stay ``blocks.0.attn.qkv.weight`` etc.
"""

from __future__ import annotations

import math
from enum import Enum

import torch
from torch import nn

from ..core.errors import RobfiltError


class GrcSublayers(str, Enum):
    """Which residual sublayers get the boosting term."""

    ALL = "all"
    ATTN = "attn"


def validate_lambda(value: float) -> float:
    """lambda must be in [0, 1): at 1 the block forgets its input entirely."""
    try:
        value = float(value)
    except (TypeError, ValueError):  # e.g. a string from a config file: still a one-line user error
        raise RobfiltError(f"grc_lambda must be a number in [0, 1), got {value!r}.") from None
    if not (0.0 <= value < 1.0) or math.isnan(value):
        raise RobfiltError(f"grc_lambda must be in [0, 1), got {value}; pass e.g. grc_lambda=0.1.")
    return value


def boost(y: torch.Tensor, f_y: torch.Tensor, y0: torch.Tensor, lam: torch.Tensor | float) -> torch.Tensor:
    """One boosting residual step: Y + F(Y) + lambda (Y_0 - Y)."""
    return y + f_y + lam * (y0 - y)


class BlockStack(nn.Sequential):
    """A stack of pre-norm timm ``Block`` modules with an optional boosting residual.

    With ``grc=False`` it computes exactly what ``nn.Sequential`` of the blocks computes (the LM also uses it
    for that, because it needs ``is_causal``).

    Args:
        blocks: the blocks, in order (timm ``Block`` or anything with norm1/attn/ls1/drop_path1, norm2/mlp/...).
        grc: enable the boosting term.
        grc_lambda: initial (or fixed) lambda in [0, 1).
        grc_learnable: learn one lambda per block and sublayer, parametrised as sigmoid(logit) in (0, 1).
        grc_sublayers: ``all`` (attention and MLP) or ``attn`` (attention only).
    """

    def __init__(
        self,
        blocks: list[nn.Module],
        grc: bool = False,
        grc_lambda: float = 0.1,
        grc_learnable: bool = False,
        grc_sublayers: str = "all",
    ) -> None:
        super().__init__(*blocks)
        self.grc = bool(grc)
        self.grc_sublayers = GrcSublayers(grc_sublayers)
        self.grc_learnable = bool(grc_learnable)
        lam = validate_lambda(grc_lambda)
        if not self.grc:
            return
        n_sub = 2 if self.grc_sublayers is GrcSublayers.ALL else 1
        init = torch.full((len(blocks), n_sub), lam)
        if self.grc_learnable:
            # sigmoid keeps lambda inside (0, 1) while training; clamp the start away from the poles.
            init = init.clamp(1e-4, 1 - 1e-4)
            self.grc_logit = nn.Parameter(torch.log(init) - torch.log1p(-init))
        else:
            self.register_buffer("grc_lambda", init)

    def lambdas(self) -> torch.Tensor:
        """Effective lambda per block and sublayer, shape (depth, 1 or 2)."""
        if not self.grc:
            return torch.zeros(len(self), 0)
        return torch.sigmoid(self.grc_logit) if self.grc_learnable else self.grc_lambda

    def forward(  # type: ignore[override]
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        if not self.grc:
            for blk in self:
                x = blk(x, attn_mask=attn_mask, is_causal=is_causal)
            return x
        y0 = x
        lam = self.lambdas().to(x.dtype)
        for i, blk in enumerate(self):
            attn_out = blk.drop_path1(blk.ls1(blk.attn(blk.norm1(x), attn_mask=attn_mask, is_causal=is_causal)))
            x = boost(x, attn_out, y0, lam[i, 0])
            mlp_out = blk.drop_path2(blk.ls2(blk.mlp(blk.norm2(x))))
            x = boost(x, mlp_out, y0, lam[i, 1]) if lam.shape[1] == 2 else x + mlp_out
        return x
