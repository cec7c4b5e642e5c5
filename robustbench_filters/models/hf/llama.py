"""GRC for Llama-style decoder blocks (Llama, Mistral, Qwen2): pre-RMSNorm attention and MLP sublayers.

Every residual sublayer of a converted layer computes ``Y + F(norm(Y)) + lambda (Y_0 - Y)`` (:mod:`.boost`); with
lambda = 0 it is the stock layer, bit for bit. The layer keeps its parameter names and gains ``grc_lambda`` (or
``grc_logit`` when learnable); conversion swaps the classes of the existing layers in place.

BSA is not defined for these models, and :func:`.convert.convert` refuses it: BSA removes the content-position
cross terms e_i.p_j that *additive* position embeddings put into the attention logits. Rotary models add no
positions; the rotation multiplies position into q and k (``q_i^T R_(j-i) k_j``), so there is no cross term to
separate, and dropping the rotation for a Gaussian position bias would discard what the pretrained weights rely on
rather than filter it.
"""

from __future__ import annotations

import torch
from torch import nn

from ...core.errors import RobfiltError
from ..config import FilterConfig
from ..grc import boost
from .boost import Y0, BoostedBlock

#: model types whose decoder layers have Llama's structure and call signature (checked in transformers 5.x).
LLAMA_STYLE: tuple[str, ...] = ("llama", "mistral", "qwen2")
_SUBLAYERS = ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp")


class GRCLlamaLayer(BoostedBlock):
    """Mixin with the boosted forward of a Llama-style decoder layer (combined with the stock layer class)."""

    def forward(  # type: ignore[override]
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: object | None = None,
        use_cache: bool | None = False,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs: object,
    ) -> torch.Tensor:
        y0 = self.grc_y0(hidden_states)
        lam = self.grc_lambdas().to(hidden_states.dtype)
        attn_out, _ = self.self_attn(
            hidden_states=self.input_layernorm(hidden_states),
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=use_cache,
            position_embeddings=position_embeddings,
            **kwargs,
        )
        x = boost(hidden_states, attn_out, y0, lam[0])
        mlp_out = self.mlp(self.post_attention_layernorm(x))
        return boost(x, mlp_out, y0, lam[1]) if lam.numel() == 2 else x + mlp_out


_CLASSES: dict[type, type] = {}


def _grc_class(base: type) -> type:
    """``GRC<Base>``: the stock layer class with the boosted forward first in its MRO (one class per base)."""
    if base not in _CLASSES:
        _CLASSES[base] = type(f"GRC{base.__name__}", (GRCLlamaLayer, base), {"__module__": __name__})
    return _CLASSES[base]


def convert_llama_grc(model: nn.Module, settings: FilterConfig) -> None:
    """Convert every decoder layer of a Llama-style causal LM in place to GRC."""
    layers = model.model.layers
    y0 = Y0()
    for i, layer in enumerate(layers):
        base = type(layer)
        if not base.__name__.endswith("DecoderLayer") or not all(hasattr(layer, n) for n in _SUBLAYERS):
            raise RobfiltError(
                f"model.layers.{i} is a {base.__name__} without Llama's sublayers ({', '.join(_SUBLAYERS)}); "
                "GRC converts Llama-style decoder layers only."
            )
        layer.__class__ = _grc_class(base)
        layer.setup_grc(i, settings, y0, model.get_input_embeddings().weight)
