"""GPT-style causal language model (nanoGPT layout) with BSA and GRC.

Token embedding -> (+ learned positions, baseline only) -> pre-norm timm ``Block`` stack -> LayerNorm ->
tied LM head. Returns full-sequence logits. In BSA variants positions enter only through the attention
bias: the Gaussian kernel uses the one-sided index distance (i - j)^2 under the causal mask.

``forward_embeddings`` takes token embeddings directly, which is where embedding-space attacks perturb.
"""

from __future__ import annotations

import torch
from timm.layers import Attention
from timm.models.vision_transformer import Block
from torch import nn

from ..core.errors import RobfiltError
from .bsa import BilateralAttention, PosKernel, bsa_layer
from .config import LMConfig
from .deit import set_fused_attn
from .grc import BlockStack

LM_SIZES: dict[str, dict] = {
    "micro": dict(block_size=128, n_layer=3, n_head=4, n_embd=128),
    "small": dict(block_size=256, n_layer=6, n_head=6, n_embd=384),
}


class CausalLM(nn.Module):
    """A small GPT with a config dataclass, a ``fused_attn`` switch and full-sequence logits."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        c = config
        self.tok_embed = nn.Embedding(c.vocab_size, c.n_embd)
        uses_positions = not c.bsa or c.pos_kernel == PosKernel.UNTIED.value
        # Baseline: added to tokens. Untied BSA: fed to the attention bias only. Gaussian BSA: none.
        self.pos_embed = nn.Parameter(torch.zeros(1, c.block_size, c.n_embd)) if uses_positions else None
        self.add_positions = not c.bsa
        self.drop = nn.Dropout(c.dropout)
        attn_layer = bsa_layer(c.pos_kernel, c.bsa_sigma) if c.bsa else Attention
        blocks = [
            Block(
                c.n_embd,
                c.n_head,
                mlp_ratio=c.mlp_ratio,
                qkv_bias=c.bias,
                proj_bias=c.bias,
                proj_drop=c.dropout,
                attn_drop=c.dropout,
                attn_layer=attn_layer,
            )
            for _ in range(c.n_layer)
        ]
        self.blocks = BlockStack(
            blocks,
            grc=c.grc,
            grc_lambda=c.grc_lambda,
            grc_learnable=c.grc_learnable,
            grc_sublayers=c.grc_sublayers,
        )
        self.norm = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.lm_head.weight = self.tok_embed.weight  # weight tying, as in GPT-2
        self.apply(self._init_weights)
        if self.pos_embed is not None:
            nn.init.normal_(self.pos_embed, std=0.02)
        for module in self.modules():
            if isinstance(module, BilateralAttention):
                module.configure(grid=None, num_prefix_tokens=0, pos_owner=self if not self.add_positions else None)
        set_fused_attn(self, c.fused_attn)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """Token embeddings (B, T, C): the input space of embedding attacks and Lipschitz estimates."""
        return self.tok_embed(idx)

    def forward_embeddings(self, emb: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) from token embeddings (positions are added here for the baseline)."""
        t = emb.shape[1]
        if t > self.config.block_size:
            # RobfiltError (a ValueError): a too-long input is a user error, so the CLI prints one line, no traceback.
            raise RobfiltError(
                f"sequence length {t} exceeds block_size {self.config.block_size}; "
                "use shorter sequences or build the model with a larger block_size."
            )
        x = emb + self.pos_embed[:, :t] if self.add_positions else emb
        x = self.blocks(self.drop(x), is_causal=True)
        return self.lm_head(self.norm(x))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.forward_embeddings(self.embed(idx))

    @property
    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
